"""PyTorch's own test databases as the oracle: ``module_db`` samples and ``optim_db`` configs
run through torch and scriptmod side by side (a trimmed form of ``shared/tools/torch_db.py``).

A module sample is checked in three stages, each against torch on the same inputs and the
same weights (torch's ``state_dict`` loaded with ``strict=True``):

- forward: outputs, and after a training-mode forward every buffer (running statistics);
- backward: the gradients of every input and parameter from the sum of the float outputs;
- jit: ``scriptmod.jit.trace`` of the module at the sample's inputs, called on them.

``check_module_sample`` raises ``AssertionError`` naming the stage and the first difference;
``Unsupported`` marks a sample this harness cannot express for scriptmod (a torch-only type)
or one torch itself refuses (nothing to compare).
"""
from __future__ import annotations

import inspect
from typing import Any

import numpy as np

import scriptmod as sm

torch = __import__("torch")   # the callers skip this module where torch is absent

TOLERANCE = {"float64": (1e-7, 1e-7), "float32": (1e-4, 1e-5)}   # (rtol, atol) by dtype
MAX_NUMEL = 2_000_000


class Unsupported(Exception):
    """Nothing to compare: a torch-only input type, or torch refuses the sample itself."""


def dname(dt: Any) -> str:
    return str(dt).split(".")[-1]


def seed_all(s: int = 0) -> None:
    torch.manual_seed(s)
    np.random.seed(s)
    sm.manual_seed(s)


# ---- torch values -> scriptmod values ------------------------------------------------------
def to_sm(obj: Any, memo: dict | None = None, grad: bool = True) -> Any:
    """The scriptmod counterpart of a torch-side value; ``memo`` maps ``id(torch tensor)`` to
    its scriptmod tensor, so a tensor passed twice stays one tensor."""
    memo = {} if memo is None else memo
    if isinstance(obj, torch.Tensor):
        if id(obj) not in memo:
            if obj.layout != torch.strided or obj.dtype is torch.complex32:
                raise Unsupported(f"tensor of layout {obj.layout}, dtype {obj.dtype}")
            plain = obj.detach().resolve_conj().resolve_neg()
            if obj.dtype is torch.bfloat16:   # NumPy has no bfloat16: through float32, exactly
                t = sm.tensor(plain.float().numpy().copy()).to(sm.bfloat16)
            elif not (grad and obj.requires_grad) and _is_partial_view(plain):
                t = _same_view(plain)
            else:
                t = sm.tensor(plain.numpy().copy())
            if grad and obj.requires_grad:
                t.requires_grad_(True)
            memo[id(obj)] = t
        return memo[id(obj)]
    if isinstance(obj, torch.dtype):
        return getattr(sm, dname(obj))
    if isinstance(obj, torch.memory_format):
        return getattr(sm, dname(obj))
    if isinstance(obj, torch.Size):
        return tuple(int(x) for x in obj)
    if isinstance(obj, torch.device):
        return str(obj)
    if type(obj) in (list, tuple):
        return type(obj)(to_sm(x, memo, grad) for x in obj)
    if isinstance(obj, dict):
        return {k: to_sm(v, memo, grad) for k, v in obj.items()}
    if obj is None or isinstance(obj, (bool, int, float, complex, str, slice, np.ndarray)):
        return obj
    raise Unsupported(f"cannot convert {type(obj).__module__}.{type(obj).__name__}")


def _is_partial_view(t: Any) -> bool:
    """A torch tensor whose storage holds more than its own elements (a slice, a strided
    view): ops that read storage (``as_strided``) see the rest."""
    return t.untyped_storage().nbytes() > t.numel() * t.element_size()


def _same_view(t: Any) -> Any:
    """The scriptmod twin of a torch view: its whole storage copied once, the same sizes,
    strides and offset taken of it with ``as_strided``."""
    n = t.untyped_storage().nbytes() // t.element_size()
    flat = t.as_strided((n,), (1,), 0)
    return sm.tensor(flat.numpy().copy()).as_strided(tuple(t.shape), tuple(t.stride()),
                                                     t.storage_offset())


