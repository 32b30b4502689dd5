"""Reads the printer's text back: ``str(parse(str(g))) == str(g)``.

    >>> g = parse('''graph(%x : Float(2)):
    ...   %1 : Float(2) = sm::neg(%x)
    ...   return (%1)
    ... ''')

Tensor constants print as ``<Tensor>``; pass their payloads as ``constants`` (a list in
print order, or a mapping ``{"c0": ...}`` as ``code_with_constants`` names them), else each
becomes a ``TensorPlaceholder``. Malformed text raises ``IRParseError`` with line and column.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from . import ops  # noqa: F401  (fills the registry)
from . import dtypes as D
from . import symdims as SD
from . import schema as S
from . import types as T
from .graph import Block, Graph, IRError, Node, Prim, Value
from .printer import TENSOR_TEXT, split_comment
from .types import (BoolType, DictType, ListType, ModuleType, OptionalType, TensorType, TupleType,
                    Type)

_TOKEN_RE = re.compile(r"""
 (?P<ws>\s+)
|(?P<comment>\#.*)
|(?P<value>%[A-Za-z0-9_.]+)
|(?P<string>"(?:[^"\\]|\\.)*")
|(?P<number>-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)
|(?P<arrow>->)
|(?P<ident>[A-Za-z_]\w*(?:(?:\.|::)[A-Za-z_]\w*)*)
|(?P<punct>[()\[\],:=?*<>\-+/%])
""", re.X)
_NAMED_TYPES: dict[str, Type] = {repr(t): t for t in (
    T.IntType, T.FloatType, T.BoolType, T.ComplexType, T.StrType, T.NoneType, T.DeviceType,
    T.DTypeType, T.NumberType, T.AnyType)}
_FUSION_RE = re.compile(r"^prim::FusionGroup_(\d+)$")


class IRParseError(ValueError):
    """Malformed IR text: says where (1-based line and column) and what was expected."""

    def __init__(self, message: str, line: int, column: int, text: str = "") -> None:
        self.message, self.line, self.column, self.text = message, line, column, text
        caret = f"\n    {text}\n    {' ' * (column - 1)}^" if text else ""
        super().__init__(f"line {line}, column {column}: {message}{caret}")


class TensorPlaceholder:
    """Stands in for a tensor constant whose payload was not given to ``parse``."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"<Tensor c{self.index}>"


@dataclass(frozen=True)
class Token:
    kind: str      # value, string, number, arrow, ident, punct, end
    text: str
    column: int    # 1-based


class Line:
    """The tokens of one line, consumed left to right."""

    def __init__(self, text: str, number: int) -> None:
        self.text, self.number = text, number
        self.tokens: list[Token] = []
        self.comment: str | None = None
        self._lex()
        self.pos = 0

    def _lex(self) -> None:
        i = 0
        while i < len(self.text):
            m = _TOKEN_RE.match(self.text, i)
            if m is None:
                raise IRParseError(f"unexpected character {self.text[i]!r}", self.number, i + 1,
                                   self.text)
            kind = m.lastgroup or ""
            if kind == "comment":
                self.comment = m.group()[2:] if m.group().startswith("# ") else m.group()[1:]
            elif kind != "ws":
                self.tokens.append(Token(kind, m.group(), i + 1))
            i = m.end()
        self.tokens.append(Token("end", "end of line", len(self.text) + 1))

    def peek(self, ahead: int = 0) -> Token:
        return self.tokens[min(self.pos + ahead, len(self.tokens) - 1)]

    def next(self) -> Token:
        tok = self.peek()
        self.pos = min(self.pos + 1, len(self.tokens) - 1)
        return tok

    def accept(self, text: str) -> bool:
        if self.peek().text == text and self.peek().kind != "string":
            self.pos += 1
            return True
        return False

    def expect(self, text: str) -> Token:
        if self.peek().text != text or self.peek().kind == "string":
            raise self.error(f"'{text}'")
        return self.next()

    def expect_kind(self, kind: str, what: str) -> Token:
        if self.peek().kind != kind:
            raise self.error(what)
        return self.next()

    def expect_end(self) -> None:
        if self.peek().kind != "end":
            raise self.error("end of line")

    def error(self, expected: str, tok: Token | None = None, message: str | None = None) -> IRParseError:
        tok = tok or self.peek()
        found = tok.text if tok.kind == "end" else f"'{tok.text}'"
        msg = message or f"expected {expected}, found {found}"
        return IRParseError(msg, self.number, tok.column, self.text)

    def sep_list(self, close: str, item: Any) -> list[Any]:
        """Items separated by commas up to ``close`` (consumed); trailing comma allowed."""
        out = []
        while not self.accept(close):
            out.append(item())
            if not self.accept(","):
                self.expect(close)
                break
        return out


