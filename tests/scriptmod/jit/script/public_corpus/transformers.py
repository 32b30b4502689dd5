"""Entries of the public corpus from Hugging Face transformers (``sources/transformers_*.py``,
copied from the published 4.48.3 wheel)."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from . import Entry


def _at(path: str) -> str:
    return f"huggingface/transformers src/transformers/{path}@v4.48.3"


DEBERTA = _at("models/deberta/modeling_deberta.py")
DEBERTA_V2 = _at("models/deberta_v2/modeling_deberta_v2.py")
LLAMA = _at("models/llama/modeling_llama.py")
ACT = _at("activations.py")


def _f(rng: np.random.Generator, *shape: int, dtype: type = np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def _rel(q: int, k: int, *lead: int) -> np.ndarray:
    """DeBERTa's relative positions ``q_i - k_j`` (int64), with leading size-1 dims."""
    r = np.arange(q)[:, None] - np.arange(k)[None, :]
    return r.reshape((1,) * len(lead) + r.shape).astype(np.int64)


def _act(name: str, build: Callable[[Any], Any], scale: float = 3.0) -> Entry:
    """An activation module of activations.py on float32 and float64 inputs."""
    return Entry(name, ACT, "transformers_activations.py", name[3:].split("_")[0],
                 lambda rng: [(_f(rng, 2, 7) * scale,),
                              (_f(rng, 3, 4, dtype=np.float64) * scale,)],
                 build=build)


