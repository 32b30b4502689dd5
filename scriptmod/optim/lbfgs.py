"""L-BFGS: quasi-Newton steps from the last ``history_size`` curvature pairs, up to
``max_iter`` iterations per ``step(closure)``, with an optional strong-Wolfe line search
(PyTorch's port of minFunc, step for step).

    >>> w = nn.Parameter(scriptmod.tensor([1.5, -0.5]))
    >>> opt = LBFGS([w], line_search_fn="strong_wolfe")
    >>> def closure():
    ...     opt.zero_grad(); loss = ((w - 2.0) ** 2).sum(); loss.backward(); return loss
    >>> _ = opt.step(closure); w.detach().numpy().round(4)
    array([2., 2.], dtype=float32)
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable

from scriptmod._shape_ops import cat
from scriptmod.autograd.grad_mode import enable_grad, no_grad
from scriptmod.optim.optimizer import Optimizer, _real_view, _scalar
from scriptmod.tensor import Tensor

Objective = Callable[[list[Tensor], float, Tensor], tuple[float, Tensor]]


def _cubic_interpolate(x1: float, f1: float, g1: float, x2: float, f2: float, g2: float,
                       bounds: tuple[float, float] | None = None) -> float:
    """The minimizer of the cubic through (x1, f1, g1) and (x2, f2, g2), kept in bounds."""
    lo, hi = bounds if bounds is not None else ((x1, x2) if x1 <= x2 else (x2, x1))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1 ** 2 - g1 * g2
    if d2_square < 0:
        return (lo + hi) / 2.0
    d2 = math.sqrt(d2_square)
    if x1 <= x2:
        min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else:
        min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
    return min(max(min_pos, lo), hi)


class _Bracket:
    """The line search's interval: step lengths, losses, gradients and slopes at each end."""

    def __init__(self, t: list[float], f: list[float], g: list[Tensor], gtd: list[float]):
        self.t, self.f, self.g, self.gtd = t, f, g, gtd

    def set(self, i: int, t: float, f: float, g: Tensor, gtd: float) -> None:
        self.t[i], self.f[i], self.g[i], self.gtd[i] = t, f, g, gtd

    def ends(self) -> tuple[int, int]:
        """(low, high): the end with the lower loss first."""
        return (0, 1) if self.f[0] <= self.f[-1] else (1, 0)


def _strong_wolfe(obj_func: Objective, x: list[Tensor], t: float, d: Tensor, f: float,
                  g: Tensor, gtd: float, c1: float = 1e-4, c2: float = 0.9,
                  tolerance_change: float = 1e-9, max_ls: int = 25
                  ) -> tuple[float, Tensor, float, int]:
    """A step length ``t`` along ``d`` meeting the strong Wolfe conditions: the loss, flat
    gradient and step there, and how many evaluations it took."""
    search = _LineSearch(obj_func, x, d, f, gtd, c1, c2)
    bracket, done, ls_iter = search.bracket(t, g.clone(), max_ls)
    low = search.zoom(bracket, done, ls_iter, max_ls, tolerance_change)
    return bracket.f[low], bracket.g[low], bracket.t[low], search.evals


