"""The corpus programs (kept out of the test module so that pytest's assertion rewriting
leaves their ``assert`` statements as Python runs them), with their inputs: ``CASES`` for
functions (``REGRESSION_CASES``, bugs the corpus found, among them), ``MODULE_CASES`` for
modules, and ``BUG_CASES``/``MODULE_BUG_CASES``: programs the frontend gets wrong today, each
a strict xfail in test_corpus.py whose reason names the bug."""
from __future__ import annotations

import math
from typing import Callable, Dict, List, Optional, Tuple

import scriptmod as sm
import scriptmod.nn.functional as F
from scriptmod import Tensor, nn

from .script_util import tensor


# ---- assignment -----------------------------------------------------------------------

def swap_unpack(x: Tensor, y: Tensor) -> Tensor:
    a, b = x, y
    a, b = b, a
    (c, d), e = (a, 2), b
    return c * d - e


def pair(x: Tensor, k: int) -> Tuple[Tensor, int]:
    return x * k, k + 1


def unpack_call(x: Tensor, k: int) -> Tensor:
    y, j = pair(x, k)
    rows, cols = x.shape[0], x.shape[1]
    return y + j + rows * cols


def augmented(x: Tensor, n: int, f: float) -> Tuple[Tensor, int, float]:
    i = n
    i += 2
    i *= 3
    i -= 1
    i //= 2
    i %= 7
    f += 0.5
    f *= 2.0
    f /= 3.0
    y = x * 3.0
    y += 1.0
    y *= f
    y -= x
    return y, i, f


def augmented_in_place(x: Tensor) -> Tensor:
    x += 1.0
    x *= 2.0
    return x


def list_store(n: int) -> List[int]:
    xs = [1, 2, 3, 4]
    xs[0] = n
    xs[-1] = xs[1] * n
    xs[n % 4] += 10
    return xs


def tensor_store(x: Tensor, i: int) -> Tensor:
    y = x.clone()
    y[0] = y[0] * 0.0
    y[i] = y[i] * 3.0
    y[1:, 0] = y[1:, 1] - 1.0
    y[:, -1] += 5.0
    return y


def annotated_locals(n: int) -> Tuple[List[int], Optional[int], float]:
    xs: List[int] = []
    best: Optional[int] = None
    total: float = 0
    for i in range(n):
        xs.append(i * i)
        total += i
        if i % 2 == 1:
            best = i
    return xs, best, total


# ---- if / elif / else ------------------------------------------------------------------

def sign_of(n: int) -> str:
    if n > 0:
        s = "positive"
    elif n < 0:
        s = "negative"
    else:
        s = "zero"
    return s


def tensor_branch(x: Tensor) -> Tensor:
    if bool(x.sum() > 0):
        y = x.relu()
    elif bool(x.max() > -0.5):
        y = x * 2.0
    else:
        y = -x
    return y + 1.0


def nested_if(x: Tensor, a: int, b: int) -> Tensor:
    if a > 0:
        if b > 0:
            x = x + 1.0
        else:
            x = x - 1.0
            if b < -5:
                x = x * 10.0
    else:
        pass
    return x


def if_without_else(x: Tensor, flag: bool) -> Tensor:
    y = x
    if flag:
        y = y.exp()
    return y


# ---- for loops -------------------------------------------------------------------------

def range_forms(a: int, b: int, c: int) -> List[int]:
    out: List[int] = []
    for i in range(a):
        out.append(i)
    for i in range(a, b):
        out.append(10 * i)
    for i in range(a, b, c):
        out.append(100 * i)
    for i in range(b, a, -c):
        out.append(-i)
    return out


def range_negative_step(n: int) -> int:
    total = 0
    for i in range(n, -n, -2):
        total = total * 3 + i
    return total


def for_over_list(n: int, x: Tensor) -> Tensor:
    xs = [1, n, 3]
    for k in xs:
        x = x + k
    for t in [x, x * 2.0, x * 3.0]:
        x = x + t
    return x


def for_over_tuple(x: Tensor) -> Tensor:
    for scale in (1.0, 2.0, 0.5):
        x = x * scale + 1.0
    for t in (x, x.relu(), x.tanh()):
        x = x + t
    return x


def for_enumerate(n: int, f: float) -> float:
    xs = [f * i - 1.0 for i in range(n)]
    total = 0.0
    for i, v in enumerate(xs):
        total += i * v
    return total


def for_zip(n: int, m: int, x: Tensor) -> Tuple[int, Tensor]:
    xs = [i + 1 for i in range(n)]
    ys = [2, -1, 4, 0, 3][:m]
    s = 0
    for a, b in zip(xs, ys):
        s += a * b
    for row, w in zip(x, ys):
        x = x + row * w
    return s, x


def for_tensor_rows(x: Tensor) -> Tensor:
    acc = sm.zeros_like(x[0])
    for row in x:
        acc = acc + row * row
    return acc


def for_enumerate_tensor(x: Tensor) -> Tensor:
    out = x[0] * 0.0
    for i, row in enumerate(x):
        out = out + row * i
    return out


# ---- while, break, continue, return ----------------------------------------------------

def collatz_steps(n: int) -> int:
    steps = 0
    while n != 1:
        if n % 2 == 0:
            n = n // 2
        else:
            n = 3 * n + 1
        steps += 1
    return steps


def halve_until(x: Tensor, limit: float) -> Tuple[Tensor, int]:
    k = 0
    while bool(x.abs().max() > limit):
        x = x * 0.5
        k += 1
    return x, k


def break_in_for(n: int, stop: int) -> int:
    xs = [i * i % 7 for i in range(n)]
    total = 0
    for v in xs:
        if v == stop:
            break
        total += v
    return total


