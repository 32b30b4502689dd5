"""PyTorch's ``op_db`` (its OpInfo database) as the oracle for scriptmod's functions: each
entry's sample inputs run through torch and scriptmod side by side (a trimmed form of
``shared/tools/torch_db.py``'s op stage).

An entry resolves to the scriptmod callable of the same name: ``scriptmod.<name>`` or the
Tensor method for top-level entries, ``scriptmod.linalg/special/fft/nn.functional.<name>`` in
the namespaces, and an OpInfo lambda re-bound so that ``torch`` means ``scriptmod``. A sample
is checked forward (the results equal torch's, or both libraries refuse it); one float64
sample with ``requires_grad`` checks the gradients of the sum of the floating outputs. A
random op compares shapes and dtypes only.
"""
from __future__ import annotations

import itertools
import types
from typing import Any, Callable

import scriptmod as sm

from .harness import (Unsupported, assert_grads, assert_same, dname, leafify, seed_all, to_sm,
                      torch)

NAMESPACES = {"nn.functional.": ("nn", "functional"), "linalg.": ("linalg",),
              "special.": ("special",), "fft.": ("fft",), "signal.windows.": ("signal", "windows")}
# entries whose torch result depends on the random generator: shapes and dtypes are compared
RANDOM = {
    "bernoulli", "multinomial", "normal", "uniform", "cauchy", "exponential", "geometric",
    "log_normal", "rand_like", "randn", "randn_like", "randint", "randint_like", "rand",
    "randperm", "empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided",
    "empty_permuted", "nn.functional.dropout", "nn.functional.dropout2d",
    "nn.functional.dropout3d", "nn.functional.alpha_dropout",
    "nn.functional.feature_alpha_dropout", "nn.functional.rrelu",
    "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d",
    "svd_lowrank", "pca_lowrank", "resize_", "resize_as_",
}


# entries whose result holds eigenvectors: defined up to a sign (a phase when complex), which
# LAPACK builds choose differently (MKL in PyTorch's wheel, OpenBLAS under NumPy); each vector
# is compared after scaling both libraries' to a real positive value at the component that
# is largest in torch's
EIGENVECTORS = {"linalg.eig": 1, "linalg.eigh": 1}
# entries whose gradient torch gets wrong or that sums raw eigenvectors: not compared
GRAD_NOT_COMPARED = {
    "as_strided_scatter": "PyTorch's own gradient is wrong here (its OpInfo skips "
                          "test_fn_grad); ours passes gradcheck in tests/scriptmod/ops",
    "linalg.eigh": "the sample's loss sums raw eigenvectors, whose signs are LAPACK's choice; "
                   "gradchecked through sign-invariant losses in tests/scriptmod/ops/test_linalg.py",
}


def _phase_fixed(t_vecs: Any, s_vecs: Any) -> tuple[Any, Any]:
    """Both libraries' eigenvector matrices (vectors in columns), each column scaled by the
    unit-modulus factor that makes its component at torch's largest one real positive."""
    import numpy as np
    a = t_vecs.detach().resolve_conj().numpy()
    b = np.asarray(s_vecs.detach().numpy())
    if a.size == 0:
        return t_vecs, s_vecs
    k = np.abs(a).argmax(axis=-2)[..., None, :]
    def unit(v: Any) -> Any:
        at = np.take_along_axis(v, k, axis=-2)
        return np.where(at == 0, 1, np.conj(at) / np.maximum(np.abs(at), 1e-300))
    return torch.from_numpy(a * unit(a)), sm.tensor(b * unit(b))


def entry_key(op: Any) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def namespace(op: Any) -> str:
    """'top', 'functional', 'linalg', 'special', 'fft', 'windows', or 'other' (not checked
    here: ``masked``, ``sparse`` and ATen-internal entries)."""
    for prefix, path in NAMESPACES.items():
        if op.name.startswith(prefix):
            return path[-1]
    if "." in op.name or isinstance(op.op, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)) \
            or op.name.startswith("jiterator") or (op.name.startswith("_")
                                                    and not op.name.startswith("__")):
        return "other"
    return "top"


def _rebind(f: types.FunctionType) -> types.FunctionType:
    """An OpInfo lambda with ``torch`` (and ``F``) meaning scriptmod's."""
    g = dict(f.__globals__)
    g["torch"] = sm
    if isinstance(g.get("F"), types.ModuleType) and g["F"].__name__ == "torch.nn.functional":
        g["F"] = sm.nn.functional
    nf = types.FunctionType(f.__code__, g, f.__name__, f.__defaults__, f.__closure__)
    nf.__kwdefaults__ = f.__kwdefaults__
    return nf


def resolve(op: Any) -> Callable[..., Any] | None:
    """The scriptmod callable of an entry, or None where scriptmod has no such name."""
    name, f = op.name, op.op
    for prefix, path in NAMESPACES.items():
        if name.startswith(prefix):
            base = name[len(prefix):]
            tmod, smod = torch, sm
            for p in path:
                tmod, smod = getattr(tmod, p), getattr(smod, p, None)
            if getattr(tmod, base, None) is f:
                return getattr(smod, base, None)
            return _rebind(f) if isinstance(f, types.FunctionType) else None
    if getattr(torch, name, None) is f:
        fn = getattr(sm, name, None)
        if fn is not None:
            return fn
        if op.method_variant is not None and hasattr(sm.Tensor, name):
            return lambda x, *a, _n=name, **k: getattr(x, _n)(*a, **k)
        return None
    if getattr(torch.Tensor, name, None) is f or name.startswith("__"):
        if hasattr(sm.Tensor, name):
            return lambda x, *a, _n=name, **k: getattr(x, _n)(*a, **k)
        return None
    return _rebind(f) if isinstance(f, types.FunctionType) else None