# ---- types --------------------------------------------------------------------------------

MAX_TYPE_DEPTH = 100    # a type nests at most this deep (TorchScript's never come close); a
                        # deeper one (``Tensor?????...`` thousands long) made every later walk
                        # of it (repr, joins) overflow the stack


def parse_type(line: Line) -> Type:
    start = line.peek()
    t = _base_type(line)
    while True:
        if line.peek().text == "[" and line.peek(1).text == "]":
            line.pos += 2
            t = ListType(t)
        elif line.accept("?"):
            t = OptionalType(t)
        else:
            break
    _check_depth(line, start, t)
    return t


def _check_depth(line: Line, start: Token, t: Type) -> None:
    depth, stack = 0, [(t, 1)]
    while stack:                            # iterative: the type may already be too deep
        t, d = stack.pop()
        depth = max(depth, d)
        if depth > MAX_TYPE_DEPTH:
            raise line.error("", start, f"type nested more than {MAX_TYPE_DEPTH} deep")
        if isinstance(t, (ListType, OptionalType)):
            stack.append((t.element, d + 1))
        elif isinstance(t, TupleType):
            stack.extend((e, d + 1) for e in t.elements)
        elif isinstance(t, DictType):
            stack.extend(((t.key, d + 1), (t.value, d + 1)))


def _base_type(line: Line) -> Type:
    if line.accept("("):
        return TupleType(tuple(line.sep_list(")", lambda: parse_type(line))))
    tok = line.expect_kind("ident", "a type")
    if tok.text.startswith("__module__."):
        return ModuleType(tok.text[len("__module__."):])
    if tok.text == "Dict":
        return _dict_type(line)
    if tok.text in _NAMED_TYPES:
        return _NAMED_TYPES[tok.text]
    if tok.text != "Tensor" and tok.text not in D.BY_SHORT:
        raise line.error("a type", tok)
    dtype = D.BY_SHORT.get(tok.text)
    if not line.accept("("):
        return TensorType(dtype)
    return _tensor_details(line, dtype)


def _dict_type(line: Line) -> DictType:
    """``Dict(str, Tensor)``: keys str or int."""
    line.expect("(")
    key_tok = line.peek()
    key = parse_type(line)
    if key not in T.DICT_KEY_TYPES:
        raise line.error("", key_tok, f"a Dict key type must be str or int, found {key!r}")
    line.expect(",")
    value = parse_type(line)
    line.expect(")")
    return DictType(key, value)


def _tensor_details(line: Line, dtype: D.DType | None) -> TensorType:
    dims: list[Any] = []
    extra: dict[str, Any] = {}

    def item() -> None:
        tok = line.next()
        if tok.kind == "ident" and line.peek().text == "=":
            line.next()
            extra[tok.text] = _raw_until(line, (",", ")"))
        elif tok.text == "*" and line.peek().text in (",", ")"):
            dims.append(None)
        else:
            dims.append(_dim(line, tok))
    line.sep_list(")", item)
    unknown = set(extra) - {"device", "requires_grad"}
    if unknown:
        raise line.error("", message=f"unknown tensor type field {sorted(unknown)[0]!r}")
    shape = None if (dims == [None] and extra) else tuple(dims)   # printer writes rank-unknown so
    return TensorType(dtype, shape, extra.get("device", "cpu"), extra.get("requires_grad") == "1")


def _dim(line: Line, first: Token) -> int | str:
    """A dim from ``first`` to the next ``,`` or ``)`` outside parentheses: a size or a
    symbolic dim (``B``, ``B*T``, ``T-1``, ``max(T,8)``), read by ``symdims.parse``."""
    start = end = first.column - 1
    depth = 0
    while end < len(line.text) and (depth or line.text[end] not in ",)"):
        depth += {"(": 1, ")": -1}.get(line.text[end], 0)
        end += 1
    while line.peek().kind != "end" and line.peek().column - 1 < end:
        line.next()
    text = line.text[start:end].strip()
    try:
        dim = SD.parse(text)
    except SD.SymDimError as e:
        raise line.error("", first, f"expected a dimension (size, symbol or *): {e}") from None
    if isinstance(dim, int) and dim < 0:
        raise line.error("", first, f"expected a dimension (size, symbol or *), found {text!r}")
    return dim


def _raw_until(line: Line, stops: tuple[str, ...]) -> str:
    start = line.peek()
    while line.peek().text not in stops and line.peek().kind != "end":
        line.next()
    return line.text[start.column - 1:line.peek().column - 1].strip()


# ---- attribute values -----------------------------------------------------------------------

