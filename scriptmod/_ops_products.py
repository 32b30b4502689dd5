"""Functions and Tensor methods of tensor products: einsum, tensordot, the add*mm family, kron,
cdist, cross: each published once with ``@public``.

Every one is a decomposition into existing ops (permute, reshape, index, sum, elementwise
ops and ``matmul``), so it traces, differentiates and exports with no registry rows of its
own, and every contraction runs on the one GEMM path: ``einsum`` lowers each contraction of
two operands to ONE (batched) matmul between a permute/reshape of each side, as PyTorch's
does, with the pair order of ``opt_einsum`` (optimal for up to four operands, greedy beyond).

    >>> import scriptmod as sm
    >>> q, k = sm.ones(2, 4, 8), sm.ones(2, 5, 8)
    >>> sm.einsum("bqd,bkd->bqk", q, k).shape
    scriptmod.Size([2, 4, 5])
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

from scriptmod import _einsum as E
from scriptmod._creation import eye, ones_like, tensor, zeros_like
from scriptmod._einsum import align as _align
from scriptmod._einsum import matmul_pair as _matmul_pair
from scriptmod._einsum import plain as _plain
from scriptmod._public import public, with_out
from scriptmod._shape_ops import cat, stack
from scriptmod._tensor_ops import where
from scriptmod.ir import dtypes as D
from scriptmod.ir.ops.rules import c_name, norm_dim, promote
from scriptmod.tensor import Tensor


@public(method=False, out=False)
def einsum(*args: Any) -> Tensor:
    """Sums the products of the operands' elements over the dims the equation's subscripts
    name, as ``torch.einsum``: ``'...'`` broadcasts, a repeated subscript takes a diagonal, an
    implicit output lists the once-seen subscripts in order; also the sublist form
    ``einsum(a, [0, 1], b, [1, 2], [0, 2])`` and a list of operands. Each contraction of two
    operands is one batched matmul; three or more are paired in opt_einsum's order.

        >>> import scriptmod as sm
        >>> sm.einsum("ii", sm.eye(3))
        tensor(3.)
    """
    return E.run(*E.operands_of(args))


# ---- tensordot, inner, kron --------------------------------------------------------------
def _tensordot_dims(a: Tensor, b: Tensor, dims: Any) -> tuple[list[int], list[int]]:
    if isinstance(dims, Tensor):
        dims = dims.tolist()
    if isinstance(dims, int):
        if dims < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
        if dims > min(a.dim(), b.dim()):
            raise RuntimeError(f"tensordot expects dims < ndim_a or ndim_b, but got dims={dims}")
        return list(range(a.dim() - dims, a.dim())), list(range(dims))
    da, db = dims
    da = [da] if isinstance(da, int) else list(da)
    db = [db] if isinstance(db, int) else list(db)
    if len(da) != len(db):
        raise RuntimeError("both dimension lists should have same length")
    return [norm_dim(d, a.dim(), "tensordot") for d in da], \
        [norm_dim(d, b.dim(), "tensordot") for d in db]


@public(method=False)
def tensordot(a: Tensor, b: Tensor, dims: Any = 2) -> Tensor:
    """Contracts ``dims`` of ``a`` with ``dims`` of ``b`` (an int: the last ``dims`` of ``a``
    with the first of ``b``; or two lists), as one matmul.

        >>> import scriptmod as sm
        >>> sm.tensordot(sm.ones(2, 3), sm.ones(3, 4), dims=1).shape
        scriptmod.Size([2, 4])
    """
    da, db = _tensordot_dims(a, b, dims)
    if a.dtype is not b.dtype:
        raise RuntimeError("both inputs should have same dtype")
    for i, j in zip(da, db):          # size 1 against n: the n side is summed first
        n, m = _plain(a.shape[i]), _plain(b.shape[j])
        if m == 1 and n != 1:
            a = a.sum(i, keepdim=True, dtype=a.dtype)
        elif n == 1 and m != 1:
            b = b.sum(j, keepdim=True, dtype=b.dtype)
        elif n != m:
            raise RuntimeError(f"contracted dimensions need to match, but first has size {n} "
                               f"in dim {i} and second has size {m} in dim {j}")
    free_a = [d for d in range(a.dim()) if d not in da]
    free_b = [d for d in range(b.dim()) if d not in db]
    return _matmul_pair(_align(a, list(range(a.dim())), free_a + da),
                        _align(b, list(range(b.dim())), db + free_b), 0, len(free_a), len(da))


@public()
def inner(input: Tensor, other: Tensor) -> Tensor:
    """The sum of products over the last dims of both (a 0-d operand: their product)."""
    if input.dim() == 0 or other.dim() == 0:
        return input * other
    if _plain(input.shape[-1]) != _plain(other.shape[-1]):
        raise RuntimeError(f"inner() the last dimension must match on both input tensors but "
                           f"got shapes {list(input.shape)} and {list(other.shape)}")
    return tensordot(input, other, ([-1], [-1]))


@public()
def kron(input: Tensor, other: Tensor) -> Tensor:
    """The Kronecker product: block ``(i, j, ...)`` of the result is ``input[i, j, ...] *
    other`` (the rank is the larger; the smaller is padded with leading 1s)."""
    n = max(input.dim(), other.dim())
    sa = [1] * (n - input.dim()) + list(input.shape)
    sb = [1] * (n - other.dim()) + list(other.shape)
    a = input.reshape([s for d in sa for s in (d, 1)])
    b = other.reshape([s for d in sb for s in (1, d)])
    return (a * b).reshape([x * y for x, y in zip(sa, sb)])


# ---- matrix-vector products and the add* family -------------------------------------------
def _addr_scalars(result: D.DType, beta: Any, alpha: Any) -> None:
    """addr's checks of ``beta``/``alpha`` against the result's kind (the other add* ops
    accept any number and convert the result back)."""
    for arg, v in (("beta", beta), ("alpha", alpha)):
        if isinstance(v, bool) and result is not D.bool_:
            raise RuntimeError(f"Boolean {arg} only supported for Boolean results.")
        if isinstance(v, float) and result.category in (D.INT, D.BOOL):
            raise RuntimeError(f"For integral input tensors, argument {arg} must not be a "
                               f"floating point number.")


def _check_expands(input: Tensor, shape: Sequence[Any]) -> None:
    """``input`` must broadcast to ``shape`` (the product's), as ``expand`` requires."""
    have = [_plain(n) for n in input.shape]
    want = [_plain(n) for n in shape]
    if len(have) <= len(want):
        for k, (h, w) in enumerate(zip(reversed(have), reversed(want))):
            if h != w and h != 1:
                dim = len(want) - 1 - k
                raise RuntimeError(f"The expanded size of the tensor ({w}) must match the "
                                   f"existing size ({h}) at non-singleton dimension {dim}.  "
                                   f"Target sizes: {want}.  Tensor sizes: {have}")
        return
    raise RuntimeError(f"The expanded size of the tensor ({len(want)}) must be greater or equal "
                       f"to the number of dimensions in the tensor ({len(have)})")


def _scaled_sum(input: Tensor, prod: Tensor, beta: Any, alpha: Any) -> Tensor:
    """``beta * input + alpha * prod`` in ``prod``'s shape; ``beta == 0`` ignores ``input``
    (NaN and inf in it do not propagate), as PyTorch's BLAS-style ops do."""
    _check_expands(input, prod.shape)
    kind = prod.dtype
    if kind is D.bool_:
        out = prod if alpha else zeros_like(prod)
        return out | input if beta else out
    if kind.category == D.INT:       # PyTorch converts the scales to the integer type first
        beta, alpha = int(beta), int(alpha)
    scaled = prod if alpha == 1 else prod * alpha
    out = scaled if beta == 0 else (input if beta == 1 else input * beta) + scaled
    return out if out.dtype is kind else out.to(kind)


def _same_dtypes(name: str, *tensors: Tensor) -> None:
    if any(t.dtype is not tensors[0].dtype for t in tensors):
        names = ", ".join(t.dtype.short for t in tensors[:-1]) + f", and {tensors[-1].dtype.short}"
        raise RuntimeError(f"{name} input tensors must have the same dtype, but got {names}")


def _check_mv(input: Tensor | None, mat: Tensor, vec: Tensor) -> None:
    ranks = [] if input is None else [input.dim()]
    if mat.dim() != 2 or vec.dim() != 1 or (input is not None and input.dim() > 1):
        got = ", ".join(str(r) for r in ranks + [mat.dim(), vec.dim()])
        raise RuntimeError(f"vector + matrix @ vector expected, got {got}")
    if _plain(mat.shape[1]) != _plain(vec.shape[0]) or (
            input is not None and input.dim() == 1 and _plain(input.shape[0]) not in (
                1, _plain(mat.shape[0]))):
        given = f"input ({', '.join(str(n) for n in input.shape)}), " if input is not None else ""
        raise RuntimeError(f"size mismatch, got {given}mat ({mat.shape[0]}x{mat.shape[1]}), "
                           f"vec ({vec.shape[0]})")


@public()
def mv(input: Tensor, vec: Tensor) -> Tensor:
    """The matrix-vector product of ``input`` (n, m) and ``vec`` (m,)."""
    _check_mv(None, input, vec)
    _same_dtypes("addmv", vec, input, vec)   # PyTorch names (result, mat, vec)
    return input.matmul(vec)


@public(inplace=True)
def addmv(input: Tensor, mat: Tensor, vec: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    """``beta * input + alpha * (mat @ vec)`` (``beta=0``: ``input`` is ignored, NaN too)."""
    _check_mv(input, mat, vec)
    _same_dtypes("addmv", input, mat, vec)
    return _scaled_sum(input, mat.matmul(vec), beta, alpha)


@public(inplace=True)
def addr(input: Tensor, vec1: Tensor, vec2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    """``beta * input + alpha * outer(vec1, vec2)``; on bool tensors ``or``/``and``."""
    for arg, v in (("vec1", vec1), ("vec2", vec2)):
        if v.dim() != 1:
            raise RuntimeError(f"addr: Expected 1-D argument {arg}, but got {v.dim()}-D")
    prod = vec1.unsqueeze(1) * vec2.unsqueeze(0)
    if prod.dtype is not input.dtype:
        kind = promote(prod.dtype, input.dtype)
        prod = prod.to(kind)
    _addr_scalars(prod.dtype, beta, alpha)
    return _scaled_sum(input.to(prod.dtype), prod, beta, alpha)


def _check_bmm(batch1: Tensor, batch2: Tensor) -> None:
    for arg, b in (("batch1", batch1), ("batch2", batch2)):
        if b.dim() != 3:
            raise RuntimeError(f"{arg} must be a 3D tensor")
    want = [_plain(batch1.shape[0]), _plain(batch1.shape[2])]
    got = [_plain(batch2.shape[0]), _plain(batch2.shape[1])]
    if want != got:
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: "
                           f"{want} but got: {got}.")


def _check_input_dtypes(input: Tensor, batch1: Tensor, batch2: Tensor) -> None:
    if not input.dtype is batch1.dtype is batch2.dtype:
        raise RuntimeError(f"Input dtypes must be the same, got: input {c_name(input.dtype)}, "
                           f"batch1: {c_name(batch1.dtype)}, batch2: {c_name(batch2.dtype)}")


@public(inplace=True)
def baddbmm(input: Tensor, batch1: Tensor, batch2: Tensor, *, beta: Any = 1,
            alpha: Any = 1) -> Tensor:
    """``beta * input + alpha * (batch1 @ batch2)``, one matmul per batch entry."""
    _check_bmm(batch1, batch2)
    _check_input_dtypes(input, batch1, batch2)
    return _scaled_sum(input, batch1.matmul(batch2), beta, alpha)


@public(inplace=True)
def addbmm(input: Tensor, batch1: Tensor, batch2: Tensor, *, beta: Any = 1,
           alpha: Any = 1) -> Tensor:
    """``beta * input + alpha * sum_b(batch1[b] @ batch2[b])``, as ONE matmul of
    ``(n, b*m) @ (b*m, p)``."""
    for arg, b in (("batch1", batch1), ("batch2", batch2)):
        if b.dim() != 3:
            raise RuntimeError(f"{arg} must be a 3D tensor")
    if _plain(batch1.shape[0]) != _plain(batch2.shape[0]):
        raise RuntimeError(f"batch1 and batch2 must have same number of batches, got "
                           f"{batch1.shape[0]} and {batch2.shape[0]}")
    if _plain(batch1.shape[2]) != _plain(batch2.shape[1]):
        raise RuntimeError(f"Incompatible matrix sizes for bmm ({batch1.shape[1]}x"
                           f"{batch1.shape[2]} and {batch2.shape[1]}x{batch2.shape[2]})")
    _check_input_dtypes(input, batch1, batch2)
    b, n, m = batch1.shape
    rows = batch1.permute(1, 0, 2).reshape(n, b * m)
    prod = rows.matmul(batch2.reshape(b * m, batch2.shape[2]))
    return _scaled_sum(input, prod, beta, alpha)


def _conj(x: Tensor) -> Tensor:
    return x.conj() if x.dtype.category == D.COMPLEX else x


@public()
def vdot(input: Tensor, other: Tensor) -> Tensor:
    """``sum(conj(input) * other)`` of two 1-D tensors (the first is conjugated)."""
    if input.dim() != 1 or other.dim() != 1:
        raise RuntimeError(f"1D tensors expected, but got {input.dim()}D and {other.dim()}D "
                           f"tensors")
    if input.dtype is not other.dtype:
        raise RuntimeError(f"dot : expected both vectors to have same dtype, but found "
                           f"{input.dtype.short} and {other.dtype.short}")
    n, m = _plain(input.shape[0]), _plain(other.shape[0])
    if n != m:
        raise RuntimeError(f"inconsistent tensor size, expected tensor [{n}] and src [{m}] to "
                           f"have the same number of elements, but got {n} and {m} elements "
                           f"respectively")
    return _conj(input).matmul(other)


@public(out=False)
def trace(input: Tensor) -> Tensor:
    """The sum of the main diagonal of a matrix (integers sum in int64)."""
    if input.dim() != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {input.dim()}")
    if input.dtype is D.bool_:
        raise NotImplementedError("\"trace\" not implemented for 'Bool'")
    r, c = input.shape
    n = min(r, c)
    return input.reshape(-1)[:n * (c + 1):c + 1].sum()


# ---- cross products ----------------------------------------------------------------------
def linalg_cross(input: Tensor, other: Tensor, *, dim: int = -1) -> Tensor:
    """The cross product of 3-vectors along ``dim`` (the operands broadcast), as
    ``torch.linalg.cross``: ``a[1] b[2] - a[2] b[1]``, ... written as two gathers per side."""
    if input.dim() != other.dim():
        raise RuntimeError("linalg.cross: inputs must have the same number of dimensions.")
    if input.dtype is not other.dtype:
        raise RuntimeError(f"expected scalar type {input.dtype.short} but found "
                           f"{other.dtype.short}")
    n, m = _plain(input.shape[dim]), _plain(other.shape[dim])
    if n != 3 or m != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got {n} "
                           f"and {m}")
    nxt = tensor([1, 2, 0], device=input.device)
    prv = tensor([2, 0, 1], device=input.device)
    return (input.index_select(dim, nxt) * other.index_select(dim, prv)
            - input.index_select(dim, prv) * other.index_select(dim, nxt))


@public()
def cross(input: Tensor, other: Tensor, dim: int | None = None) -> Tensor:
    """``linalg.cross`` along ``dim``; without ``dim`` (deprecated, with PyTorch's warning)
    the first dim of ``input`` of size 3."""
    if dim is None:
        warnings.warn("Using torch.cross without specifying the dim arg is deprecated.\nPlease "
                      "either pass the dim explicitly or simply use torch.linalg.cross.\nThe "
                      "default value of dim will change to agree with that of linalg.cross in a "
                      "future release.", UserWarning, stacklevel=2)
        dim = next((d for d, n in enumerate(input.shape) if _plain(n) == 3), None)
        if dim is None:
            raise RuntimeError("no dimension of size 3 in input")
    return linalg_cross(input, other, dim=dim)


# ---- cdist -------------------------------------------------------------------------------
_CDIST_MODES = {"use_mm_for_euclid_dist_if_necessary": None, "use_mm_for_euclid_dist": True,
                "donot_use_mm_for_euclid_dist": False}


def _safe_root(s: Tensor, p: float) -> Tensor:
    """``s ** (1 / p)`` with a zero gradient where ``s == 0`` (as PyTorch's cdist: the
    distance between equal points has gradient 0, not NaN)."""
    zero = s == 0
    root = where(zero, ones_like(s), s)
    root = root.sqrt() if p == 2 else root.pow(1.0 / p)
    return where(zero, zeros_like(s), root)


def _euclid_mm(x1: Tensor, x2: Tensor) -> Tensor:
    """PyTorch's ``_euclidean_dist``: ``|a|^2 - 2 a.b + |b|^2`` as ONE matmul of
    ``[-2a, |a|^2, 1]`` with ``[b, 1, |b|^2]``, clamped at 0."""
    n1 = (x1 * x1).sum(-1, keepdim=True)
    n2 = (x2 * x2).sum(-1, keepdim=True)
    a = cat([x1 * -2, n1, ones_like(n1)], -1)
    b = cat([x2, ones_like(n2), n2], -1)
    return _safe_root(a.matmul(b.transpose(-1, -2)).clamp_min(0), 2)


def _check_cdist(x1: Tensor, x2: Tensor, p: float, compute_mode: str) -> None:
    for arg, x in (("X1", x1), ("X2", x2)):
        if x.dtype.category != D.FLOAT:
            raise RuntimeError(f"cdist only supports floating-point dtypes, {arg} got: "
                               f"{x.dtype.short}")
        if x.dim() < 2:
            raise RuntimeError(f"cdist only supports at least 2D tensors, {arg} got: "
                               f"{x.dim()}D")
    if _plain(x1.shape[-1]) != _plain(x2.shape[-1]):
        raise RuntimeError(f"X1 and X2 must have the same number of columns. X1: "
                           f"{x1.shape[-1]} X2: {x2.shape[-1]}")
    if p < 0:
        raise RuntimeError("cdist only supports non-negative p values")
    if x1.dtype is not x2.dtype:
        raise RuntimeError(f"expected scalar type {x1.dtype.short} but found {x2.dtype.short}")
    if compute_mode not in _CDIST_MODES:
        raise ValueError(f"{compute_mode} is not a valid value for compute_mode")


@public(method=False, out=False)
def cdist(x1: Tensor, x2: Tensor, p: float = 2.0,
          compute_mode: str = "use_mm_for_euclid_dist_if_necessary") -> Tensor:
    """The p-norm distance between each row of ``x1`` (..., P, M) and each row of ``x2``
    (..., R, M): (..., P, R). For p=2 with more than 25 rows on a side (or
    ``compute_mode='use_mm_for_euclid_dist'``) it is PyTorch's matmul expansion; equal points
    get gradient 0 as in PyTorch.

        >>> import scriptmod as sm
        >>> sm.cdist(sm.tensor([[0.0, 0.0]]), sm.tensor([[3.0, 4.0]]))
        tensor([[5.]])
    """
    p = float(p)
    _check_cdist(x1, x2, p, compute_mode)
    use_mm = _CDIST_MODES[compute_mode]
    if use_mm is None:
        use_mm = _plain(x1.shape[-2]) > 25 or _plain(x2.shape[-2]) > 25
    if p == 2 and use_mm:
        return _euclid_mm(x1, x2)
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    if p == 0:                       # PyTorch's count: its gradient is 0, not missing
        return diff.abs().ceil().clamp_max(1).sum(-1)
    if p == 1:
        return diff.abs().sum(-1)
    if math.isinf(p):
        return diff.abs().amax(-1)
    if p == 2:
        return _safe_root((diff * diff).sum(-1), 2)
    zero = diff == 0
    powers = where(zero, ones_like(diff), diff).abs().pow(p)
    return _safe_root(where(zero, zeros_like(diff), powers).sum(-1), p)


# ---- chains of matrix products -----------------------------------------------------------
def _chain_order(dims: list[Any]) -> Any:
    """The cheapest parenthesisation of matrices ``dims[i] x dims[i + 1]`` (the classic
    dynamic programme, first cheapest split as PyTorch's): nested pairs of indices."""
    n = len(dims) - 1
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i][j] = -1
            for k in range(i, j):
                c = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1]
                if cost[i][j] < 0 or c < cost[i][j]:
                    cost[i][j], split[i][j] = c, k

    def tree(i: int, j: int) -> Any:
        return i if i == j else (tree(i, split[i][j]), tree(split[i][j] + 1, j))
    return tree(0, n - 1)