def leafify(obj: Any, memo: dict | None = None) -> Any:
    """Torch tensors replaced by fresh leaves (same ``requires_grad``), shared ones kept shared."""
    memo = {} if memo is None else memo
    if isinstance(obj, torch.Tensor):
        if id(obj) not in memo:
            memo[id(obj)] = obj.detach().clone().requires_grad_(obj.requires_grad)
        return memo[id(obj)]
    if type(obj) in (list, tuple):
        return type(obj)(leafify(x, memo) for x in obj)
    if isinstance(obj, dict):
        return {k: leafify(v, memo) for k, v in obj.items()}
    return obj


def tensors_in(obj: Any, out: list | None = None) -> list:
    out = [] if out is None else out
    if isinstance(obj, (torch.Tensor, sm.Tensor)):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            tensors_in(x, out)
    elif isinstance(obj, dict):
        for x in obj.values():
            tensors_in(x, out)
    return out


# ---- comparison ----------------------------------------------------------------------------
def assert_close_arrays(a: np.ndarray, b: np.ndarray, dt: str, where: str,
                        scale_atol: bool = False) -> None:
    """``b`` (scriptmod's) equals ``a`` (torch's): same shape, NaNs and infs in the same
    places, finite values within the dtype's tolerance. ``scale_atol`` (gradients): atol
    grows with the largest magnitude, as a gradient is a sum of terms of that size."""
    assert a.shape == b.shape, f"{where}: shape {b.shape} != torch {a.shape}"
    if a.size == 0:
        return
    if a.dtype.kind not in "fc":
        assert np.array_equal(a, b), f"{where}: values differ ({b.ravel()[:6]} vs {a.ravel()[:6]})"
        return
    rtol, atol = TOLERANCE.get(dt, (1e-4, 1e-5))
    a64, b64 = a.astype(np.complex128 if a.dtype.kind == "c" else np.float64), b.astype(
        np.complex128 if b.dtype.kind == "c" or a.dtype.kind == "c" else np.float64)
    nan_a, nan_b = np.isnan(a64), np.isnan(b64)
    assert (nan_a == nan_b).all(), f"{where}: NaN pattern differs at {(nan_a != nan_b).sum()}/{a.size}"
    x, y = a64[~nan_a], b64[~nan_a]
    inf = (np.isinf(x) | np.isinf(y)) & (x != y)
    assert not inf.any(), f"{where}: inf differs at {inf.sum()}/{a.size}"
    fin = np.isfinite(x)
    x, y = x[fin], y[fin]
    if scale_atol and x.size:
        atol *= max(1.0, float(np.abs(x).max()))
    diff = np.abs(x - y)
    bad = diff > atol + rtol * np.abs(x)
    assert not bad.any(), (f"{where}: values differ at {bad.sum()}/{a.size} "
                           f"(max abs {diff.max():.3g})")


def assert_same(t_out: Any, s_out: Any, where: str = "out", scale_atol: bool = False) -> None:
    """A torch result and a scriptmod result are the same value (tensors, sizes, tuples,
    numbers, None)."""
    if isinstance(t_out, torch.Tensor):
        assert isinstance(s_out, sm.Tensor), f"{where}: got {type(s_out).__name__}, torch a Tensor"
        assert tuple(s_out.shape) == tuple(t_out.shape), \
            f"{where}: shape {tuple(s_out.shape)} != torch {tuple(t_out.shape)}"
        assert dname(s_out.dtype) == dname(t_out.dtype), \
            f"{where}: dtype {s_out.dtype} != torch {t_out.dtype}"
        a, b = t_out.detach().resolve_conj().resolve_neg(), s_out.detach()
        if t_out.dtype is torch.bfloat16:   # compared exactly, as float32 values
            a, b = a.float(), b.float()
        assert_close_arrays(a.numpy(), np.asarray(b.numpy()), dname(t_out.dtype), where,
                            scale_atol)
    elif isinstance(t_out, (list, tuple)):
        assert isinstance(s_out, (list, tuple)) and len(s_out) == len(t_out), \
            f"{where}: got {type(s_out).__name__}, torch a {type(t_out).__name__} of {len(t_out)}"
        for i, (a, b) in enumerate(zip(t_out, s_out)):
            assert_same(a, b, f"{where}[{i}]", scale_atol)
    elif t_out is None:
        assert s_out is None, f"{where}: got {type(s_out).__name__}, torch None"
    elif isinstance(t_out, (bool, int, float)):
        assert_close_arrays(np.asarray(t_out, np.float64), np.asarray(s_out, np.float64),
                            "float32", where)
    else:
        assert s_out == t_out, f"{where}: {s_out!r} != torch {t_out!r}"


