"""The recurrent models of ``scriptmod bench`` (issue 41): pytorch/examples' word-language
LSTM (R1, and its training step TR1) and a bidirectional GRU encoder (R2).

Like ``bench.cnn``'s, each architecture is written once over an ``nn`` namespace
(``recurrent(scriptmod.nn)`` and ``recurrent(torch.nn)`` give the two sides the same code and,
loaded from one ``state_dict``, the same weights); ``bench.cnn.family`` includes them, so
``cnn.build``, ``cnn.twin`` and ``cnn.config_of`` serve these rows too. A bench input is a
random-normal tensor, so ``WordLM`` reads its tokens off it: ``|x| * 1000`` truncated, modulo
the vocabulary (the same ids on both sides), then ``Embedding``, the LSTM and the decoder,
returning the logits of every step as ``(T * B, ntoken)`` rows, as the example's
``decoded.view(-1, ntoken)`` (the cross-entropy of TR1 reads them).

    >>> import scriptmod
    >>> lm = recurrent(scriptmod.nn).WordLM(ntoken=50, ninp=8, nhid=16)
    >>> tuple(lm(scriptmod.randn(7, 3)).shape)
    (21, 50)
"""
from __future__ import annotations

import functools
from types import ModuleType, SimpleNamespace
from typing import Any


@functools.lru_cache(maxsize=None)
def recurrent(nn: ModuleType) -> SimpleNamespace:
    """The recurrent architectures written over ``nn``: ``WordLM`` and ``GRUEncoder``."""

    class WordLM(nn.Module):
        """pytorch/examples' ``RNNModel("LSTM", ...)`` in eval: ``Embedding(ntoken, ninp)``,
        ``LSTM(ninp, nhid, nlayers)`` (time-major), ``Linear(nhid, ntoken)``; input ``(T,
        B)`` floats, read as token ids (module docstring)."""

        def __init__(self, ntoken: int = 10000, ninp: int = 256, nhid: int = 512,
                     nlayers: int = 2) -> None:
            super().__init__()
            self.ntoken = ntoken
            self.encoder = nn.Embedding(ntoken, ninp)
            self.rnn = nn.LSTM(ninp, nhid, nlayers)
            self.decoder = nn.Linear(nhid, ntoken)

        def forward(self, x: Any) -> Any:
            tokens = (x.abs() * 1000).long() % self.ntoken
            out, _ = self.rnn(self.encoder(tokens))
            return self.decoder(out).reshape(-1, self.ntoken)

    class GRUEncoder(nn.Module):
        """A 2-layer bidirectional GRU encoder, ``batch_first``: ``(B, T, input)`` to every
        step's ``(B, T, 2 * hidden)``."""

        def __init__(self, input_size: int = 128, hidden_size: int = 256,
                     num_layers: int = 2) -> None:
            super().__init__()
            self.gru = nn.GRU(input_size, hidden_size, num_layers, batch_first=True,
                              bidirectional=True)

        def forward(self, x: Any) -> Any:
            return self.gru(x)[0]

    return SimpleNamespace(WordLM=WordLM, GRUEncoder=GRUEncoder)


CONFIG = {
    "WordLM": lambda m: {"ntoken": m.ntoken, "ninp": m.encoder.embedding_dim,
                         "nhid": m.rnn.hidden_size, "nlayers": m.rnn.num_layers},
    "GRUEncoder": lambda m: {"input_size": m.gru.input_size, "hidden_size": m.gru.hidden_size,
                             "num_layers": m.gru.num_layers},
}
"""How to read each architecture's constructor sizes off a model (``cnn.config_of``)."""