def continue_in_for(n: int) -> int:
    total = 0
    for i in range(n):
        if i % 3 == 0:
            continue
        total += i
    return total


def while_break_continue(x: Tensor, k: int) -> Tensor:
    i = 0
    while i < k:
        i += 1
        if i == 2:
            continue
        if i > 4:
            break
        x = x + i
    return x


def nested_break_continue(n: int, m: int) -> List[int]:
    out: List[int] = []
    for i in range(n):
        if i == 3:
            continue
        for j in range(m):
            if j > i:
                break
            if (i + j) % 2 == 1:
                continue
            out.append(i * 10 + j)
        if len(out) > 6:
            break
    return out


def early_return(x: Tensor, n: int) -> Tensor:
    if n < 0:
        return -x
    if n == 0:
        return x * 0.0
    y = x + n
    return y


def return_in_loop(x: Tensor, t: float) -> Tuple[Tensor, int]:
    for i in range(10):
        if float(x.sum()) > t:
            return x, i
        x = x + 1.0
    return x, -1


def return_in_nested_loops(n: int, target: int) -> Tuple[int, int]:
    for i in range(n):
        for j in range(n):
            if i * j == target:
                return i, j
    return -1, -1


def return_in_while(n: int, neg_at: int) -> int:
    xs = [neg_at - i for i in range(n)]
    i = 0
    while i < len(xs):
        if xs[i] < 0:
            return i
        i += 1
    return -1


def with_pass(x: Tensor, n: int) -> Tensor:
    for i in range(n):
        pass
    if n > 1:
        pass
    else:
        x = x + 1.0
    return x


# ---- expressions -----------------------------------------------------------------------

def int_arith(a: int, b: int) -> Tuple[int, int, int, int, int, int, float, int]:
    return a + b, a - b, a * b, a // b, a % b, a ** 2, a / b, -a


def float_arith(a: float, b: float) -> Tuple[float, float, float, float, float, float]:
    return a + b, a - b, a * b, a / b, a ** 2.0, -a + 2 * b


def mixed_arith(a: int, b: float, x: Tensor) -> Tensor:
    c = a * b + a / 2
    return x * c - a + b ** 2 - x / (b + 10.0) + 2 ** x


def comparisons(a: int, b: int, f: float) -> List[bool]:
    return [a < b, a <= b, a > b, a >= b, a == b, a != b, f < a, 0 <= a < b, a < b <= f,
            a == b == 3]


