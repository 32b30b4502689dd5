"""``Tensor._version``: bumped by every in-place write, shared by views and ``detach()``
aliases, untouched by out-of-place ops and by writes through ``.data`` (as in PyTorch)."""
import pytest

import scriptmod as sm


def test_in_place_ops_bump_and_out_of_place_do_not():
    x = sm.zeros(4)
    assert x._version == 0
    x.add_(1)
    x.mul_(2)
    x.copy_(sm.ones(4))
    x.zero_()
    x.relu_()
    x.fill_(1.0)
    x[0] = 3.0
    assert x._version == 7
    y = x + 1
    x.exp()
    assert (y._version, x._version) == (0, 7)


def test_views_and_detach_share_the_counter_data_does_not():
    x = sm.zeros(2, 3)
    v, w = x[0], x.view(6)
    v.add_(1)
    assert x._version == v._version == w._version == 1
    w.mul_(2)
    x.detach().sub_(1)
    assert (x._version, v._version) == (3, 3)
    x.data.add_(1)                      # .data has its own counter
    assert x._version == 3
    x.clone().add_(1)
    assert x._version == 3


def test_optimizer_steps_bump_parameter_versions():
    p = sm.nn.Parameter(sm.ones(3))
    p.grad = sm.ones(3)
    opt = sm.optim.SGD([p], lr=0.1)
    opt.step()
    opt.step()
    assert p._version == 2


def _scenarios(lib):
    """Each returns the versions after a sequence of in-place writes."""
    def augmented():
        z = lib.zeros(3)
        z += 1
        z *= 2
        z -= 1
        z /= 2
        return [z._version]

    def indexed():
        z = lib.zeros(2, 3)
        z[:, 0] = 1
        z[0] += 1
        return [z._version]

    def unary_chain():
        z = lib.zeros(3)
        for op in ("sub_", "div_", "clamp_", "sigmoid_", "tanh_", "exp_", "neg_", "abs_"):
            args = {"sub_": (1,), "div_": (2,), "clamp_": (0, 1)}.get(op, ())
            getattr(z, op)(*args)
        return [z._version]

    def optimizers():
        out = []
        for name, kw in (("SGD", {"momentum": 0.9}), ("Adam", {}), ("AdamW", {})):
            p = lib.nn.Parameter(lib.ones(3))
            p.grad = lib.ones(3)
            opt = getattr(lib.optim, name)([p], lr=0.1, **kw)
            opt.step()
            opt.step()
            out.append(p._version)
        return out

    def module_state():
        bn = lib.nn.BatchNorm1d(3)
        bn(lib.randn(4, 3))
        z = lib.randn(3)
        lib.nn.ReLU(inplace=True)(z)
        lib.nn.init.zeros_(z)
        return [bn.num_batches_tracked._version, z._version]

    def no_grad_leaf():
        z = lib.randn(3, requires_grad=True)
        with lib.no_grad():
            z.add_(1)
            z.mul_(2)
        return [z._version]

    return [augmented, indexed, unary_chain, optimizers, module_state, no_grad_leaf]


@pytest.mark.parametrize("k", range(6))
def test_versions_match_torch(k):
    torch = pytest.importorskip("torch")
    assert _scenarios(sm)[k]() == _scenarios(torch)[k]()