def parse_attr_value(line: Line) -> Any:
    tok = line.next()
    if tok.kind == "number":
        return float(tok.text) if any(c in tok.text for c in ".eE") else int(tok.text)
    if tok.kind == "string":
        return json.loads(tok.text)
    if tok.text == "-" and line.peek().text == "inf":
        line.next()
        return float("-inf")
    if tok.kind == "ident":
        if tok.text in ("inf", "nan"):
            return float(tok.text)
        if tok.text == "None":
            return None
        if tok.text in ("True", "False"):
            return tok.text == "True"
        if tok.text in D.BY_SHORT:
            return D.BY_SHORT[tok.text]
    if tok.text == "[":
        return line.sep_list("]", lambda: parse_attr_value(line))
    if tok.text == "(":
        return tuple(line.sep_list(")", lambda: parse_attr_value(line)))
    raise line.error("an attribute value", tok)


def coerce(value: Any, t: Type) -> Any:
    """Undo the printer's 0/1 for bools where the type says bool."""
    if isinstance(t, OptionalType):
        return None if value is None else coerce(value, t.element)
    if t == BoolType and type(value) is int and value in (0, 1):
        return bool(value)
    if isinstance(t, ListType) and isinstance(value, (list, tuple)):
        return type(value)(coerce(v, t.element) for v in value)
    if isinstance(t, TupleType) and isinstance(value, tuple) and len(value) == len(t.elements):
        return tuple(coerce(v, e) for v, e in zip(value, t.elements))
    return value


# ---- graphs ---------------------------------------------------------------------------------