def _check_multi_dot(tensors: Sequence[Tensor]) -> None:
    n = len(tensors)
    if n < 2:
        raise RuntimeError(f"multi_dot(): expected at least 2 tensors but got {n}")
    for k, t in enumerate(tensors):
        where_ = "first" if k == 0 else "last" if k == n - 1 else None
        if where_ and t.dim() not in (1, 2):
            raise RuntimeError(f"multi_dot(): the {where_} tensor must be 1D or 2D but got "
                               f"{t.dim()}D")
        if not where_ and t.dim() != 2:
            raise RuntimeError(f"multi_dot(): tensor {k} must be 2D but got {t.dim()}D")
        if t.dtype is not tensors[0].dtype:
            raise RuntimeError(f"multi_dot(): all tensors must have be the same dtype but "
                               f"tensor 0 is {tensors[0].dtype.name} and tensor {k} "
                               f"{t.dtype.name}")


def multi_dot(tensors: Sequence[Tensor]) -> Tensor:
    """The product of a chain of matrices in the order of least work (the first may be a
    row vector, the last a column vector), as ``torch.linalg.multi_dot``.
    """
    tensors = list(tensors)
    _check_multi_dot(tensors)
    first, last = tensors[0].dim() == 1, tensors[-1].dim() == 1
    mats = [tensors[0].unsqueeze(0) if first else tensors[0], *tensors[1:-1],
            tensors[-1].unsqueeze(1) if last else tensors[-1]]
    for k in range(len(mats) - 1):
        if _plain(mats[k].shape[1]) != _plain(mats[k + 1].shape[0]):
            raise RuntimeError(f"multi_dot(): tensors {k} and {k + 1} with shapes "
                               f"{list(tensors[k].shape)} and {list(tensors[k + 1].shape)} "
                               f"cannot be multiplied")
    dims = [_plain(mats[0].shape[0])] + [_plain(m.shape[1]) for m in mats]

    def run(node: Any) -> Tensor:
        return mats[node] if isinstance(node, int) else run(node[0]).matmul(run(node[1]))
    out = run(_chain_order(dims))
    if first:
        out = out.squeeze(0)
    return out.squeeze(-1) if last else out


