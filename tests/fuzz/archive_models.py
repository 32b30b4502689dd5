"""Four real saved models for the archive fuzz suite: a traced MLP, a traced conv net, a
scripted model with control flow (a counted loop, a branch on a run-time value, a library
call) and a traced model with buffers (batch norm's running stats, a buffer of its own).

``saved()`` gives each archive with the input shapes it is called with (two batch sizes,
the second not the traced one)."""
from __future__ import annotations

import io
import warnings

import scriptmod as sm
from scriptmod import Tensor, jit, nn


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))

    def forward(self, x):
        return self.net(x)


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        x = self.pool(self.conv(x).relu())
        return self.fc(x.flatten(1))


class Flow(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: Tensor) -> Tensor:
        for _ in range(3):
            x = self.fc(x).tanh()
        if float(x.sum()) > 0:
            x = x * 2.0
        else:
            x = x - 1.0
        return x


class WithBuffers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.bn = nn.BatchNorm1d(6)
        self.register_buffer("offset", sm.linspace(-1.0, 1.0, 6))

    def forward(self, x):
        return self.bn(self.fc(x)) + self.offset


def _warm(model: nn.Module) -> nn.Module:
    """Non-trivial running statistics, so that the buffers matter."""
    model.train()
    with sm.no_grad():
        for _ in range(3):
            model(sm.randn(8, 6) * 3 + 1)
    return model.eval()


def saved() -> dict[str, tuple[bytes, list[tuple[int, ...]]]]:
    """name -> (archive bytes, input shapes to call it with)."""
    sm.manual_seed(0)
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, module, shape, other in [
                ("mlp", jit.trace(MLP().eval(), sm.randn(2, 8)), (2, 8), (3, 8)),
                ("convnet", jit.trace(ConvNet().eval(), sm.randn(2, 3, 8, 8)), (2, 3, 8, 8),
                 (3, 3, 8, 8)),
                ("scripted", jit.script(Flow().eval()), (2, 4), (5, 4)),
                ("buffers", jit.trace(_warm(WithBuffers()), sm.randn(2, 6)), (2, 6), (4, 6))]:
            buf = io.BytesIO()
            module.save(buf)
            out[name] = (buf.getvalue(), [shape, other])
    return out
