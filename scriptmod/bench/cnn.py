"""The convolutional models of ``scriptmod bench`` (issue 40): ResNet-18 (C1, and the
training step TC1), MobileNetV2 (C2), pytorch/examples' MNIST net (M1) and single
convolutions (CONV1–CONV5).

Each architecture is written once, over an ``nn`` namespace: ``family(scriptmod.nn)`` holds
scriptmod's models and ``family(torch.nn)`` their PyTorch twins (``bench.torch_ref``), so
both sides run the same code on the same weights. Module names follow torchvision's
``resnet18`` and ``mobilenet_v2`` (``layer1.0.downsample.0.weight``,
``features.1.conv.0.0.weight``) and pytorch/examples' ``Net``, so their ``state_dict`` keys
are torchvision's and a torchvision checkpoint loads into them; the initialization is
theirs too. ``build`` makes a bench model and gives every BatchNorm the statistics and
affine parameters of a trained network (``_as_if_trained``), so that folding a BatchNorm
into its convolution changes numbers that a check can see.

    >>> model = build(Recipe("ResNet", {"width": 8, "num_classes": 10}))
    >>> x = scriptmod.randn(2, 3, 32, 32)
    >>> tuple(model(x).shape), config_of(model) == Recipe("ResNet", {"width": 8, "num_classes": 10})
    ((2, 10), True)
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace
from typing import Any, Callable

import scriptmod
from scriptmod import nn
from scriptmod.bench.rnn import CONFIG as RECURRENT_CONFIG
from scriptmod.bench.rnn import recurrent


@dataclass(frozen=True)
class Recipe:
    """A model of ``family``: the class name and its constructor keywords."""

    arch: str
    config: dict[str, Any] = field(default_factory=dict)


@functools.lru_cache(maxsize=None)
def family(nn: ModuleType) -> SimpleNamespace:
    """The architectures written over ``nn`` (``scriptmod.nn`` or ``torch.nn``): ``ResNet``
    (ResNet-18's BasicBlock layout), ``MobileNetV2``, ``MnistNet``, ``Conv2d``, and the
    recurrent rows' ``WordLM`` and ``GRUEncoder`` (``bench.rnn``)."""
    F = nn.functional

    def conv3x3(inp: int, out: int, stride: int = 1) -> Any:
        return nn.Conv2d(inp, out, 3, stride=stride, padding=1, bias=False)

    class BasicBlock(nn.Module):
        """torchvision's: two 3x3 conv+BN, ReLU between, the input (or its 1x1 conv+BN
        ``downsample`` when the shape changes) added before the last ReLU."""

        def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
            super().__init__()
            self.conv1, self.bn1 = conv3x3(inplanes, planes, stride), nn.BatchNorm2d(planes)
            self.relu = nn.ReLU(inplace=True)
            self.conv2, self.bn2 = conv3x3(planes, planes), nn.BatchNorm2d(planes)
            self.downsample = None
            if stride != 1 or inplanes != planes:
                self.downsample = nn.Sequential(
                    nn.Conv2d(inplanes, planes, 1, stride=stride, bias=False),
                    nn.BatchNorm2d(planes))

        def forward(self, x: Any) -> Any:
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            identity = x if self.downsample is None else self.downsample(x)
            return self.relu(out + identity)

    class ResNet(nn.Module):
        """torchvision's ``resnet18`` (``width`` 64, 1000 classes): 7x7/2 stem conv+BN+ReLU,
        3x3/2 max pool, four stages of two BasicBlocks (``width`` x 1, 2, 4, 8 channels,
        stride 2 from the second), global average pool, ``fc``."""

        def __init__(self, width: int = 64, num_classes: int = 1000,
                     blocks: tuple[int, ...] = (2, 2, 2, 2)) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
            self.bn1, self.relu = nn.BatchNorm2d(width), nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
            inplanes = width
            for i, n in enumerate(blocks):
                planes = width << i
                stage = [BasicBlock(inplanes if j == 0 else planes, planes,
                                    2 if i and j == 0 else 1) for j in range(n)]
                setattr(self, f"layer{i + 1}", nn.Sequential(*stage))
                inplanes = planes
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(inplanes, num_classes)
            _torchvision_init(nn, self, linear_std=None)

        def forward(self, x: Any) -> Any:
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(self.avgpool(x).flatten(1))

    class ConvBNReLU6(nn.Sequential):
        """torchvision's ``Conv2dNormActivation`` as MobileNetV2 uses it: conv (no bias,
        'same' padding), BatchNorm, ReLU6."""

        def __init__(self, inp: int, out: int, kernel: int = 3, stride: int = 1,
                     groups: int = 1) -> None:
            super().__init__(nn.Conv2d(inp, out, kernel, stride, (kernel - 1) // 2,
                                       groups=groups, bias=False),
                             nn.BatchNorm2d(out), nn.ReLU6(inplace=True))

    class InvertedResidual(nn.Module):
        """torchvision's: 1x1 expansion (unless ``expand_ratio`` is 1), 3x3 depthwise with
        ``stride``, linear 1x1 projection + BN; the input added when the shape allows."""

        def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int) -> None:
            super().__init__()
            hidden = round(inp * expand_ratio)
            self.use_res_connect = stride == 1 and inp == oup
            layers: list[Any] = [ConvBNReLU6(inp, hidden, kernel=1)] if expand_ratio != 1 else []
            layers += [ConvBNReLU6(hidden, hidden, stride=stride, groups=hidden),
                       nn.Conv2d(hidden, oup, 1, 1, 0, bias=False), nn.BatchNorm2d(oup)]
            self.conv = nn.Sequential(*layers)

        def forward(self, x: Any) -> Any:
            return x + self.conv(x) if self.use_res_connect else self.conv(x)

    class MobileNetV2(nn.Module):
        """torchvision's ``mobilenet_v2`` (``width_mult`` 1.0, 1000 classes, dropout 0.2):
        the (t, c, n, s) table of inverted residuals between a 3x3/2 stem and a 1x1 conv to
        1280 channels, global average pool, dropout, ``Linear``."""

        SETTING = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                   (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))

        def __init__(self, width_mult: float = 1.0, num_classes: int = 1000) -> None:
            super().__init__()
            self.width_mult = width_mult
            inp = _make_divisible(32 * width_mult)
            last = _make_divisible(1280 * max(1.0, width_mult))
            features: list[Any] = [ConvBNReLU6(3, inp, stride=2)]
            for t, c, n, s in self.SETTING:
                out = _make_divisible(c * width_mult)
                for i in range(n):
                    features.append(InvertedResidual(inp, out, s if i == 0 else 1, t))
                    inp = out
            features.append(ConvBNReLU6(inp, last, kernel=1))
            self.features = nn.Sequential(*features)
            self.classifier = nn.Sequential(nn.Dropout(p=0.2), nn.Linear(last, num_classes))
            _torchvision_init(nn, self, linear_std=0.01)

        def forward(self, x: Any) -> Any:
            x = F.adaptive_avg_pool2d(self.features(x), (1, 1))
            return self.classifier(x.flatten(1))

    class MnistNet(nn.Module):
        """pytorch/examples' MNIST ``Net``: two 3x3 convs (1->32->64) with ReLU, 2x2 max
        pool, dropout, flatten, ``Linear(9216, 128)``, ReLU, dropout, ``Linear(128, 10)``,
        log-softmax; 1x28x28 input."""

        def __init__(self) -> None:
            super().__init__()
            self.conv1, self.conv2 = nn.Conv2d(1, 32, 3, 1), nn.Conv2d(32, 64, 3, 1)
            self.dropout1, self.dropout2 = nn.Dropout(0.25), nn.Dropout(0.5)
            self.fc1, self.fc2 = nn.Linear(9216, 128), nn.Linear(128, 10)

        def forward(self, x: Any) -> Any:
            x = F.relu(self.conv2(F.relu(self.conv1(x))))
            x = self.dropout1(F.max_pool2d(x, 2)).flatten(1)
            x = self.dropout2(F.relu(self.fc1(x)))
            return F.log_softmax(self.fc2(x), dim=1)

    return SimpleNamespace(ResNet=ResNet, MobileNetV2=MobileNetV2, MnistNet=MnistNet,
                           Conv2d=nn.Conv2d, **vars(recurrent(nn)))