_ENTRIES: list[Entry] = [
    # models/deberta/modeling_deberta.py (@torch.jit.script helpers)
    Entry("hf_deberta_build_relative_position", DEBERTA, "transformers_deberta.py",
          "build_relative_position",
          lambda rng: [(_f(rng, 1, 2, 4, 8), _f(rng, 1, 2, 5, 8)),
                       (_f(rng, 2, 3, 8), _f(rng, 2, 3, 8))]),
    Entry("hf_deberta_c2p_dynamic_expand", DEBERTA, "transformers_deberta.py",
          "c2p_dynamic_expand",
          lambda rng: [(_rel(4, 5, 1, 1) + 5, _f(rng, 2, 3, 4, 8), _rel(4, 5, 1))]),
    Entry("hf_deberta_p2c_dynamic_expand", DEBERTA, "transformers_deberta.py",
          "p2c_dynamic_expand",
          lambda rng: [(_rel(5, 5, 1, 1) + 5, _f(rng, 2, 3, 4, 8), _f(rng, 2, 3, 5, 8))]),
    Entry("hf_deberta_pos_dynamic_expand", DEBERTA, "transformers_deberta.py",
          "pos_dynamic_expand",
          lambda rng: [(_rel(4, 1, 1, 1) + 2, _f(rng, 2, 3, 4, 4), _f(rng, 2, 3, 6, 8))]),
    Entry("hf_deberta_scaled_size_sqrt", DEBERTA, "transformers_deberta.py", "scaled_size_sqrt",
          lambda rng: [(_f(rng, 2, 3, 4, 8), 3), (_f(rng, 1, 5, dtype=np.float64), 1)]),
    Entry("hf_deberta_build_rpos", DEBERTA, "transformers_deberta.py", "build_rpos",
          lambda rng: [(_f(rng, 1, 2, 4, 8), _f(rng, 1, 2, 4, 8), _rel(4, 4, 1)),
                       (_f(rng, 1, 2, 3, 8), _f(rng, 1, 2, 5, 8), _rel(3, 3, 1))]),
    Entry("hf_deberta_compute_attention_span", DEBERTA, "transformers_deberta.py",
          "compute_attention_span",
          lambda rng: [(_f(rng, 1, 4, 8), _f(rng, 1, 6, 8), 5),
                       (_f(rng, 1, 4, 8), _f(rng, 1, 3, 8), 16)]),
    Entry("hf_deberta_uneven_size_corrected", DEBERTA, "transformers_deberta.py",
          "uneven_size_corrected",
          lambda rng: [(_f(rng, 2, 3, 6, 6), _f(rng, 2, 3, 4, 8), _f(rng, 2, 3, 6, 8),
                        rng.integers(0, 6, (1, 1, 4, 6))),
                       (_f(rng, 2, 3, 4, 4), _f(rng, 2, 3, 4, 8), _f(rng, 2, 3, 4, 8),
                        rng.integers(0, 4, (1, 1, 4, 4)))]),
    Entry("hf_DebertaLayerNorm", DEBERTA, "transformers_deberta.py", "DebertaLayerNorm",
          lambda rng: [(_f(rng, 2, 3, 6),), (_f(rng, 4, 6, dtype=np.float64),)],
          build=lambda ns: ns.DebertaLayerNorm(6)),
    # models/deberta_v2/modeling_deberta_v2.py
    Entry("hf_deberta_v2_make_log_bucket_position", DEBERTA_V2, "transformers_deberta_v2.py",
          "make_log_bucket_position",
          lambda rng: [(_rel(6, 9), 4, 16), (_rel(12, 12), 8, 64),
                       (_rel(5, 7).astype(np.float32), 4, 16)]),
    Entry("hf_deberta_v2_build_relative_position", DEBERTA_V2, "transformers_deberta_v2.py",
          "build_relative_position",
          lambda rng: [(_f(rng, 1, 5, 4), _f(rng, 1, 7, 4)),
                       (_f(rng, 1, 9, 4), _f(rng, 1, 9, 4), 4, 16)]),
    Entry("hf_deberta_v2_build_rpos", DEBERTA_V2, "transformers_deberta_v2.py", "build_rpos",
          lambda rng: [(_f(rng, 1, 5, 4), _f(rng, 1, 7, 4), _rel(5, 5, 1), 4, 16),
                       (_f(rng, 1, 5, 4), _f(rng, 1, 5, 4), _rel(5, 5, 1), 4, 16)]),
    # other @torch.jit.script helpers
    Entry("hf_gpt_bigcode_masked_softmax", _at("models/gpt_bigcode/modeling_gpt_bigcode.py"),
          "transformers_gpt_bigcode.py", "masked_softmax",
          lambda rng: [(_f(rng, 2, 3, 5), _f(rng, 2, 3, 5) > -0.5,
                        np.array(-1e4, dtype=np.float32)),
                       (_f(rng, 4, 4, dtype=np.float64), np.tril(np.ones((4, 4), dtype=bool)),
                        np.array(-np.inf))]),
    Entry("hf_zoedepth_inv_attractor", _at("models/zoedepth/modeling_zoedepth.py"),
          "transformers_zoedepth.py", "inv_attractor",
          lambda rng: [(_f(rng, 2, 5) * 0.1,), (_f(rng, 3, 4, dtype=np.float64), 10.0, 3)]),
    Entry("hf_vits_fused_add_tanh_sigmoid_multiply", _at("models/vits/modeling_vits.py"),
          "transformers_vits.py", "fused_add_tanh_sigmoid_multiply",
          lambda rng: [(_f(rng, 2, 6, 5), _f(rng, 2, 6, 5), np.array(3)),
                       (_f(rng, 1, 4, 3), _f(rng, 1, 4, 3), np.array(2, dtype=np.int32))]),
    # models/llama/modeling_llama.py
    Entry("hf_llama_rotate_half", LLAMA, "transformers_llama.py", "rotate_half",
          lambda rng: [(_f(rng, 2, 3, 8),), (_f(rng, 4, 6, dtype=np.float64),)]),
    Entry("hf_llama_repeat_kv", LLAMA, "transformers_llama.py", "repeat_kv",
          lambda rng: [(_f(rng, 2, 2, 3, 4), 3), (_f(rng, 1, 2, 3, 4), 1)]),
    # modules
    Entry("hf_LlamaRMSNorm", LLAMA, "transformers_llama.py", "LlamaRMSNorm",
          lambda rng: [(_f(rng, 2, 3, 6),), (_f(rng, 4, 6, dtype=np.float64),)],
          build=lambda ns: ns.LlamaRMSNorm(6)),
    Entry("hf_T5LayerNorm", _at("models/t5/modeling_t5.py"), "transformers_t5.py", "T5LayerNorm",
          lambda rng: [(_f(rng, 2, 3, 6),), (_f(rng, 4, 6, dtype=np.float64),)],
          build=lambda ns: ns.T5LayerNorm(6)),
    Entry("hf_Conv1D", _at("pytorch_utils.py"), "transformers_pytorch_utils.py", "Conv1D",
          lambda rng: [(_f(rng, 2, 3, 4),), (_f(rng, 5, 4),)],
          build=lambda ns: ns.Conv1D(6, 4)),
    _act("hf_NewGELUActivation", lambda ns: ns.NewGELUActivation()),
    _act("hf_GELUActivation", lambda ns: ns.GELUActivation()),
    _act("hf_QuickGELUActivation", lambda ns: ns.QuickGELUActivation()),
    _act("hf_ClippedGELUActivation", lambda ns: ns.ClippedGELUActivation(-0.1, 1.0)),
    _act("hf_AccurateGELUActivation", lambda ns: ns.AccurateGELUActivation()),
    _act("hf_MishActivation", lambda ns: ns.MishActivation()),
]

# why scriptmod does not script an entry yet: the construct, then the first line of its error
XFAIL: dict[str, str] = {
    "hf_ClippedGELUActivation": "calling a global nn.Module instance (`gelu(x)`, gelu = "
                                "ACT2FN['gelu'], a GELUActivation; "
                                "transformers_activations.py:105): calling 'GELUActivation' is "
                                "not supported in scripted code",
}

ENTRIES: list[Entry] = [dataclasses.replace(e, xfail=XFAIL.get(e.name, e.xfail))
                        for e in _ENTRIES]
