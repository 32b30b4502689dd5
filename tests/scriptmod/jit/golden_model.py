"""A small model whose traced text is checked verbatim (keep line numbers stable)."""
from scriptmod import nn


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.act = nn.ReLU()

    def forward(self, x):
        h = self.act(self.fc(x))
        return h * 2.0 + x.sum(dim=1, keepdim=True)
