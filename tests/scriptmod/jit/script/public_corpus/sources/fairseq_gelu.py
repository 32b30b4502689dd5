# Copied from facebookresearch/fairseq@3d262bb25690e4eb2e7d3c1309b1e9c406ca4b99,
# fairseq/modules/gelu.py: gelu (gelu_accurate left out: it keeps a function attribute).
# MIT License, Copyright (c) Facebook, Inc. and its affiliates.


def gelu(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x.float()).type_as(x)