def _make_divisible(v: float, divisor: int = 8) -> int:
    """torchvision's channel rounding: the nearest multiple of ``divisor`` (at least it),
    never more than 10% below ``v``."""
    out = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return out + divisor if out < 0.9 * v else out


def _torchvision_init(nn: ModuleType, model: Any, linear_std: float | None) -> None:
    """torchvision's: convs Kaiming-normal (fan out, ReLU gain), biases zero, BatchNorm
    weight 1 and bias 0, and (MobileNetV2's) ``Linear`` weights N(0, ``linear_std``)."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear) and linear_std is not None:
            nn.init.normal_(m.weight, 0, linear_std)
            nn.init.zeros_(m.bias)


def build(recipe: Recipe) -> nn.Module:
    """``recipe``'s scriptmod model (from the current seed), its BatchNorms as if trained.

    >>> build(Recipe("Conv2d", {"in_channels": 4, "out_channels": 8, "kernel_size": 3,
    ...                         "padding": 1, "groups": 4, "bias": False})).weight.shape
    scriptmod.Size([8, 1, 3, 3])
    """
    model = getattr(family(nn), recipe.arch)(**recipe.config)
    _as_if_trained(model)
    return model


def twin(recipe: Recipe, torch_nn: ModuleType) -> Any:
    """``recipe``'s model over another ``nn`` namespace (``torch.nn``: the PyTorch twin); its
    weights are whatever the caller loads."""
    return getattr(family(torch_nn), recipe.arch)(**recipe.config)


def _as_if_trained(model: nn.Module) -> None:
    """Every BatchNorm's running mean N(0, 0.1²), running variance U(0.5, 1.5), weight
    U(0.5, 1.5) and bias N(0, 0.1²): what a trained network holds, where a fresh one's
    (0, 1, 1, 0) would make BatchNorm and its folding into the conv almost the identity."""
    with scriptmod.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                c = m.num_features
                m.running_mean.copy_(scriptmod.randn(c) * 0.1)
                m.running_var.copy_(scriptmod.rand(c) + 0.5)
                m.weight.copy_(scriptmod.rand(c) + 0.5)
                m.bias.copy_(scriptmod.randn(c) * 0.1)


_CONFIG: dict[str, Callable[[Any], dict[str, Any]]] = {
    "ResNet": lambda m: {"width": m.conv1.out_channels, "num_classes": m.fc.out_features},
    "MobileNetV2": lambda m: {"width_mult": m.width_mult,
                              "num_classes": m.classifier[1].out_features},
    "MnistNet": lambda m: {},
    "Conv2d": lambda m: {"in_channels": m.in_channels, "out_channels": m.out_channels,
                         "kernel_size": m.kernel_size, "stride": m.stride,
                         "padding": m.padding, "groups": m.groups, "bias": m.bias is not None},
    **RECURRENT_CONFIG,
}


def config_of(model: Any) -> Recipe | None:
    """The recipe a scriptmod model of ``family`` was built from (``None`` for any other
    model): what ``twin`` needs to build its PyTorch twin."""
    fam = family(nn)
    for arch, read in _CONFIG.items():
        if type(model) is getattr(fam, arch):
            return Recipe(arch, read(model))
    return None