def tensor_comparisons(x: Tensor, y: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    return x < y, (x >= 0.0) & (y != x), x.eq(y) | (x > 1.0)


def short_circuit(i: int) -> Tuple[bool, bool, bool]:
    xs = [1, -2, 0]
    a = i < len(xs) and xs[i] > 0
    b = i >= len(xs) or xs[i] < 0
    c = not (i < len(xs) and xs[i] == 0)
    return a, b, c


def bool_values(a: int, b: bool) -> Tuple[bool, bool, bool]:
    return bool(a and b), bool(a or b), not a


def conditional_expr(x: Tensor, n: int) -> Tuple[Tensor, int, str]:
    y = x * 2.0 if n > 0 else x - 1.0
    k = n if n % 2 == 0 else -n
    return y, k, "even" if n % 2 == 0 else "odd"


def tensor_methods(x: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    a = x.sum(0) + x.mean(dim=1).sum()
    b = x.reshape(-1).view(2, -1).transpose(0, 1).contiguous()
    c = x.matmul(x.t()).softmax(-1)
    d = x.clamp(-0.5, 0.5).exp().log1p().unsqueeze(0).squeeze(0)
    return a, b, c, d


def library_functions(x: Tensor, y: Tensor) -> Tensor:
    m = sm.where(x > y, x, y)
    z = sm.maximum(x, y) - sm.minimum(x, y) + sm.matmul(x, y.t()).sum(1, keepdim=True)
    return z.sum() + sm.tanh(m) + sm.zeros_like(x) + sm.ones(2, 3) + sm.softmax(y, 1)


def functional_calls(x: Tensor, w: Tensor) -> Tensor:
    h = F.linear(x, w)
    h = F.relu(h) + F.gelu(h) + F.silu(h)
    return F.softmax(h, dim=-1) + F.layer_norm(h, [3])


def helper_scale(x: Tensor, k: float = 2.0) -> Tensor:
    return x * k


def helper_sum(xs: List[Tensor]) -> Tensor:
    out = xs[0]
    for t in xs[1:]:
        out = out + helper_scale(t, 0.5)
    return out


def calls_user_functions(x: Tensor, n: int) -> Tensor:
    a = helper_scale(x)
    b = helper_scale(x, 3.0)
    parts = [a, b]
    for i in range(n):
        parts.append(helper_scale(x, float(i)))
    return helper_sum(parts)


def literals(n: int) -> Tuple[List[int], Tuple[int, str], Dict[str, int], int]:
    xs = [n, n + 1, n * 2]
    t = (n, "n")
    d = {"a": n, "b": n * n}
    d["c"] = xs[2]
    total = 0
    for k in d.keys():
        total += d[k]
    return xs, t, d, total


def dict_ops(n: int) -> Tuple[Dict[str, int], bool, bool, int]:
    d = {"zero": 0}
    for i, k in enumerate(["a", "b", "c"]):
        if i < n:
            d[k] = i * n
    s = 0
    for v in d.values():
        s += v
    return d, "a" in d, "zz" not in d, s


def dict_counter(n: int) -> Dict[str, int]:
    d = {"calls": 0, "n": n}
    for _ in range(n):
        d["calls"] = d["calls"] + 1
    return d


def list_comprehension(n: int, x: Tensor) -> Tuple[List[int], Tensor]:
    sq = [i * i for i in range(n)]
    ts = [x * v for v in sq]
    out = x * 0.0
    for t in ts:
        out = out + t
    return sq, out


def tensor_indexing(x: Tensor, i: int) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    return x[i], x[-1, 1:], x[::2, i], x[None, 0], x[..., 1:3]


def tensor_slicing(x: Tensor, a: int, b: int) -> Tuple[Tensor, Tensor, Tensor]:
    return x[a:b], x[:, a:], x[1:-1:2]


def list_index_slice(n: int, i: int) -> Tuple[int, List[int], List[int], List[int], int]:
    xs = [3 * k for k in range(n)]
    return xs[i], xs[1:], xs[:i], xs[::2], xs[-1]


def builtins_calls(n: int, a: int, f: float) -> Tuple[int, int, int, int, float, int,
                                                      float, bool, bool, float, float]:
    xs = [a for _ in range(n)]
    return (len(xs), min(a, 3), max(a, -3), abs(a), abs(f), int(f), float(a), bool(a),
            bool(f), min(f, 1.0), max(f, float(a)))


def tensor_builtins(x: Tensor) -> Tuple[int, float, int, Tensor, Tensor, bool]:
    return (len(x), float(x.sum()), int(x.abs().max() * 10), abs(x), -abs(x),
            bool(x.sum() > 0))


def printing(x: Tensor, n: int) -> int:
    print("n is", n, "and half is", n / 2)
    for i in range(n):
        print(f"step {i}: {i * 1.5:.2f} {'odd' if i % 2 else 'even'}")
    print(f"{n:03d}|{n!r}|{float(n):8.3f}")
    return n


def print_tensor(x: Tensor) -> Tensor:
    print(x)
    print("sum", x.sum())
    return x


def raise_after_print(x: Tensor, n: int) -> Tensor:
    for i in range(n):
        print("before", i)
        if i == 1:
            raise RuntimeError("stopped")
        print("after", i)
    return x


def strings(a: str, n: int) -> Tuple[str, str, bool, bool]:
    b = a + "!" * n
    return b, f"[{a}:{n}]", a == "hi", a != b


def optional_tensor(x: Tensor, y: Optional[Tensor] = None) -> Tensor:
    if y is not None:
        return x + y
    return x * 2.0


def optional_int(x: Tensor, n: Optional[int]) -> Tensor:
    if n is None:
        n = 3
    return x * n


def optional_else_branch(x: Tensor, bias: Optional[Tensor]) -> Tensor:
    if bias is None:
        out = x
    else:
        out = x + bias
    return out


def optional_filled_in(x: Tensor, y: Optional[Tensor]) -> Tensor:
    if y is None:
        y = x * 2.0
    return x + y


def optional_copied_then_refined(x: Tensor, y: Optional[Tensor]) -> Tensor:
    z = y
    if z is not None:
        x = x + z
    return x


def optional_list_items(x: Tensor, ys: List[Optional[int]]) -> Tensor:
    for v in ys:
        if v is not None:
            x = x + v
    return x


def typing_annotations(t: Tuple[int, Tensor], d: Dict[str, float], o: Optional[Tensor],
                       n: Optional[int]) -> Tuple[List[int], Optional[int], Tensor]:
    xs: List[int] = [0]
    k, x = t
    for i in range(k):
        xs.append(i)
    if o is not None:
        x = x + o
    m: Optional[int] = None
    if n is not None:
        m = n + len(xs)
    return xs, m, x * d["w"]


def builtin_annotations(t: tuple[int, Tensor], d: dict[str, float], o: Tensor | None,
                        n: int | None) -> tuple[list[int], int | None, Tensor]:
    xs: list[int] = [0]
    k, x = t
    for i in range(k):
        xs.append(i)
    if o is not None:
        x = x + o
    m: Optional[int] = None
    if n is not None:
        m = n + len(xs)
    return xs, m, x * d["w"]


def fibonacci(n: int) -> List[int]:
    a, b = 0, 1
    out: List[int] = []
    for _ in range(n):
        out.append(a)
        a, b = b, a + b
    return out


def accumulate_rows(x: Tensor, stop: float) -> Tensor:
    acc = sm.zeros(x.size(1))
    for i in range(x.shape[0]):
        acc += x[i]
        if float(acc.sum()) > stop:
            break
    return acc


def unary_ops(x: Tensor, n: int, b: bool) -> Tuple[Tensor, int, bool, Tensor]:
    return -x, -n, not b, ~(x > 0)


def rnn_like(x: Tensor, h: Tensor, w: Tensor, threshold: float) -> Tuple[Tensor, int]:
    steps = 0
    for t in range(x.shape[0]):
        h = sm.tanh(x[t] + h.matmul(w))
        steps += 1
        if float(h.abs().mean()) > threshold:
            break
    return h, steps


# ---- modules ---------------------------------------------------------------------------

class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(self.fc(x)) + x


class LoopNet(nn.Module):
    """ModuleList loop, a helper method with a loop, an int attribute, a Sequential."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(4, 6)
        self.blocks = nn.ModuleList([Block(6), Block(6), Block(6)])
        self.head = nn.Sequential(nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 2))
        self.scale = 0.5
        self.repeats = 2

    def shrink(self, x: Tensor, k: int) -> Tensor:
        for _ in range(k):
            x = x * self.scale
        return x

    def forward(self, x: Tensor, k: int) -> Tensor:
        h = self.inp(x)
        for blk in self.blocks:
            h = blk(h)
        for _ in range(self.repeats):
            h = self.blocks[0](h)
        h = self.shrink(h, k)
        return self.head(h).softmax(-1)


class SeqLoop(nn.Module):
    """for over a Sequential, and calling it."""

    def __init__(self) -> None:
        super().__init__()
        self.seq = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 3))

    def forward(self, x: Tensor) -> Tensor:
        y = x
        for layer in self.seq:
            y = layer(y)
        return y + self.seq(x)


class EarlyExit(nn.Module):
    """A data-dependent early exit over a ModuleList-free loop, with a buffer and training."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.Linear(4, 4)
        self.register_buffer("threshold", sm.tensor([0.3]))

    def forward(self, x: Tensor, steps: int) -> Tuple[Tensor, int]:
        h = x
        used = 0
        for i in range(steps):
            h = sm.tanh(self.cell(h))
            used = i + 1
            if bool((h.abs().mean() < self.threshold).all()):
                break
        if self.training:
            h = h * 1.0
        return h, used


class OptionalArgs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x: Tensor, mask: Optional[Tensor] = None, scale: float = 1.0) -> Tensor:
        y = self.fc(x) * scale
        if mask is not None:
            y = y * mask
        return y


class WithRaise(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)

    def forward(self, x: Tensor, n: int) -> Tensor:
        if n < 0:
            raise ValueError("n must not be negative")
        out = x
        for _ in range(n):
            out = self.fc(out)
        return out


def _seeded(make: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        sm.manual_seed(0)
        return make()
    return build


# ---- the table -------------------------------------------------------------------------

X23 = tensor(2, 3, seed=1)
X34 = tensor(3, 4, seed=2)
X4 = tensor(4, seed=3)
RNN_ARGS = (tensor(8, 4, seed=7), sm.zeros(4), tensor(4, 4, seed=8) * 0.5, 0.7)  # 4 of 8 steps

CASES: list[tuple[Callable, list[tuple]]] = [
    (swap_unpack, [(X4, tensor(4, seed=9)), (X23, X23 * 2.0)]),
    (unpack_call, [(X23, 2), (X34, -1)]),
    (augmented, [(X4, 3, 1.5), (X23, -4, -2.0), (X4, 0, 0.0)]),
    (augmented_in_place, [(X4,), (X23,)]),
    (list_store, [(1,), (5,), (-2,)]),
    (tensor_store, [(X34, 1), (X34, -1), (tensor(2, 4, seed=5), 0)]),
    (annotated_locals, [(0,), (1,), (5,)]),
    (sign_of, [(3,), (-3,), (0,)]),
    (tensor_branch, [(X4,), (-X4.abs(),), (-X4.abs() - 1.0,)]),
    (nested_if, [(X4, 1, 1), (X4, 1, -1), (X4, 1, -9), (X4, 0, 5)]),
    (if_without_else, [(X4, True), (X4, False)]),
    (range_forms, [(0, 0, 1), (2, 7, 2), (3, 10, 3), (5, 2, 1), (-2, 3, 4)]),
    (range_negative_step, [(0,), (3,), (6,)]),
    (for_over_list, [(2, X4), (-5, X23)]),
    (for_over_tuple, [(X4,), (X23,)]),
    (for_enumerate, [(0, 1.5), (4, -2.5)]),
    (for_zip, [(3, 2, X23), (2, 3, X34), (0, 2, X23), (5, 5, X34)]),
    (for_tensor_rows, [(X23,), (X34,), (tensor(1, 5, seed=4),)]),
    (for_enumerate_tensor, [(X34,), (X23,)]),
    (collatz_steps, [(1,), (6,), (27,)]),
    (halve_until, [(X4, 10.0), (X4 * 8.0, 0.5), (X4, 0.01)]),
    (break_in_for, [(6, 2), (6, 9), (0, 0)]),
    (continue_in_for, [(0,), (10,)]),
    (while_break_continue, [(X4, 0), (X4, 2), (X4, 7)]),
    (nested_break_continue, [(0, 3), (3, 3), (6, 4), (9, 9)]),
    (early_return, [(X4, -1), (X4, 0), (X4, 3)]),
    (return_in_loop, [(sm.zeros(2), 5.0), (sm.zeros(2), 100.0), (X4, -10.0)]),
    (return_in_nested_loops, [(4, 6), (4, 7), (0, 0), (3, 0)]),
    (return_in_while, [(5, 2), (3, 4), (0, 0)]),
    (with_pass, [(X4, 0), (X4, 3)]),
    (int_arith, [(7, 3), (-7, 3), (7, -3), (0, 5)]),
    (float_arith, [(1.5, 2.0), (-3.25, 0.5)]),
    (mixed_arith, [(3, 0.5, X4), (-2, 1.25, X23)]),
    (comparisons, [(1, 2, 1.5), (2, 2, 3.0), (3, 2, 2.5), (3, 3, 0.0)]),
    (tensor_comparisons, [(X4, tensor(4, seed=8)), (X23, X23)]),
    (short_circuit, [(0,), (1,), (2,), (7,)]),
    (bool_values, [(0, True), (2, False), (3, True)]),
    (conditional_expr, [(X4, 2), (X4, -3), (X4, 0)]),
    (tensor_methods, [(X23,), (X34,)]),
    (library_functions, [(X23, tensor(2, 3, seed=6))]),
    (functional_calls, [(X23, X34[:, :3].t().contiguous()), (X34[:, :3].contiguous(), X34[:, :3])]),
    (calls_user_functions, [(X4, 0), (X4, 3)]),
    (literals, [(0,), (4,)]),
    (dict_ops, [(0,), (2,), (3,)]),
    (dict_counter, [(0,), (3,)]),
    (list_comprehension, [(0, X4), (4, X4)]),
    (tensor_indexing, [(X34, 0), (X34, 2), (X34, -1)]),
    (tensor_slicing, [(X34, 0, 2), (X34, 1, 3), (X34, -2, -1)]),
    (list_index_slice, [(5, 2), (1, 0), (3, -1)]),
    (builtins_calls, [(2, 5, -2.5), (0, -7, 3.75), (1, 0, 0.0)]),
    (tensor_builtins, [(X4,), (-X23,)]),
    (strings, [("hi", 2), ("bye", 0)]),
    (optional_tensor, [(X4, X4 * 2.0), (X4, None), (X4,)]),
    (optional_int, [(X4, 2), (X4, None)]),
    (optional_else_branch, [(X23, X23[0]), (X23, None)]),
    (optional_filled_in, [(X4, X4 * 3.0), (X4, None)]),
    (optional_copied_then_refined, [(X4, X4 * 3.0), (X4, None)]),
    (optional_list_items, [(X4, [1, None, 2]), (X4, [None]), (X4, [])]),
    (typing_annotations, [((3, X4), {"w": 2.0}, X4, 5), ((0, X23), {"w": 1.0}, None, None)]),
    (builtin_annotations, [((3, X4), {"w": 2.0}, X4, 5), ((0, X23), {"w": 1.0}, None, None)]),
    (fibonacci, [(0,), (1,), (12,)]),
    (accumulate_rows, [(X34, 100.0), (X34.abs(), 1.0), (X34, -100.0)]),
    (unary_ops, [(X4, 3, True), (X23, -2, False)]),
    (rnn_like, [(tensor(8, 4, seed=7), sm.zeros(4), tensor(4, 4, seed=8) * 0.5, 2.0),
                RNN_ARGS]),
]

MODULE_CASES: list[tuple[str, Callable[[], nn.Module], list[tuple]]] = [
    ("LoopNet", _seeded(LoopNet), [(X34, 0), (X34, 3), (tensor(5, 4, seed=11), 1)]),
    ("SeqLoop", _seeded(SeqLoop), [(X23,), (X34[:, :3].contiguous(),)]),
    ("EarlyExit", _seeded(EarlyExit), [(X4, 0), (X4, 3), (X4 * 0.1, 20), (X4, 50)]),
    ("OptionalArgs", _seeded(OptionalArgs), [(X23,), (X23, X23 > 0), (X23, None, 2.0)]),
]


# ---- regressions: each program was a frontend bug the corpus found (fixed since) --------

def identity_mul_then_in_place(x: Tensor) -> Tensor:
    y = x * 1.0
    y -= x
    return y


def store_python_scalar(x: Tensor) -> Tensor:
    y = x.clone()
    y[0] = 0.0
    return y


def list_argument(xs: List[int]) -> int:
    total = 0
    for v in xs:
        total += v
    return total + len(xs)


def list_argument_builtin(xs: list[float], k: int) -> float:
    return xs[k]


def optional_list_argument(o: Optional[List[float]]) -> float:
    if o is not None:
        return o[0]
    return 0.0


def cat_of_tensors(x: Tensor, y: Tensor) -> Tensor:
    return sm.cat([x, y], 0)


def stack_of_tensors(x: Tensor, y: Tensor) -> Tensor:
    return sm.stack((x, y), 1)


def zeros_of_shape_item(x: Tensor) -> Tensor:
    return sm.zeros(x.shape[1])


def empty_dict_annotated(n: int) -> Dict[str, int]:
    d: Dict[str, int] = {}
    d["n"] = n
    return d


def two_empty_lists(n: int) -> Tuple[List[int], List[int]]:
    xs: List[int] = []
    ys: List[int] = []
    for i in range(n):
        xs.append(i)
    return xs, ys


def two_comprehensions(n: int) -> Tuple[List[int], List[int]]:
    xs = [i + 1 for i in range(n)]
    ys = [2 * i for i in range(n)]
    return xs, ys


def assert_positive(x: Tensor, n: int) -> Tensor:
    assert n > 0, "n must be positive"
    assert n < 100
    return x * n


def raise_constant(n: int) -> int:
    if n == 0:
        raise RuntimeError("zero is not allowed")
    if n < 0:
        raise TypeError
    return 10 // n


def raise_f_string(x: Tensor, n: int) -> Tensor:
    if n > 2:
        raise ValueError(f"n is too big: {n} > 2")
    return x + n


class ValidateThenLayer(nn.Module):
    """Checks its input before the layer call: Python raises the user's ValueError."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)

    def forward(self, x: Tensor) -> Tensor:
        if x.size(-1) != 2:
            raise ValueError("expected 2 features")
        return self.fc(x)


def bool_of_list(n: int) -> bool:
    xs = [i for i in range(n)]
    return bool(xs)


def python_errors(a: int, b: int, k: str) -> Tuple[int, int, int]:
    xs = [1, 2, 3]
    d = {"a": 1}
    return a // b, xs[a], d[k]


REGRESSION_CASES: list[tuple[Callable, list[tuple]]] = [
    (identity_mul_then_in_place, [(X4,)]),          # y = x * 1.0; y -= x wrote into x
    (store_python_scalar, [(X4,), (X34,)]),          # y[0] = 0.0 failed in index_put
    (list_argument, [([1, 2, 3],), ([],)]),          # a List[int] argument became a tuple
    (list_argument_builtin, [([1.5, 2.5], 1), ([0.5], -1)]),
    (optional_list_argument, [([1.5],), (None,)]),
    (cat_of_tensors, [(X23, X23 * 2.0)]),            # a list of tensors as a library argument
    (stack_of_tensors, [(X23, X23 * 2.0)]),
    (zeros_of_shape_item, [(X34,), (X23,)]),         # x.shape[1] was a run-time int
    (empty_dict_annotated, [(3,)]),                  # d: Dict[str, int] = {}
    (two_empty_lists, [(0,), (3,)]),                 # two [] literals were one list
    (two_comprehensions, [(3,)]),
    (assert_positive, [(X4, 3), (X4, 0), (X4, 100)]),    # raised RaisedException
    (raise_constant, [(2,), (0,), (-1,)]),
    (raise_f_string, [(X4, 1), (X4, 3)]),            # the f-string message was dropped
    (bool_of_list, [(0,), (2,)]),                    # py_bool refused a list
    # ZeroDivisionError, IndexError, KeyError came out as InterpreterError
    (python_errors, [(1, 1, "a"), (1, 0, "a"), (7, 1, "a"), (1, 1, "z")]),
]
CASES += REGRESSION_CASES

MODULE_CASES += [
    ("WithRaise", _seeded(WithRaise), [(X23[:, :2].contiguous(), 2), (X23[:, :2], -1)]),
    # a layer call behind a check of the input: the check raises first, as in Python
    ("ValidateThenLayer", _seeded(ValidateThenLayer), [(X23[:, :2].contiguous(),), (X23,)]),
]


# ---- regressions: programs the frontend got wrong (each was a strict xfail naming the bug)

def len_of_str(s: str) -> int:                   # "cannot iterate over a str"
    return len(s)


def optional_isinstance(x: Tensor, k: Optional[int]) -> Tensor:
    if isinstance(k, int):
        return x + k
    return x


def optional_tensor_isinstance(x: Tensor, y: Optional[Tensor]) -> Tensor:
    if isinstance(y, sm.Tensor) and not isinstance(x, int):
        return x * y
    return x


def stack_of_appended_list(x: Tensor, n: int) -> Tensor:
    outs: List[Tensor] = []
    for i in range(n):
        outs.append(x * i)
    return sm.stack(outs, 0)


def shapes_equal(x: Tensor, y: Tensor) -> bool:
    return x.shape == y.shape


def early_exit_loop(x: Tensor, k: int) -> Tensor:
    for i in range(k):
        if i > 2:
            return x
        x = x * 0.5
    return x


def library_call_on_early_exit(x: Tensor, k: int) -> Tensor:
    return early_exit_loop(x, k).softmax(-1)


class LayerAfterEarlyExit(nn.Module):
    """A method that returns from inside a loop, its result fed to a layer."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def helper(self, x: Tensor, k: int) -> Tensor:
        for i in range(k):
            if i > 2:
                return x
            x = x * 0.5
        return x

    def forward(self, x: Tensor, k: int) -> Tensor:
        return self.fc(self.helper(x, k))


def refine_after_early_return(x: Tensor, y: Optional[Tensor]) -> Tensor:
    if y is None:
        return x
    return x + y


def refine_by_assert(x: Tensor, y: Optional[Tensor]) -> Tensor:
    assert y is not None, "y is required"
    return x + y


def refine_in_and(x: Tensor, y: Optional[Tensor]) -> Tensor:
    if y is not None and bool(y.sum() > 0):
        return x + y
    return x


def refine_in_or(x: Tensor, y: Optional[Tensor]) -> Tensor:
    if y is None or bool(y.sum() < 0):
        return x
    return x - y


def refine_in_conditional_expression(x: Tensor, n: Optional[int]) -> Tensor:
    k = n if n is not None else 2
    return x * k


# each was refused or failed before being fixed; the old message is in the comment
CASES += [
    (len_of_str, [("abc",), ("",)]),                 # "cannot iterate over a str"
    # "a library call's non-tensor argument must be known when the specialization is built"
    (stack_of_appended_list, [(X23, 3), (X4, 1)]),
    (shapes_equal, [(X23, X23), (X23, X34)]),        # "'==' not supported ... 'int[]'"
    # the result of a function returning from inside a loop had no known dtype/shape
    (library_call_on_early_exit, [(X23, 2), (X23, 5)]),
]

# the Optional refinements TorchScript makes, fixed since: regression cases
CASES += [
    (refine_after_early_return, [(X4, X4 * 3.0), (X4, None)]),
    (refine_by_assert, [(X4, X4 * 3.0), (X4, None)]),
    (refine_in_and, [(X4, X4 * 3.0), (X4, -X4.abs()), (X4, None)]),
    (refine_in_or, [(X4, X4 * 3.0), (X4, -X4.abs()), (X4, None)]),
    (refine_in_conditional_expression, [(X4, 3), (X4, None)]),
    (optional_isinstance, [(X4, 5), (X4, None)]),
    (optional_tensor_isinstance, [(X4, X4), (X4, None)]),
]

MODULE_CASES += [
    ("LayerAfterEarlyExit", _seeded(LayerAfterEarlyExit), [(X23, 1), (X23, 5)]),
]


# ---- values read at run time: item(), dtype/device, lists built by loops, keyword calls ----

def item_branch(x: Tensor) -> Tensor:
    if x.sum().item() > 0:
        return x * x.max().item()
    return x - x.min().item()


def int_item(x: Tensor, k: int) -> int:
    n = int((x > 0).sum().item())                    # item() is a Scalar, as in TorchScript
    flag = bool((x > 100).any().item())
    return n * k + int(flag)


def dtype_and_device(x: Tensor) -> Tensor:
    h = sm.zeros(x.shape[0], 3, dtype=x.dtype, device=x.device)
    if x.dtype == sm.float64:
        h = h + 1.0
    if x.is_cuda or x.device != sm.device("cpu"):
        h = h - 5.0
    return h + x.sum()


def cat_of_appended_list(x: Tensor, n: int) -> Tensor:
    outs: List[Tensor] = [x]
    for i in range(n):
        outs.append(x * float(i) - 1.0)
    y = sm.cat(outs, dim=1)
    return y.relu() + 1.0


def library_args_from_data(x: Tensor, n: int) -> Tensor:
    d = n % 2                                        # known only when the call runs
    rows = x.reshape(n, -1)
    return rows.sum(dim=d).softmax(-1)


def lengths_and_extremes(xs: List[int], d: Dict[str, int], s: str) -> int:
    return len(xs) + len(d) + len(s) + min(xs) * 10 + max(xs) * 100


class Scale(nn.Module):
    def forward(self, x: Tensor, factor: float = 2.0, shift: Optional[Tensor] = None) -> Tensor:
        if shift is not None:
            x = x + shift
        return x * factor


class KeywordCalls(nn.Module):
    """Layers and scripted submodules called with keywords and defaults."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.attn = nn.MultiheadAttention(4, 2)
        self.scale = Scale()

    def forward(self, x: Tensor, q: Tensor) -> Tensor:
        y = self.fc(input=x)
        y = self.scale(y, factor=3.0) + self.scale(y) + self.scale(y, shift=x)
        out, _ = self.attn(q, q, q, need_weights=False)
        both, w = self.attn(q, key=q, value=q * 2.0)
        assert w is not None
        return y.sum() + out.sum() + both.sum() + w.sum()


class IterateContainers(nn.Module):
    """Loops over containers, unrolled: enumerate and zip of ModuleLists, a ModuleDict
    itself (its keys), its items() and values(), enumerate(start=...)."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(3, 3) for _ in range(3)])
        self.gates = nn.ModuleList([nn.Linear(3, 3) for _ in range(3)])
        self.heads = nn.ModuleDict({"a": nn.Linear(3, 2), "bb": nn.Linear(3, 4)})

    def forward(self, x: Tensor, skip: int) -> Dict[str, Tensor]:
        for i, layer in enumerate(self.layers):
            if i != skip:
                x = F.relu(layer(x))
        for layer, gate in zip(self.layers, self.gates):
            x = layer(x) * sm.sigmoid(gate(x))
        out: Dict[str, Tensor] = {}
        for name, head in self.heads.items():
            out[name] = head(x)
        n = 0
        for name in self.heads:
            n += len(name)
        for key in self.heads.keys():
            n += len(key) * 10
        for head in self.heads.values():
            x = x + head(x).sum()
        for j, layer in enumerate(self.layers, start=10):
            x = layer(x) + j
        out["x"] = x * n
        return out


def enumerate_from(xs: List[float], start: int) -> float:
    acc = 0.0
    for i, v in enumerate(xs, start=start):
        acc += i * v
    return acc


# ---- builtins, math, and the methods of str, list and dict (ir.ops.pyfuncs) -------------

def math_functions(x: Tensor, d: int, f: float) -> Tensor:
    s = math.sqrt(d) + math.log(f) + math.log(8.0, 2.0) + math.exp(-f) + math.pow(f, 2.0)
    k = math.floor(f) + math.ceil(f) + math.trunc(-f) + math.gcd(d, 6)
    ok = math.isfinite(s) and not math.isnan(f)
    return x / math.sqrt(d) + s + k + math.pi + math.atan2(1.0, f) + int(ok)


def rounding(a: float, b: int) -> Tuple[int, float, int, int, float]:
    q, r = divmod(b, 3)
    return round(a), round(a, 1), q, r, divmod(a, 0.75)[1]


def list_methods(n: int) -> List[int]:
    xs: List[int] = []
    for i in range(n):
        xs.append(i * 3 % 5)
    xs.extend([10, 11])
    xs.insert(1, -1)
    last = xs.pop()
    first = xs.pop(0)
    xs.reverse()
    if 10 in xs:
        xs.remove(10)
    xs.append(last + first + xs.count(1) + xs.index(-1))
    ys = sorted(xs, reverse=True)
    xs.sort()
    zs = xs.copy()
    zs.clear()
    return xs + ys + zs + [sum(xs), len(zs), int(any([v > 3 for v in xs])),
                           int(all([v > -5 for v in xs]))]


def float_list_sum(xs: List[float]) -> float:
    return sum(xs) + float(max(len(xs), 1))


def dict_methods(n: int, key: str) -> Tuple[int, Optional[int], int]:
    d: Dict[str, int] = {"a": 1, "b": n}
    v = d.get("c", 5) + d.get("a", 0)
    maybe = d.get(key)
    for k, val in d.items():
        v += val + len(k)
    d.update({"z": 26})
    p = d.pop("a")
    q = d.pop("missing", -1)
    d.clear()
    return v + p + q, maybe, len(d)


def str_methods(s: str, n: int) -> str:
    t = s.upper() + s.lower() + str(n) + s.strip() + s.replace("a", "o") + s.title()
    if t.startswith("A") or t.endswith("1") or s.isdigit():
        t = t + "!"
    parts = "a,b,,c".split(",")
    words = s.split()
    return (t + "-".join(parts) + "|".join(words) + "{}:{}".format(n, s) + s.zfill(8)
            + str(s.find("b")) + str(s.count("a")) + s.center(9, "*"))


def mixed_tuple(t: Tuple[int, float, str], x: Tensor) -> Tensor:
    return x * t[0] + t[1] + len(t[2])


def values_and_indices(x: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    v, i = x.max(dim=1)
    w, j = sm.min(x, 0)
    return v, i, w + x.max(), j


def scaled_attention(q: Tensor, k: Tensor, mask: Optional[Tensor]) -> Tensor:
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask == 0, float("-inf"))
    return F.softmax(scores, dim=-1)


class CausalSelfAttention(nn.Module):
    """A GPT-style attention block as users write it: shapes unpacked from x.shape, a
    causal-mask buffer sliced to the sequence length, math.sqrt, dropout by self.training."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(8, 24)
        self.proj = nn.Linear(8, 8)
        self.heads = 2
        self.p = 0.0          # dropout runs in training mode, deterministically
        self.register_buffer("mask", sm.tril(sm.ones(16, 16)).view(1, 1, 16, 16))

    def forward(self, x: Tensor) -> Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        hs = C // self.heads
        q = q.view(B, T, self.heads, hs).transpose(1, 2)
        k = k.view(B, T, self.heads, hs).transpose(1, 2)
        v = v.view(B, T, self.heads, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.dropout(F.softmax(att, dim=-1), p=self.p, training=self.training)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


def flag_argument(x: Tensor, flag: bool, scale: float) -> Tensor:
    # a bool known only at run time: the call is expanded for each value under an If
    y = F.dropout(x, p=0.0, training=flag)
    return F.leaky_relu(y, negative_slope=scale, inplace=flag and scale > 0.5)


class NestedSequential(nn.Module):
    """A Sequential of Sequentials (each unrolled), a residual and an Optional mask."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.ReLU())
                                      for _ in range(2)])
        self.ln = nn.LayerNorm(4)

    def forward(self, x: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        h = self.blocks(x) + x
        if mask is not None:
            h = h * mask.unsqueeze(-1)
        return self.ln(h)


def sizes_from_data(x: Tensor, n: int, dims: Optional[List[int]] = None) -> Tensor:
    a = sm.arange(n) + sm.zeros(n) + sm.full((n,), 2.0)      # factories of a run-time size
    if dims is not None:
        for d in dims:
            x = x.sum(d, keepdim=True)
    return a.sum() + x


def str_indexing(n: int, s: str) -> str:
    out = ""
    for i in range(n):
        out += str(i) + ","
    head = s[0] if len(s) > 0 else "?"
    return (out[:-1] if len(out) > 0 else out) + head + s[::-1] + s[1:3] + s[-1:]


def filtered_comprehensions(xs: List[int], x: Tensor) -> Tuple[List[int], List[int], Tensor]:
    evens = [v * 2 for v in xs if v > 0 if v % 2 == 0]
    pairs = [a * 10 + b for a in xs if a >= 0 for b in range(a)]
    rows = sm.stack([x[i] * i for i in range(x.size(0)) if i != 1])
    return evens, pairs, rows


MODULE_CASES += [
    ("NestedSequential", _seeded(NestedSequential), [(X34,), (X34, tensor(3, seed=25))]),
]
CASES += [
    (str_indexing, [(3, "hello"), (0, "a"), (2, "")]),
    (filtered_comprehensions, [([1, 2, -4, 4, 3], X34), ([], X34)]),
    (sizes_from_data, [(X34, 4, None), (X34, 1, [1]), (X34, 0, [0, 1])]),
    (flag_argument, [(X23, True, 0.1), (X23, False, 0.9), (X4, True, 0.7)]),
    (math_functions, [(X4, 4, 2.5), (X23, 9, 0.5)]),
    (rounding, [(2.5, 7), (-3.75, -8), (0.05, 0)]),
    (list_methods, [(0,), (4,), (7,)]),
    (float_list_sum, [([1.0, 2.5],), ([],)]),
    (dict_methods, [(3, "a"), (0, "zz")]),
    (str_methods, [("Abc a ", 1), ("123", 0), ("", 11)]),
    (mixed_tuple, [((2, 1.5, "ab"), X4), ((0, -1.0, ""), X23)]),
    (values_and_indices, [(X34,), (X23,)]),
    (scaled_attention, [(tensor(2, 3, 4, seed=20), tensor(2, 3, 4, seed=21), sm.tril(
        sm.ones(3, 3))), (tensor(2, 3, 4, seed=20), tensor(2, 3, 4, seed=21), None)]),
]
MODULE_CASES += [
    ("CausalSelfAttention", lambda: _seeded(CausalSelfAttention)().eval(),
     [(tensor(2, 5, 8, seed=22),), (tensor(1, 16, 8, seed=23),), (tensor(3, 1, 8, seed=24),)]),
]

CASES += [
    (enumerate_from, [([1.0, 2.0], 3), ([], 0), ([0.5], -2)]),
    (item_branch, [(X4,), (-X4.abs(),), (X23,)]),
    (int_item, [(X4, 3), (X23, -2)]),
    (dtype_and_device, [(X23,), (X4.double(),)]),
    (cat_of_appended_list, [(X23, 3), (X34, 0)]),
    (library_args_from_data, [(X34, 3), (X34, 4), (X34, 2)]),
    (lengths_and_extremes, [([3, 1, 2], {"a": 1}, "xy"), ([5], {}, ""), ([], {}, "")]),
]
MODULE_CASES += [
    ("IterateContainers", _seeded(IterateContainers), [(X23, 1), (X23, 5)]),
    ("KeywordCalls", _seeded(KeywordCalls), [(X23, tensor(5, 2, 4, seed=12)),
                                            (X34[:, :3].contiguous(), tensor(3, 1, 4, seed=13))]),
]


# ---- programs the frontend gets wrong today ----------------------------------------------
# Each is as small as the bug allows and runs as a strict xfail (test_corpus.py) whose reason
# names the bug, so that the fix turns it into a pass (then it moves to CASES above). None now.

BUG_CASES: list[tuple[Callable, list[tuple], str]] = []
MODULE_BUG_CASES: list[tuple[str, Callable[[], nn.Module], list[tuple], str]] = []
