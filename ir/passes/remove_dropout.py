"""Dropout removal for inference: ``sm::dropout`` that is not training (or drops nothing) is
the identity."""
from __future__ import annotations

from ..graph import Graph, Prim, known_value


def remove_dropout(graph: Graph) -> Graph:
    """Replace each ``sm::dropout`` whose ``train`` is the constant False, or whose ``p`` is
    0, by its input, in place. A dropout that may train stays (it is random).

        >>> from scriptmod.ir import parse
        >>> g = parse('''graph(%x : Float(B, 4)):
        ...   %train : bool = prim::Constant[value=0]()
        ...   %y : Float(B, 4) = sm::dropout[p=0.5](%x, %train)
        ...   %z : Float(B, 4) = sm::relu(%y)
        ...   return (%z)
        ... ''')
        >>> print(remove_dropout(g))
        graph(%x : Float(B, 4)):
          %z : Float(B, 4) = sm::relu(%x)
          return (%z)
    """
    for node in list(graph.walk()):
        if node.kind == "sm::dropout" and (known_value(node.inputs[1]) is False
                                           or node.attrs.get("p") == 0.0):
            train = node.inputs[1].node
            node.output.replace_all_uses_with(node.inputs[0])
            node.destroy()
            if not train.outputs[0].uses and train.kind == Prim.CONSTANT:
                train.destroy()
    return graph