def assert_grads(t_tensors: list, s_tensors: list, where: str) -> None:
    """Each scriptmod tensor's ``.grad`` equals its torch twin's (None counts as zeros)."""
    for i, (a, b) in enumerate(zip(t_tensors, s_tensors)):
        ga, gb = a.grad, None if b is None else b.grad
        if ga is not None and torch._is_zerotensor(ga):   # torch's symbolic zero gradient
            ga = None
        if ga is None and gb is None:
            continue
        ga = torch.zeros_like(a) if ga is None else ga
        gb = sm.zeros(tuple(a.shape), dtype=getattr(sm, dname(a.dtype))) if gb is None else gb
        assert_same(ga, gb, f"{where}[{i}]", scale_atol=True)


def _float_outputs(o: Any, out: list | None = None) -> list:
    out = [] if out is None else out
    if isinstance(o, (list, tuple)):
        for x in o:
            _float_outputs(x, out)
    else:
        out.append(o)
    return out


# ---- modules -------------------------------------------------------------------------------
def call_form(tm: Any, fargs: tuple, fkw: dict) -> tuple[tuple, dict]:
    """The forward inputs bound to the torch module's signature, ``None``s left at their
    ``None`` default dropped: positional where what remains is a prefix of the parameters,
    else all by keyword (the form ``jit.trace`` takes)."""
    sig = inspect.signature(tm.forward)
    try:
        bound = sig.bind(*fargs, **fkw)
    except TypeError:
        return tuple(fargs), dict(fkw)
    keep = []
    for name, val in bound.arguments.items():
        p = sig.parameters[name]
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            return tuple(fargs), dict(fkw)
        if not (val is None and p.default is None):
            keep.append((name, val))
    if [n for n, _ in keep] == list(sig.parameters)[:len(keep)]:
        return tuple(v for _, v in keep), {}
    return (), dict(keep)


def module_samples(info: Any, dtype: Any, training: bool) -> list:
    seed_all(0)
    return list(info.module_inputs_func(info, device="cpu", dtype=dtype, requires_grad=True,
                                        training=training))