def dtypes_of(op: Any) -> list[Any]:
    """float64 and float32 where the entry supports them; int64 for integer-only entries."""
    supported = set(op.supported_dtypes("cpu"))
    dts = [d for d in (torch.float64, torch.float32) if d in supported]
    return dts or ([torch.int64] if torch.int64 in supported else [])


def _is_random(op: Any, sample: Any) -> bool:
    if op.name in RANDOM:
        return True
    p = sample.kwargs.get("dropout_p")
    if isinstance(p, (int, float)) and p > 0:
        return True
    if op.name == "nn.functional.multi_head_attention_forward":   # dropout_p is argument 9
        p = sample.args[9] if len(sample.args) > 9 else sample.kwargs.get("dropout_p", 0.0)
        return bool(p) and sample.kwargs.get("training", True)
    return False


def _assert_shapes(t_out: Any, s_out: Any, where: str = "out") -> None:
    if isinstance(t_out, torch.Tensor):
        assert isinstance(s_out, sm.Tensor), f"{where}: got {type(s_out).__name__}"
        assert tuple(s_out.shape) == tuple(t_out.shape), \
            f"{where}: shape {tuple(s_out.shape)} != torch {tuple(t_out.shape)}"
        assert dname(s_out.dtype) == dname(t_out.dtype), \
            f"{where}: dtype {s_out.dtype} != torch {t_out.dtype}"
    elif isinstance(t_out, (list, tuple)):
        assert isinstance(s_out, (list, tuple)) and len(s_out) == len(t_out), where
        for i, (a, b) in enumerate(zip(t_out, s_out)):
            _assert_shapes(a, b, f"{where}[{i}]")


def samples(op: Any, dtype: Any, n: int, requires_grad: bool = False) -> list:
    seed_all(0)
    return list(itertools.islice(op.sample_inputs("cpu", dtype, requires_grad=requires_grad),
                                 n))


def check_sample(op: Any, call: Callable[..., Any], sample: Any) -> None:
    """Forward: scriptmod's result equals torch's, or both refuse the sample. Raises
    ``AssertionError`` (or scriptmod's exception) on a difference, ``Unsupported`` where the
    sample holds a value this harness cannot convert."""
    memo: dict = {}
    s_in, s_args, s_kw = (to_sm(v, memo, grad=False)
                          for v in (sample.input, sample.args, sample.kwargs))
    seed_all(0)
    try:
        t_out = op.op(sample.input, *sample.args, **sample.kwargs)
    except Exception as torch_error:  # noqa: BLE001 - torch refuses: scriptmod must too
        seed_all(0)
        try:
            call(s_in, *s_args, **s_kw)
        except Exception:  # noqa: BLE001
            return
        raise AssertionError(f"torch refuses the sample ({type(torch_error).__name__}: "
                             f"{str(torch_error)[:120]}), scriptmod accepts it") from None
    seed_all(0)
    s_out = call(s_in, *s_args, **s_kw)
    if _is_random(op, sample):
        _assert_shapes(t_out, s_out)
    elif op.name in EIGENVECTORS:
        i = EIGENVECTORS[op.name]
        assert_same(t_out[:i], s_out[:i])
        assert_same(*_phase_fixed(t_out[i], s_out[i]), where=f"out[{i}] (phases fixed)")
    else:
        assert_same(t_out, s_out)


def check_grad(op: Any, call: Callable[..., Any]) -> bool:
    """The first float64 sample torch differentiates: every input's gradient of the sum of
    the floating outputs equals torch's. Returns whether a sample was checked."""
    dtype = torch.float64 if torch.float64 in set(op.supported_dtypes("cpu")) else torch.float32
    for sample in samples(op, dtype, 3, requires_grad=True):
        if _is_random(op, sample):
            continue
        memo: dict = {}
        t_in, t_args, t_kw = (leafify(v, memo) for v in (sample.input, sample.args, sample.kwargs))
        leaves = [t for t in memo.values() if t.requires_grad and t.is_floating_point()]
        if not leaves:
            continue
        try:
            seed_all(0)
            t_out = op.op(t_in, *t_args, **t_kw)
            outs = [t for t in _flat(t_out) if isinstance(t, torch.Tensor) and t.requires_grad
                    and t.is_floating_point()]
            if not outs:
                continue
            sum(t.sum() for t in outs).backward()
        except Exception:  # noqa: BLE001 - torch cannot differentiate this sample
            continue
        smemo: dict = {}
        s_in, s_args, s_kw = (to_sm(v, smemo) for v in (t_in, t_args, t_kw))
        seed_all(0)
        s_out = call(s_in, *s_args, **s_kw)
        flat_t, flat_s = _flat(t_out), _flat(s_out)
        parts = [s for t, s in zip(flat_t, flat_s) if isinstance(t, torch.Tensor)
                 and t.requires_grad and t.is_floating_point()]
        assert all(isinstance(p, sm.Tensor) for p in parts), "a differentiable output is not a Tensor"
        total = parts[0].sum()
        for p in parts[1:]:
            total = total + p.sum()
        total.backward()
        assert_grads(leaves, [smemo.get(id(t)) for t in leaves], "input.grad")
        return True
    return False


def _flat(o: Any) -> list:
    if isinstance(o, (list, tuple)):
        return [y for x in o for y in _flat(x)]
    return [o]


__all__ = ["GRAD_NOT_COMPARED", "Unsupported", "check_grad", "check_sample", "dtypes_of", "entry_key", "namespace",
           "resolve", "samples"]