@public(method=False)
def chain_matmul(*matrices: Tensor) -> Tensor:
    """Deprecated (as in PyTorch): ``linalg.multi_dot`` of 2-D matrices."""
    warnings.warn("torch.chain_matmul is deprecated and will be removed in a future PyTorch "
                  "release. Use torch.linalg.multi_dot instead, which accepts a list of two or "
                  "more tensors rather than multiple parameters.", UserWarning, stacklevel=2)
    if not matrices:
        raise RuntimeError("chain_matmul(): Expected one or more matrices")
    for m in matrices:
        if m.dim() != 2:
            raise RuntimeError(f"Tensor dimension is {m.dim()}, expected 2 instead.")
    return matrices[0].clone() if len(matrices) == 1 else multi_dot(matrices)


# ---- matrix_power, vander, vecdot --------------------------------------------------------
@public()
def matrix_power(input: Tensor, n: int) -> Tensor:
    """``input`` (a batch of square matrices) to the integer power ``n`` by repeated
    squaring; ``n = 0`` the identity, ``n < 0`` the power of ``linalg.inv(input)``."""
    if input.dim() < 2:
        raise RuntimeError("linalg.matrix_power: The input tensor A must have at least 2 "
                           "dimensions.")
    if _plain(input.shape[-1]) != _plain(input.shape[-2]):
        raise RuntimeError(f"linalg.matrix_power: A must be batches of square matrices, but "
                           f"they are {input.shape[-2]} by {input.shape[-1]} matrices")
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"matrix_power(): argument 'n' must be int, not {type(n).__name__}")
    if n == 0:      # the identity; the empty slice of input gives it PyTorch's zero gradient
        ident = eye(input.shape[-1], dtype=input.dtype, device=input.device)
        return cat([ident.expand(*input.shape), input[..., :0]], -1)
    a = input
    if n < 0:
        from scriptmod.linalg import inv   # lazy: scriptmod.linalg imports this module
        a, n = inv(input), -n
    result, z = None, None
    while n > 0:
        bit, n = n % 2, n // 2
        z = a if z is None else z.matmul(z)
        if bit:
            result = z if result is None else result.matmul(z)
    assert result is not None
    return result.clone() if result is input else result