class Parser:
    """Line-oriented reader: one node, block header, block end or return per line."""

    def __init__(self, text: str, constants: Mapping[str, Any] | Sequence[Any] | None) -> None:
        self.lines = [Line(t, i + 1) for i, t in enumerate(text.splitlines()) if t.strip()]
        self.pos = 0
        self.constants = constants
        self.n_tensors = 0
        self.fusion_refs: list[tuple[Node, int, Line, Token]] = []
        self.env: dict[str, Value] = {}

    def next_line(self, expected: str) -> Line:
        if self.pos >= len(self.lines):
            last = self.lines[-1].number if self.lines else 0
            raise IRParseError(f"expected {expected}, found end of text", last + 1, 1)
        self.pos += 1
        return self.lines[self.pos - 1]

    def parse(self) -> Graph:
        graph = self.parse_graph(self.next_line("'graph('"))
        subs: dict[int, Graph] = {}
        while self.pos < len(self.lines):
            line = self.next_line("'with'")
            line.expect("with")
            tok = line.expect_kind("ident", "prim::FusionGroup_<n>")
            m = _FUSION_RE.match(tok.text)
            if m is None:
                raise line.error("prim::FusionGroup_<n>", tok)
            line.expect("=")
            subs[int(m.group(1))] = self.parse_graph(line)
        for node, index, line, tok in self.fusion_refs:
            if index not in subs:
                raise line.error("", tok, f"no 'with prim::FusionGroup_{index} = graph(...)' "
                                          "section follows the graph")
            node.attrs["subgraph"] = subs[index]
        return graph

    def parse_graph(self, line: Line) -> Graph:
        line.expect("graph")
        line.expect("(")
        params = line.sep_list(")", lambda: self.typed_name(line))
        line.expect(":")
        line.expect_end()
        graph, self.env = Graph(), {}
        for tok, t in params:
            self.define(line, tok, graph.add_input(t))
        outs = self.parse_body(graph.block, "return")
        for v in outs:
            graph.register_output(v)
        return graph

    def typed_name(self, line: Line) -> tuple[Token, Type]:
        tok = line.expect_kind("value", "a value name such as %x")
        line.expect(":")
        return tok, parse_type(line)

    def define(self, line: Line, tok: Token, v: Value) -> None:
        name = tok.text[1:]
        if name in self.env:
            raise line.error("", tok, f"value %{name} is defined twice")
        v.debug_name = None if name.isdigit() else name
        self.env[name] = v

    def use(self, line: Line) -> Value:
        tok = line.expect_kind("value", "a value name such as %x")
        v = self.env.get(tok.text[1:])
        if v is None:
            raise line.error("", tok, f"undefined value {tok.text}")
        return v

    def parse_body(self, block: Block, terminator: str) -> list[Value]:
        """Node lines up to ``return (...)`` or ``-> (...)``; returns the listed values."""
        while True:
            line = self.next_line(f"a node or '{terminator}'")
            if line.peek().text == terminator:
                line.next()
                line.expect("(")
                outs = line.sep_list(")", lambda: self.use(line))
                line.expect_end()
                return outs
            if line.peek().kind != "value" and line.peek().text != "=":
                raise line.error(f"a node line ('%name : Type = kind(...)') or '{terminator}'")
            self.parse_node(line, block)

    def parse_node(self, line: Line, block: Block) -> None:
        outs = []
        if line.peek().kind == "value":
            outs = [self.typed_name(line)]
            while line.accept(","):
                outs.append(self.typed_name(line))
        line.expect("=")
        kind_tok = line.expect_kind("ident", "a node kind such as sm::add")
        attrs = self.parse_attrs(line) if line.accept("[") else {}
        line.expect("(")
        inputs = line.sep_list(")", lambda: self.use(line))
        line.expect_end()
        node = self.make_node(line, kind_tok, block.graph, attrs, [t for _, t in outs])
        for v in inputs:
            node.add_input(v)
        node.source, node.scope = split_comment(line.comment)
        block.append(node)
        for (tok, _), v in zip(outs, node.outputs):
            self.define(line, tok, v)
        while self.pos < len(self.lines) and self.lines[self.pos].peek().text.startswith("block"):
            self.parse_block(self.next_line("'block'"), node)

    def parse_attrs(self, line: Line) -> dict[str, tuple[Token, Any]]:
        attrs: dict[str, tuple[Token, Any]] = {}

        def item() -> None:
            tok = line.expect_kind("ident", "an attribute name")
            line.expect("=")
            if line.peek().text == "<":
                attrs[tok.text] = (tok, self.tensor_payload(line))
            else:
                attrs[tok.text] = (tok, parse_attr_value(line))
        line.sep_list("]", item)
        return attrs

    def tensor_payload(self, line: Line) -> Any:
        line.expect("<")
        tok = line.expect_kind("ident", TENSOR_TEXT)
        if tok.text != "Tensor":
            raise line.error(TENSOR_TEXT, tok)
        line.expect(">")
        i, self.n_tensors = self.n_tensors, self.n_tensors + 1
        if isinstance(self.constants, Mapping) and f"c{i}" in self.constants:
            return self.constants[f"c{i}"]
        if isinstance(self.constants, Sequence) and i < len(self.constants):
            return self.constants[i]
        return TensorPlaceholder(i)

    def make_node(self, line: Line, kind_tok: Token, graph: Graph,
                  attrs: dict[str, tuple[Token, Any]], types: list[Type]) -> Node:
        kind, fusion = kind_tok.text, _FUSION_RE.match(kind_tok.text)
        values = {k: v for k, (_, v) in attrs.items()}
        if fusion is not None:
            kind = Prim.FUSION_GROUP
        elif kind.startswith("sm::"):
            values = self.bind_op_attrs(line, kind_tok, attrs)
        elif kind == Prim.CONSTANT and "value" in values and len(types) == 1:
            values["value"] = coerce(values["value"], types[0])
        try:
            node = graph.create(kind, [], types, values)
        except IRError as e:
            raise line.error("", kind_tok, str(e)) from None
        if fusion is not None:
            self.fusion_refs.append((node, int(fusion.group(1)), line, kind_tok))
        return node

    def bind_op_attrs(self, line: Line, kind_tok: Token,
                      attrs: dict[str, tuple[Token, Any]]) -> dict[str, Any]:
        name = kind_tok.text.split("::")[1]
        if name not in S.REGISTRY:
            raise line.error("", kind_tok, f"unknown op {kind_tok.text}")
        schema = S.REGISTRY[name]
        known = {a.name: a for a in schema.attrs}
        for k, (tok, _) in attrs.items():
            if k not in known:
                raise line.error("", tok, f"{name}() has no attribute {k!r}; expected one of "
                                          f"{sorted(known)}")
        try:
            bound = schema.bind_attrs({k: v for k, (_, v) in attrs.items()})
        except TypeError as e:
            raise line.error("", kind_tok, str(e)) from None
        return {k: coerce(v, known[k].type) for k, v in bound.items()}

    def parse_block(self, line: Line, node: Node) -> None:
        tok = line.expect_kind("ident", "'block<n>('")
        if tok.text != f"block{len(node.blocks)}":
            raise line.error(f"'block{len(node.blocks)}'", tok)
        line.expect("(")
        params = line.sep_list(")", lambda: self.typed_name(line))
        line.expect(":")
        line.expect_end()
        block = node.add_block()
        for ptok, t in params:
            self.define(line, ptok, block.add_param(t))
        for v in self.parse_body(block, "->"):
            block.register_output(v)


def parse(text: str, constants: Mapping[str, Any] | Sequence[Any] | None = None) -> Graph:
    """The graph that ``text`` prints (see the module docstring). Any malformed input, however
    hostile (absurd nesting, giant numbers), gives an ``IRParseError``."""
    try:
        return Parser(text, constants).parse()
    except RecursionError:
        raise IRParseError("nesting too deep", 1, 1) from None
    except ValueError as e:
        if isinstance(e, IRParseError):
            raise
        raise IRParseError(f"invalid literal ({e})", 1, 1) from None
