"""``do_constant_folding``: evaluate the nodes whose inputs are all constants (not
parameters) at export time. Parameters stay initializers under their ``state_dict`` names
(ONNX Runtime folds a weight's ``Transpose`` itself when it loads the model)."""
from __future__ import annotations

import onnx
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator


def fold_constants(graph: onnx.GraphProto, parameters: set[str], opset: int) -> None:
    """Replace each foldable node of ``graph`` (in place) by an initializer of its value."""
    values = {t.name: numpy_helper.to_array(t) for t in graph.initializer
              if t.name not in parameters}
    kept = []
    for node in graph.node:
        if not _foldable(node, values):
            kept.append(node)
            continue
        single = onnx.helper.make_graph(
            [node], "fold", [], [onnx.helper.make_empty_tensor_value_info(o)
                                 for o in node.output],
            initializer=[numpy_helper.from_array(values[i], i) for i in node.input if i])
        model = onnx.helper.make_model(single, opset_imports=[
            onnx.helper.make_opsetid("", opset)])
        outs = ReferenceEvaluator(model).run(None, {})
        for name, value in zip(node.output, outs):
            values[name] = value
            graph.initializer.append(numpy_helper.from_array(value, name))
    del graph.node[:]
    graph.node.extend(kept)


def _foldable(node: onnx.NodeProto, values: dict) -> bool:
    return (node.op_type not in ("Identity", "RandomNormal", "RandomUniform") and
            not any(a.type == onnx.AttributeProto.GRAPH for a in node.attribute) and
            all(i in values for i in node.input if i) and len(node.input) > 0)
