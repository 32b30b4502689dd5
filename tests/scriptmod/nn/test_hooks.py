"""Module hooks: order, return values, prepend, with_kwargs, always_call, removal, and
full backward hooks wired through autograd (checked against torch when installed)."""
import warnings

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn
from scriptmod.autograd.engine import RemovableHandle


def make_scale(lib):
    class Scale(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = lib.nn.Parameter(lib.tensor([2.0, 3.0]))

        def forward(self, x, y=None, *, shift=0.0):
            out = x * self.w + shift
            return out if y is None else out * y
    return Scale()


def record_order(lib):
    m, log = make_scale(lib), []
    m.register_forward_pre_hook(lambda mod, args: log.append("pre1"))
    m.register_forward_pre_hook(lambda mod, args: log.append("pre0"), prepend=True)
    m.register_forward_pre_hook(lambda mod, args, kw: log.append(f"prekw:{sorted(kw)}"),
                                with_kwargs=True)
    m.register_forward_hook(lambda mod, args, out: log.append("fwd1"))
    m.register_forward_hook(lambda mod, args, out: log.append("fwd0"), prepend=True)
    m.register_forward_hook(lambda mod, args, kw, out: log.append(f"fwdkw:{sorted(kw)}"),
                            with_kwargs=True)
    m.register_full_backward_pre_hook(lambda mod, go: log.append("bwpre"))
    m.register_full_backward_hook(lambda mod, gi, go: log.append("bw1"))
    m.register_full_backward_hook(lambda mod, gi, go: log.append("bw0"), prepend=True)
    x = lib.tensor([1.0, 1.0], requires_grad=True)
    m(x, shift=1.0).sum().backward()
    return log


def test_hook_order():
    assert record_order(sm) == ["pre0", "pre1", "prekw:['shift']", "fwd0", "fwd1",
                                "fwdkw:['shift']", "bwpre", "bw0", "bw1"]


def test_hook_order_matches_torch():
    torch = pytest.importorskip("torch")
    assert record_order(sm) == record_order(torch)


def test_pre_hook_replaces_args():
    m = make_scale(sm)
    m.register_forward_pre_hook(lambda mod, args: args[0] * 0 + 1)     # non-tuple -> (value,)
    assert m(sm.tensor([5.0, 5.0])).tolist() == [2.0, 3.0]
    m2 = make_scale(sm)
    m2.register_forward_pre_hook(lambda mod, args, kw: ((args[0],), {"shift": 10.0}),
                                 with_kwargs=True)
    assert m2(sm.tensor([0.0, 0.0])).tolist() == [10.0, 10.0]
    m3 = make_scale(sm)
    m3.register_forward_pre_hook(lambda mod, args, kw: 5, with_kwargs=True)
    with pytest.raises(RuntimeError, match=r"must return None or a tuple of \(new_args, new_kwargs\)"):
        m3(sm.ones(2))


def test_forward_hook_replaces_output_and_handles_remove():
    m = make_scale(sm)
    h = m.register_forward_hook(lambda mod, args, out: out + 100)
    assert isinstance(h, RemovableHandle)
    assert m(sm.ones(2)).tolist() == [102.0, 103.0]
    h.remove()
    h.remove()                                  # removing twice is harmless
    assert m(sm.ones(2)).tolist() == [2.0, 3.0]
    with m.register_forward_hook(lambda mod, args, out: out * 0):
        assert m(sm.ones(2)).tolist() == [0.0, 0.0]
    assert m(sm.ones(2)).tolist() == [2.0, 3.0]
    assert not m._forward_hooks and not m._forward_hooks_with_kwargs


def test_always_call_runs_on_exception():
    class Boom(nn.Module):
        def forward(self, x):
            raise ValueError("boom")
    m, log = Boom(), []
    m.register_forward_hook(lambda mod, args, out: log.append(("always", out)), always_call=True)
    m.register_forward_hook(lambda mod, args, out: log.append("normal"))

    def bad(mod, args, out):
        raise KeyError("hook failed")
    m.register_forward_hook(bad, always_call=True)
    with pytest.warns(UserWarning, match="always_call=True.*hook failed"):
        with pytest.raises(ValueError, match="boom"):
            m(1)
    assert log == [("always", None)]


def test_always_call_not_repeated_when_a_later_hook_raises():
    m, log = make_scale(sm), []
    m.register_forward_hook(lambda mod, args, out: log.append("always"), always_call=True)

    def bad(mod, args, out):
        raise ValueError("later")
    m.register_forward_hook(bad)
    with pytest.raises(ValueError):
        m(sm.ones(2))
    assert log == ["always"]


def test_full_backward_hook_grads():
    m = make_scale(sm)
    seen = {}

    def hook(mod, gi, go):
        seen["gi"], seen["go"] = gi, go
    m.register_full_backward_hook(hook)
    x = sm.tensor([1.0, 2.0], requires_grad=True)
    y = sm.tensor([3.0, 4.0], requires_grad=True)
    (m(x, y) * sm.tensor([1.0, 10.0])).sum().backward()
    assert len(seen["gi"]) == 2 and len(seen["go"]) == 1
    assert seen["go"][0].tolist() == [1.0, 10.0]
    assert seen["gi"][0].tolist() == [6.0, 120.0] and seen["gi"][1].tolist() == [2.0, 60.0]
    assert x.grad.tolist() == [6.0, 120.0]
    assert m.w.grad.tolist() == [3.0, 80.0]


def test_full_backward_hook_can_replace_grad_input():
    m = make_scale(sm)
    m.register_full_backward_hook(lambda mod, gi, go: (gi[0] * 0 + 7,))
    x = sm.tensor([1.0, 2.0], requires_grad=True)
    m(x).sum().backward()
    assert x.grad.tolist() == [7.0, 7.0]
    m2 = make_scale(sm)
    m2.register_full_backward_hook(lambda mod, gi, go: (gi[0], gi[0]))
    with pytest.raises(RuntimeError, match="invalid number of grad_input, got 2, but expected 1"):
        m2(sm.ones(2, requires_grad=True)).sum().backward()


def test_backward_pre_hook_replaces_grad_output():
    m = make_scale(sm)
    m.register_full_backward_pre_hook(lambda mod, go: (go[0] * 2,))
    x = sm.tensor([1.0, 1.0], requires_grad=True)
    m(x).sum().backward()
    assert x.grad.tolist() == [4.0, 6.0] and m.w.grad.tolist() == [2.0, 2.0]


def test_non_tensor_inputs_give_none_and_no_input_grad_warns():
    m = make_scale(sm)
    seen = []
    m.register_full_backward_hook(lambda mod, gi, go: seen.append(gi))
    m(sm.tensor([1.0, 1.0], requires_grad=True), 2.0).sum().backward()
    assert seen[-1][1] is None and seen[-1][0].tolist() == [4.0, 6.0]
    with pytest.warns(UserWarning, match="no inputs require gradients"):
        m(sm.ones(2)).sum().backward()
    assert seen[-1] == (None,)


def test_backward_hooks_match_torch_numerically():
    torch = pytest.importorskip("torch")

    def run(lib):
        m, out = make_scale(lib), []
        m.register_full_backward_pre_hook(lambda mod, go: (go[0] * 3,))
        m.register_full_backward_hook(lambda mod, gi, go: out.extend(
            [g.detach().numpy().copy() for g in gi + go if g is not None]))
        x = lib.tensor([0.5, -1.0], requires_grad=True)
        y = lib.tensor([2.0, 4.0], requires_grad=True)
        (m(x, y) ** 2).sum().backward()
        return out + [x.grad.numpy(), y.grad.numpy(), m.w.grad.numpy()]
    for a, b in zip(run(sm), run(torch)):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_old_backward_hook_warns_and_excludes_full_hooks():
    m = make_scale(sm)
    seen = []
    with pytest.warns(FutureWarning, match="register_full_backward_hook"):
        m.register_backward_hook(lambda mod, gi, go: seen.append(len(go)))
    m(sm.ones(2, requires_grad=True)).sum().backward()
    assert seen
    with pytest.raises(RuntimeError, match="Cannot use both regular backward hooks and full"):
        m.register_full_backward_hook(lambda *a: None)
    m2 = make_scale(sm)
    m2.register_full_backward_hook(lambda *a: None)
    with pytest.raises(RuntimeError, match="Cannot use both"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m2.register_backward_hook(lambda *a: None)


def test_hooks_in_no_grad_and_nested_modules():
    inner = make_scale(sm)
    outer = nn.Sequential(inner, make_scale(sm))
    log = []
    inner.register_full_backward_hook(lambda mod, gi, go: log.append("inner"))
    outer.register_full_backward_hook(lambda mod, gi, go: log.append("outer"))
    with sm.no_grad():
        outer(sm.ones(2, requires_grad=True))
    assert log == []
    outer(sm.ones(2, requires_grad=True)).sum().backward()
    assert log == ["inner", "outer"]      # the inner input node runs first, as in PyTorch


def test_handle_ids_are_unique():
    m = make_scale(sm)
    a = m.register_forward_hook(lambda *a: None)
    b = m.register_forward_pre_hook(lambda *a: None)
    assert a.id != b.id


def test_global_hooks_run_before_module_hooks_and_are_removable():
    from scriptmod.nn.module import (register_module_forward_hook,
                                     register_module_forward_pre_hook,
                                     register_module_full_backward_hook)
    m, log = make_scale(sm), []
    m.register_forward_pre_hook(lambda mod, args: log.append("pre"))
    m.register_forward_hook(lambda mod, args, out: log.append("fwd"))
    handles = [
        register_module_forward_pre_hook(lambda mod, args: log.append("gpre")),
        register_module_forward_hook(lambda mod, args, kw, out: log.append(f"gfwd:{sorted(kw)}"),
                                     with_kwargs=True),
        register_module_full_backward_hook(lambda mod, gi, go: log.append("gbw")),
    ]
    try:
        m(sm.ones(2, requires_grad=True), shift=1.0).sum().backward()
    finally:
        for h in handles:
            h.remove()
    assert log == ["gpre", "pre", "gfwd:['shift']", "fwd", "gbw"]
    log.clear()
    m(sm.ones(2))
    assert log == ["pre", "fwd"]