class _LineSearch:
    """PyTorch's strong-Wolfe line search from ``x`` along ``d`` (loss ``f``, slope ``gtd``
    at t = 0): a bracketing phase, then a zoom by cubic interpolation."""

    def __init__(self, obj_func: Objective, x: list[Tensor], d: Tensor, f: float, gtd: float,
                 c1: float, c2: float) -> None:
        self.obj_func, self.x, self.d, self.f, self.gtd = obj_func, x, d, f, gtd
        self.c1, self.c2, self.evals = c1, c2, 0

    def evaluate(self, t: float) -> tuple[float, Tensor, float]:
        f_new, g_new = self.obj_func(self.x, t, self.d)
        self.evals += 1
        return f_new, g_new, float(g_new.dot(self.d))

    def curvature_ok(self, gtd_new: float) -> bool:
        return abs(gtd_new) <= -self.c2 * self.gtd

    def bracket(self, t: float, g: Tensor, max_ls: int) -> tuple[_Bracket, bool, int]:
        """Steps out until an interval holds a point meeting the conditions (or one does)."""
        f, gtd = self.f, self.gtd
        f_new, g_new, gtd_new = self.evaluate(t)
        t_prev, f_prev, g_prev, gtd_prev = 0.0, f, g, gtd
        ls_iter = 0
        while ls_iter < max_ls:
            armijo_fails = f_new > (f + self.c1 * t * gtd) or (ls_iter > 1 and f_new >= f_prev)
            if not armijo_fails and self.curvature_ok(gtd_new):
                return _Bracket([t], [f_new], [g_new], [gtd_new]), True, ls_iter
            if armijo_fails or gtd_new >= 0:
                return _Bracket([t_prev, t], [f_prev, f_new], [g_prev, g_new.clone()],
                                [gtd_prev, gtd_new]), False, ls_iter
            t_prev, t = t, _cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new,
                                              bounds=(t + 0.01 * (t - t_prev), t * 10))
            f_prev, g_prev, gtd_prev = f_new, g_new.clone(), gtd_new
            f_new, g_new, gtd_new = self.evaluate(t)
            ls_iter += 1
        return _Bracket([0, t], [f, f_new], [g, g_new], [gtd, gtd_new]), False, ls_iter

    def zoom(self, bracket: _Bracket, done: bool, ls_iter: int, max_ls: int,
             tolerance_change: float) -> int:
        """Shrinks the bracket until a point meets the conditions; the index of its best end."""
        d_norm = float(self.d.abs().max())
        insuf_progress = False
        low, high = bracket.ends()
        while not done and ls_iter < max_ls:
            if abs(bracket.t[1] - bracket.t[0]) * d_norm < tolerance_change:
                break
            t = _cubic_interpolate(bracket.t[0], bracket.f[0], bracket.gtd[0],
                                   bracket.t[1], bracket.f[1], bracket.gtd[1])
            t, insuf_progress = _safeguard(t, bracket.t, insuf_progress)
            f_new, g_new, gtd_new = self.evaluate(t)
            ls_iter += 1
            if f_new > (self.f + self.c1 * t * self.gtd) or f_new >= bracket.f[low]:
                bracket.set(high, t, f_new, g_new.clone(), gtd_new)
                low, high = bracket.ends()
                continue
            if self.curvature_ok(gtd_new):
                done = True
            elif gtd_new * (bracket.t[high] - bracket.t[low]) >= 0:
                bracket.set(high, bracket.t[low], bracket.f[low], bracket.g[low],
                            bracket.gtd[low])
            bracket.set(low, t, f_new, g_new.clone(), gtd_new)
        return low


def _safeguard(t: float, ends: list[float], insuf_progress: bool) -> tuple[float, bool]:
    """Moves ``t`` off the bracket's ends when it lands too close (a tenth of the width),
    or when the last try made too little progress."""
    lo, hi = min(ends), max(ends)
    eps = 0.1 * (hi - lo)
    if min(hi - t, t - lo) >= eps:
        return t, False
    if insuf_progress or t >= hi or t <= lo:
        return (hi - eps if abs(t - hi) < abs(t - lo) else lo + eps), False
    return t, True


class LBFGS(Optimizer):
    """PyTorch's L-BFGS: one parameter group; ``step(closure)`` runs up to ``max_iter``
    iterations and returns the closure's first loss."""

    def __init__(self, params: Iterable[Any], lr: float | Tensor = 1, max_iter: int = 20,
                 max_eval: int | None = None, tolerance_grad: float = 1e-7,
                 tolerance_change: float = 1e-9, history_size: int = 100,
                 line_search_fn: str | None = None) -> None:
        if not 0.0 <= _scalar(lr):
            raise ValueError(f"Invalid learning rate: {lr}")
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        defaults = dict(lr=lr, max_iter=max_iter, max_eval=max_eval,
                        tolerance_grad=tolerance_grad, tolerance_change=tolerance_change,
                        history_size=history_size, line_search_fn=line_search_fn)
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params: list[Tensor] = self.param_groups[0]["params"]

    def _gather_flat_grad(self) -> Tensor:
        """Every gradient flattened into one vector (zeros for a missing one; a complex one
        as pairs of reals, as PyTorch's)."""
        return cat([_as_real(p.new_zeros(p.shape) if p.grad is None else p.grad).reshape(-1)
                    for p in self._params], 0)

    def _add_grad(self, step_size: float, update: Tensor) -> None:
        offset = 0
        for p in self._params:
            target = _as_real(p)
            n = target.numel()
            target.add_(update[offset:offset + n].view_as(target), alpha=step_size)
            if target is not p:                 # a complex param's real view
                p._vc[0] += 1
            offset += n

    def _directional_evaluate(self, closure: Callable[[], Any], x: list[Tensor], t: float,
                              d: Tensor) -> tuple[float, Tensor]:
        self._add_grad(t, d)
        with enable_grad():
            loss = float(closure())
        flat_grad = self._gather_flat_grad()
        for p, saved in zip(self._params, x):
            p.copy_(saved)
        return loss, flat_grad

    @no_grad()
    def step(self, closure: Callable[[], Any]) -> Any:  # type: ignore[override]
        """Up to ``max_iter`` L-BFGS iterations; ``closure`` re-evaluates the loss and
        gradients. Returns the loss at the start."""
        group = self.param_groups[0]
        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)
        with enable_grad():
            orig_loss = closure()
        state["func_evals"] += 1
        flat_grad = self._gather_flat_grad()
        if float(flat_grad.abs().max()) <= group["tolerance_grad"]:
            return orig_loss
        _Iterations(self, group, state, closure).run(float(orig_loss), flat_grad)
        return orig_loss