def check_module_sample(info: Any, mi: Any, dtype: Any, training: bool) -> None:
    """One ModuleInfo sample through torch and scriptmod: forward (and buffers), backward,
    ``jit.trace``. Raises AssertionError at the first difference, ``Unsupported`` where there
    is nothing to compare."""
    cls = info.module_cls
    smcls = getattr(sm.nn, cls.__name__)
    if mi.forward_input is None:
        raise Unsupported("no forward input")
    cargs, ckw = mi.constructor_input.args, mi.constructor_input.kwargs
    memo: dict = {}
    fargs, fkw = leafify(mi.forward_input.args, memo), leafify(mi.forward_input.kwargs, memo)
    if sum(int(t.numel()) for t in tensors_in((fargs, fkw))) > MAX_NUMEL:
        raise Unsupported("too large")
    smemo: dict = {}
    s_cargs, s_ckw = to_sm(cargs), to_sm(ckw)
    s_fargs, s_fkw = to_sm(fargs, smemo), to_sm(fkw, smemo)

    seed_all(0)
    try:
        tm = cls(*cargs, **ckw).to(dtype).train(training)
        if info.is_lazy:
            with torch.no_grad():
                tm(*leafify(fargs), **leafify(fkw))
        sd = {k: v.detach().numpy().copy() for k, v in tm.state_dict().items()}
        t_out = tm(*fargs, **fkw)
    except Exception as e:  # noqa: BLE001 - torch refuses: scriptmod must refuse too
        try:
            smm = smcls(*s_cargs, **s_ckw).to(getattr(sm, dname(dtype))).train(training)
            smm(*s_fargs, **s_fkw)
        except Exception:  # noqa: BLE001
            raise Unsupported(f"both refuse ({type(e).__name__})") from None
        raise AssertionError(f"torch raises {type(e).__name__}: {e}; scriptmod returns") from None

    # forward, with torch's weights
    smm = smcls(*s_cargs, **s_ckw).to(getattr(sm, dname(dtype))).train(training)
    if info.is_lazy:
        with sm.no_grad():
            smm(*to_sm(fargs, grad=False), **to_sm(fkw, grad=False))
    smm.load_state_dict({k: sm.tensor(v) for k, v in sd.items()}, strict=True)
    s_out = smm(*s_fargs, **s_fkw)
    assert_same(t_out, s_out, "forward")
    if training:
        ssd = smm.state_dict()
        for k, v in tm.state_dict().items():
            assert k in ssd, f"buffer {k} missing after forward"
            assert_same(v, ssd[k], f"state[{k}] after forward")

    # backward: the sum of every float output that needs grad
    pairs = [(t, s) for t, s in zip(_float_outputs(t_out), _float_outputs(s_out))
             if isinstance(t, torch.Tensor) and t.requires_grad and t.is_floating_point()]
    if pairs:
        t_in = list({id(t): t for t in tensors_in((fargs, fkw)) if t.requires_grad}.values())
        s_in = [smemo.get(id(t)) for t in t_in]
        sum(t.sum() for t, _ in pairs).backward()
        total = pairs[0][1].sum()
        for _, s in pairs[1:]:
            total = total + s.sum()
        total.backward()
        assert_grads(t_in, s_in, "input.grad")
        t_params, s_params = dict(tm.named_parameters()), dict(smm.named_parameters())
        assert set(t_params) <= set(s_params), f"parameters {set(t_params) - set(s_params)} missing"
        assert_grads(list(t_params.values()), [s_params[k] for k in t_params],
                     "param.grad " + ",".join(t_params))

    # jit.trace, where torch.jit.trace itself accepts the module at these inputs
    pos, kw = call_form(tm, fargs, fkw)
    try:
        with torch.no_grad():
            if kw:
                torch.jit.trace(tm, example_kwarg_inputs=leafify(kw), check_trace=False)
            else:
                torch.jit.trace(tm, tuple(leafify(pos)), check_trace=False)
    except Exception:  # noqa: BLE001 - nothing to hold scriptmod's trace to
        return
    jmemo: dict = {}
    j_pos, j_kw = to_sm(pos, jmemo, grad=False), to_sm(kw, jmemo, grad=False)
    if j_kw:
        traced = sm.jit.trace(smm, example_kwarg_inputs=j_kw)
        j_out = traced(**j_kw)
    else:
        traced = sm.jit.trace(smm, tuple(j_pos))
        j_out = traced(*j_pos)
    if training and any(isinstance(m, (torch.nn.modules.dropout._DropoutNd,
                                       torch.nn.RReLU)) for m in tm.modules()):
        return   # a random draw: the trace's values are its own
    assert_same(t_out, j_out, "jit.trace")


# ---- optimizers ----------------------------------------------------------------------------
def _regression_data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r = np.random.default_rng(1234)
    x = r.standard_normal((16, 4)).astype(np.float32)
    w_true = r.standard_normal((4, 3)).astype(np.float32)
    y = (x @ w_true + 0.1 * r.standard_normal((16, 3))).astype(np.float32)
    return x, y, (0.5 * r.standard_normal((4, 3))).astype(np.float32)


def run_optimizer(lib: Any, cls: Any, kwargs: dict, closure_needed: bool, steps: int = 5) -> Any:
    """``steps`` steps of ``cls`` on a least-squares problem; the final weight."""
    x, y, w0 = _regression_data()
    w = lib.nn.Parameter(lib.tensor(w0))
    xt, yt = lib.tensor(x), lib.tensor(y)
    opt = cls([w], **kwargs)

    def closure() -> Any:
        opt.zero_grad()
        loss = ((xt.matmul(w) - yt) ** 2).mean()
        loss.backward()
        return loss

    for _ in range(steps):
        if closure_needed:
            opt.step(closure)
        else:
            closure()
            opt.step()
    return w
