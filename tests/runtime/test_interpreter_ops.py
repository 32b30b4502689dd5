"""The whole op table (``op_cases``) through the IR interpreter: each sample becomes a graph
with one op node (array inputs typed from the samples, other inputs constants, attributes
bound by ``Builder.op``) run by ``runtime.interpreter.Interpreter`` and compared with the
float64 reference exactly as ``test_ops`` compares eager results."""
from __future__ import annotations

from typing import Any, Sequence

import pytest

import op_cases as OC
from scriptmod.ir.schema import REGISTRY
from op_graphs import op_graph
from scriptmod.runtime.interpreter import Interpreter


def interpret(op: str, inputs: Sequence[Any], attrs: dict[str, Any]) -> Any:
    """Execute one sample as a one-node graph through the reference interpreter."""
    g, arrays = op_graph(op, inputs, attrs)
    return Interpreter(g).run(*arrays)


@pytest.mark.filterwarnings("ignore:Casting complex values to real")
@pytest.mark.parametrize("op,dtype", OC.params())
def test_interpreter_matches_reference(op: str, dtype: str) -> None:
    OC.run_case(OC.CASES[op], dtype, interpret)


def test_every_registry_op_runs_through_the_interpreter() -> None:
    covered = {op for op, _ in OC.params()}
    assert sorted(set(REGISTRY) - covered) == []