def _as_real(t: Tensor) -> Tensor:
    return _real_view(t) if t.is_complex() else t


class _Iterations:
    """One ``LBFGS.step``: its loop over directions, reading and leaving PyTorch's state keys
    (``d``, ``t``, ``old_dirs``, ``old_stps``, ``ro``, ``H_diag``, ``prev_flat_grad``,
    ``prev_loss``, ``n_iter``, ``func_evals``)."""

    def __init__(self, opt: LBFGS, group: dict[str, Any], state: dict[str, Any],
                 closure: Callable[[], Any]) -> None:
        self.opt, self.group, self.state, self.closure = opt, group, state, closure

    def direction(self, flat_grad: Tensor) -> Tensor:
        """The next search direction from the gradient and the curvature history."""
        state = self.state
        if state["n_iter"] == 1:
            state.update(old_dirs=[], old_stps=[], ro=[], H_diag=1)
            return flat_grad.neg()
        y = flat_grad.sub(state["prev_flat_grad"])
        s = state["d"].mul(state["t"])
        ys = float(y.dot(s))
        old_dirs, old_stps, ro = state["old_dirs"], state["old_stps"], state["ro"]
        if ys > 1e-10:
            if len(old_dirs) == self.group["history_size"]:
                old_dirs.pop(0), old_stps.pop(0), ro.pop(0)
            old_dirs.append(y)
            old_stps.append(s)
            ro.append(1.0 / ys)
            state["H_diag"] = ys / float(y.dot(y))
        if "al" not in state:
            state["al"] = [None] * self.group["history_size"]
        al = state["al"]
        q = flat_grad.neg()
        for i in range(len(old_dirs) - 1, -1, -1):       # two-loop recursion
            al[i] = float(old_stps[i].dot(q)) * ro[i]
            q.add_(old_dirs[i], alpha=-al[i])
        r = q.mul(state["H_diag"])
        for i in range(len(old_dirs)):
            be_i = float(old_dirs[i].dot(r)) * ro[i]
            r.add_(old_stps[i], alpha=al[i] - be_i)
        return r

    def move(self, t: float, d: Tensor, gtd: float, loss: float, flat_grad: Tensor,
             last: bool, max_ls: int) -> tuple[float, Tensor, float, int]:
        """Steps the parameters along ``d``: by ``t``, or by the strong-Wolfe line search's
        step; the loss and gradient there (not evaluated after the ``last`` plain step),
        the step taken and the evaluations it cost."""
        opt, search = self.opt, self.group["line_search_fn"]
        if search is None:
            opt._add_grad(t, d)
            if last:
                return loss, flat_grad, t, 0
            with enable_grad():
                loss = float(self.closure())
            return loss, opt._gather_flat_grad(), t, 1
        if search != "strong_wolfe":
            raise RuntimeError("only 'strong_wolfe' is supported")
        x_init = [p.clone() for p in opt._params]
        loss, flat_grad, t, evals = _strong_wolfe(
            lambda x, t, d: opt._directional_evaluate(self.closure, x, t, d),
            x_init, t, d, loss, flat_grad, gtd, max_ls=max_ls)
        opt._add_grad(t, d)
        return loss, flat_grad, t, evals

    def run(self, loss: float, flat_grad: Tensor) -> None:
        """The iterations of one ``step``, from the closure's first loss and gradient."""
        group, state = self.group, self.state
        lr, max_iter, max_eval = _scalar(group["lr"]), group["max_iter"], group["max_eval"]
        tol_grad, tol_change = group["tolerance_grad"], group["tolerance_change"]
        current_evals, n_iter = 1, 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            d = state["d"] = self.direction(flat_grad)
            if state.get("prev_flat_grad") is None:
                state["prev_flat_grad"] = flat_grad.clone()
            else:
                state["prev_flat_grad"].copy_(flat_grad)
            prev_loss = state["prev_loss"] = loss
            t = min(1.0, 1.0 / float(flat_grad.abs().sum())) * lr if state["n_iter"] == 1 \
                else lr
            state["t"] = t
            gtd = float(flat_grad.dot(d))
            if gtd > -tol_change:
                break
            loss, flat_grad, t, ls_func_evals = self.move(
                t, d, gtd, loss, flat_grad, n_iter == max_iter, max_eval - current_evals)
            state["t"] = t
            opt_cond = ls_func_evals > 0 and float(flat_grad.abs().max()) <= tol_grad
            current_evals += ls_func_evals
            state["func_evals"] += ls_func_evals
            if n_iter == max_iter or current_evals >= max_eval or opt_cond:
                break
            if float(d.mul(t).abs().max()) <= tol_change or abs(loss - prev_loss) < tol_change:
                break