def vander(x: Tensor, *, N: int | None = None) -> Tensor:
    """The Vandermonde matrix of ``x``: column ``k`` is ``x ** k`` for ``k < N``
    (``torch.linalg.vander``'s increasing powers), built by repeated products.
    """
    if x.dtype.category not in (D.INT, D.COMPLEX) and x.dtype not in (D.float32, D.float64):
        raise RuntimeError(f"linalg.vander supports floating point, complex, and integer "
                           f"tensors, but got {x.dtype.short}")
    x = x.unsqueeze(-1) if x.dim() == 0 else x
    n = x.shape[-1] if N is None else N
    if _plain(n) <= 1:
        raise RuntimeError("N must be greater than 1.")
    cols = [ones_like(x), x]
    for _ in range(_plain(n) - 2):
        cols.append(cols[-1] * x)
    return stack(cols, -1)


def vecdot(x: Tensor, y: Tensor, *, dim: int = -1) -> Tensor:
    """``sum(conj(x) * y)`` along ``dim`` (the operands broadcast), as
    ``torch.linalg.vecdot``."""
    for v in (x, y):
        if v.dtype.category not in (D.FLOAT, D.COMPLEX):
            raise RuntimeError(f"linalg.vecdot: Expected a floating point or complex tensor as "
                               f"input. Got {v.dtype.short}")
    if x.dtype is not y.dtype:
        raise RuntimeError(f"linalg.vecdot: Expected x and y to have the same dtype, but found "
                           f"x of type {x.dtype.short} and y of type {y.dtype.short} instead")
    return (_conj(x) * y).sum(dim)


# ``scriptmod.linalg``'s functions of this family, with ``out=`` where torch.linalg has it
LINALG = {"cross": with_out(linalg_cross, "linalg.cross"),
          "vecdot": with_out(vecdot, "linalg.vecdot"),
          "multi_dot": with_out(multi_dot, "linalg.multi_dot"),
          "matrix_power": with_out(matrix_power, "linalg.matrix_power"),
          "vander": vander}
