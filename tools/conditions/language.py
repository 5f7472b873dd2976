"""The condition language: one small expression over one case, in which every
finding is written, the tool's and the agent's (references/conditions.md).

Parsed with the standard :mod:`ast` module (``ast.parse(text, mode="eval")``) behind a
whitelist of node types, then turned into the frozen nodes below; the text is never
evaluated as Python.  Why ``ast``: no dependency, and it is the syntax agents already
write (``x.shape[-1] % 8 != 0 and x.dtype == bfloat16``); the whitelist keeps only
names, indexing by an integer, numbers and strings, ``+ - * // %``, ``min max abs
pow2``, comparisons (chained), ``and or not`` and ``in`` / ``not in`` a set literal.
Calls of anything else, lambdas, comprehensions, ``**``, ``/``, attribute tricks
(``__class__``) and keyword arguments are refused with the column where they stand.

Stable API (the hypothesis generator builds the same nodes programmatically):

- ``parse(text) -> Condition``; ``Condition(root)`` for a built node;
- ``Condition.evaluate(props) -> bool | None``: ``props`` maps a property name
  (``"x.shape[-1]"``, ``"attr.groups"``, ``"mode"``) to its value for one case; None is
  *undefined*: a name the case does not have (a dimension beyond its rank), or a
  type that does not fit (a string ordered against a number);
- ``Condition.names()``: the property names it reads (dtype limits are constants);
- ``Node.compile()``: a node as one closure over a case's properties, built once (a
  ``Condition`` compiles its root the first time it is evaluated);
- ``str(condition)``: the canonical text; ``parse(str(c))`` gives ``c`` back;
- ``check_names(condition, known)`` and :class:`ConditionError`.

Nodes: :class:`Prop` (a property by name), :class:`Limit` (``float16.max``),
:class:`Const` (a number, a bool, or a string: dtype names, memory formats, modes,
layouts and contiguity classes are written bare, other strings quoted),
:class:`Neg`, :class:`Arith` (``+ - * // %``), :class:`Call` (``min max abs pow2``),
:class:`Compare` (chained), :class:`In` (``in`` / ``not in`` a set of constants),
:class:`BoolOp` (``and`` / ``or``), :class:`Not`.

Undefined follows Kleene's three-valued logic: ``False and undefined`` is False,
``True or undefined`` is True, so a term the other terms already decide never makes a
case undefined.  Division or modulo by zero, ``pow2(0)`` and integer results over
:data:`MAX_INT` are undefined, never a crash.
"""

from __future__ import annotations

import ast
import difflib
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ..cases.derived import CONTIGUITY
from ..errors import ToolError
from ..schemas import DTYPE_FAMILIES, DTYPES, LAYOUTS, MODES
from .limits import FIELDS as LIMIT_FIELDS
from .limits import limit

MAX_TEXT = 2000
MAX_DEPTH = 64
MAX_INT = 2**256
MEMORY_FORMATS = ("contiguous_format", "channels_last", "channels_last_3d", "none")
# bare names that are constants, not properties
SIGNS = ("nonnegative", "nonpositive", "mixed")  # x.sign: of the non-zero values built
SYMBOLS: frozenset[str] = (
    frozenset(DTYPES)
    | set(MODES)
    | set(LAYOUTS)
    | set(CONTIGUITY)
    | set(MEMORY_FORMATS)
    | set(DTYPE_FAMILIES)
    | set(SIGNS)
)
FUNCTIONS = {"min": (2, 8), "max": (2, 8), "abs": (1, 1), "pow2": (1, 1)}
ALLOWED = (
    "property names (x.shape[-1], attr.groups, mode), numbers, quoted strings, bare dtype names, modes, "
    "memory formats, contiguity classes, dtype families and signs, + - * // %, min(a, b), max(a, b), abs(a), pow2(q), "
    "< <= > >= == != (chained), and, or, not, in {...}, not in {...}"
)

Value = Any  # a property's value: int, float, bool or str; None: undefined
Fn = Callable[[Mapping[str, Value]], Value]


class ConditionError(ToolError):
    """A condition the caller can fix: what is wrong, where in the text, what is allowed."""

    def __init__(self, message: str):
        super().__init__(message, code="invalid_condition")


# --------------------------------------------------------------------------
# Nodes
# --------------------------------------------------------------------------

# Python's precedence (higher binds tighter): parentheses are written where it needs them
_OR, _AND, _NOT, _CMP, _ADD, _MUL, _UNARY, _ATOM = range(8)


class Node:
    """An expression over one case."""

    precedence = _ATOM
    boolean = False  # may stand as a condition (an operand of and/or/not, or the whole)

    def compile(self) -> Fn:
        """The node as one closure over a case's properties (built once, called per case)."""
        raise NotImplementedError

    def evaluate(self, props: Mapping[str, Value]) -> Value:
        return self.compile()(props)

    def names(self) -> frozenset[str]:
        return frozenset()

    def wrap(self, outer: int) -> str:
        """The text, in parentheses when this node binds looser than its place ``outer``."""
        return f"({self})" if self.precedence < outer else str(self)


@dataclass(frozen=True)
class Prop(Node):
    """A property of the case by its name: ``x.shape[-1]``, ``attr.groups``, ``mode``."""

    name: str

    @property
    def boolean(self) -> bool:  # type: ignore[override]
        """A property may be a bool (x.contiguous); an indexed one (x.shape[0]) never is."""
        return not self.name.endswith("]")

    def compile(self) -> Fn:
        name = self.name
        return lambda props: props.get(name)

    def names(self) -> frozenset[str]:
        return frozenset({self.name})

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Limit(Node):
    """A dtype's limit by name: ``float16.max`` (tools/conditions/limits.py)."""

    dtype: str
    field: str

    def compile(self) -> Fn:
        value = limit(self.dtype, self.field)
        return lambda props: value

    def __str__(self) -> str:
        return f"{self.dtype}.{self.field}"


@dataclass(frozen=True)
class Const(Node):
    """A number, a bool, or a string (a known symbol is written bare: ``bfloat16``)."""

    value: int | float | bool | str

    @property
    def boolean(self) -> bool:  # type: ignore[override]
        return isinstance(self.value, bool)

    @property
    def precedence(self) -> int:  # type: ignore[override]
        return _UNARY if isinstance(self.value, (int, float)) and self.value < 0 else _ATOM

    def compile(self) -> Fn:
        value = self.value
        return lambda props: value

    def __str__(self) -> str:
        if isinstance(self.value, str):
            return self.value if self.value in SYMBOLS else repr(self.value)
        return repr(self.value)


def _number(v: Value) -> bool:
    return isinstance(v, (int, float))  # bool is an int, as in Python


def _bounded(v: Value) -> Value:
    return None if isinstance(v, int) and abs(v) > MAX_INT else v


@dataclass(frozen=True)
class Neg(Node):
    """``-a``."""

    operand: Node

    precedence = _UNARY

    def compile(self) -> Fn:
        operand = self.operand.compile()

        def neg(props: Mapping[str, Value]) -> Value:
            v = operand(props)
            return -v if _number(v) else None

        return neg

    def names(self) -> frozenset[str]:
        return self.operand.names()

    def __str__(self) -> str:
        return "-" + self.operand.wrap(_UNARY)


def _floordiv(a: Value, b: Value) -> Value:
    return None if b == 0 else a // b


def _mod(a: Value, b: Value) -> Value:
    return None if b == 0 else a % b


_ARITH: dict[str, tuple[int, Callable[[Any, Any], Value]]] = {
    "+": (_ADD, lambda a, b: a + b),
    "-": (_ADD, lambda a, b: a - b),
    "*": (_MUL, lambda a, b: a * b),
    "//": (_MUL, _floordiv),
    "%": (_MUL, _mod),
}


@dataclass(frozen=True)
class Arith(Node):
    """``left op right`` with op one of ``+ - * // %``; by zero is undefined."""

    left: Node
    op: str
    right: Node

    def __post_init__(self) -> None:
        if self.op not in _ARITH:
            raise ConditionError(f"arithmetic operator {self.op!r} is not one of {sorted(_ARITH)}")

    @property
    def precedence(self) -> int:  # type: ignore[override]
        return _ARITH[self.op][0]

    def compile(self) -> Fn:
        left, right, fn = self.left.compile(), self.right.compile(), _ARITH[self.op][1]

        def arith(props: Mapping[str, Value]) -> Value:
            a, b = left(props), right(props)
            if not (_number(a) and _number(b)):
                return None
            try:
                return _bounded(fn(a, b))
            except (OverflowError, ValueError):
                return None

        return arith

    def names(self) -> frozenset[str]:
        return self.left.names() | self.right.names()

    def __str__(self) -> str:
        p = self.precedence
        return f"{self.left.wrap(p)} {self.op} {self.right.wrap(p + 1)}"  # left-associative


def _pow2(q: Value) -> Value:
    """The largest power of two dividing an integer (0 and non-integers: undefined)."""
    if isinstance(q, float):
        if not q.is_integer():
            return None
        q = int(q)
    q = abs(int(q))
    return q & -q if q else None


_CALLS: dict[str, Callable[..., Value]] = {"min": min, "max": max, "abs": abs, "pow2": _pow2}


@dataclass(frozen=True)
class Call(Node):
    """``min(a, b, ...)``, ``max(a, b, ...)``, ``abs(a)``, ``pow2(q)``."""

    func: str
    args: tuple[Node, ...]

    def __post_init__(self) -> None:
        if self.func not in FUNCTIONS:
            raise ConditionError(f"function {self.func!r} is not one of {sorted(FUNCTIONS)}")
        low, high = FUNCTIONS[self.func]
        if not low <= len(self.args) <= high:
            want = str(low) if low == high else f"{low} to {high}"
            raise ConditionError(f"{self.func}() takes {want} arguments, not {len(self.args)}")

    def compile(self) -> Fn:
        args, fn = [a.compile() for a in self.args], _CALLS[self.func]

        def call(props: Mapping[str, Value]) -> Value:
            values = [a(props) for a in args]
            if not all(_number(v) for v in values):
                return None
            try:
                return _bounded(fn(*values))
            except (OverflowError, ValueError):
                return None

        return call

    def names(self) -> frozenset[str]:
        return frozenset().union(*(a.names() for a in self.args))

    def __str__(self) -> str:
        return f"{self.func}({', '.join(str(a) for a in self.args)})"


def _order(a: Value, b: Value, test: Callable[[Any, Any], bool]) -> bool | None:
    if _number(a) and _number(b) or isinstance(a, str) and isinstance(b, str):
        return bool(test(a, b))
    return None


_COMPARE: dict[str, Callable[[Any, Any], bool | None]] = {
    "<": lambda a, b: _order(a, b, lambda x, y: x < y),
    "<=": lambda a, b: _order(a, b, lambda x, y: x <= y),
    ">": lambda a, b: _order(a, b, lambda x, y: x > y),
    ">=": lambda a, b: _order(a, b, lambda x, y: x >= y),
    "==": lambda a, b: bool(a == b),
    "!=": lambda a, b: bool(a != b),
}


def _and(values: Iterable[bool | None]) -> bool | None:
    """Kleene's and: False wins over undefined."""
    out: bool | None = True
    for v in values:
        if v is False:
            return False
        if v is None:
            out = None
    return out


def _or(values: Iterable[bool | None]) -> bool | None:
    """Kleene's or: True wins over undefined."""
    out: bool | None = False
    for v in values:
        if v is True:
            return True
        if v is None:
            out = None
    return out


def _bool(v: Value) -> bool | None:
    """A condition's value: a bool, else undefined (a bool property that is not a bool)."""
    return v if isinstance(v, bool) else None


@dataclass(frozen=True)
class Compare(Node):
    """``a < b``, chained as Python chains it: ``0 <= a < b`` is ``0 <= a and a < b``."""

    left: Node
    ops: tuple[str, ...]
    comparators: tuple[Node, ...]

    precedence = _CMP
    boolean = True

    def __post_init__(self) -> None:
        if not self.ops or len(self.ops) != len(self.comparators):
            raise ConditionError("a comparison needs one operator per compared expression")
        bad = [op for op in self.ops if op not in _COMPARE]
        if bad:
            raise ConditionError(f"comparison operators {bad} are not among {list(_COMPARE)}")

    def compile(self) -> Fn:
        sides = [self.left.compile()] + [c.compile() for c in self.comparators]
        tests = [_COMPARE[op] for op in self.ops]
        if len(tests) == 1:  # the common case, without the chain's lists
            (left, right), (test,) = sides, tests

            def compare(props: Mapping[str, Value]) -> bool | None:
                a = left(props)
                b = right(props) if a is not None else None
                return None if b is None else test(a, b)

            return compare

        def chain(props: Mapping[str, Value]) -> bool | None:
            values = [side(props) for side in sides]
            return _and(
                None if a is None or b is None else test(a, b)
                for test, a, b in zip(tests, values, values[1:], strict=False)
            )

        return chain

    def names(self) -> frozenset[str]:
        return self.left.names().union(*(c.names() for c in self.comparators))

    def __str__(self) -> str:
        parts = [self.left.wrap(_CMP + 1)]
        for op, c in zip(self.ops, self.comparators, strict=True):
            parts += [op, c.wrap(_CMP + 1)]
        return " ".join(parts)


def _set_key(v: Value) -> tuple[int, Any]:
    return (0, v) if _number(v) else (1, str(v))


@dataclass(frozen=True)
class In(Node):
    """``a in {v, w}`` (``negate``: ``not in``); the values are constants, kept sorted."""

    operand: Node
    values: tuple[Const, ...]
    negate: bool = False

    precedence = _CMP
    boolean = True

    def __post_init__(self) -> None:
        if not self.values:
            raise ConditionError("'in' needs at least one value: {a, b}")
        unique = {c.value: c for c in self.values}.values()  # 1 and 1.0 are one member, as in a Python set
        object.__setattr__(self, "values", tuple(sorted(unique, key=lambda c: _set_key(c.value))))

    def compile(self) -> Fn:
        operand, negate = self.operand.compile(), self.negate
        strings = frozenset(c.value for c in self.values if isinstance(c.value, str))
        numbers = frozenset(c.value for c in self.values if not isinstance(c.value, str))

        def member(props: Mapping[str, Value]) -> bool | None:
            v = operand(props)
            if v is None:
                return None
            try:
                return (v in (strings if isinstance(v, str) else numbers)) != negate
            except TypeError:  # not hashable: no member
                return negate

        return member

    def names(self) -> frozenset[str]:
        return self.operand.names()

    def __str__(self) -> str:
        op = "not in" if self.negate else "in"
        return f"{self.operand.wrap(_CMP + 1)} {op} {{{', '.join(str(c) for c in self.values)}}}"


@dataclass(frozen=True)
class BoolOp(Node):
    """``a and b and ...`` / ``a or b or ...`` (Kleene: see the module docstring)."""

    op: str
    values: tuple[Node, ...]

    boolean = True

    def __post_init__(self) -> None:
        if self.op not in ("and", "or") or len(self.values) < 2:
            raise ConditionError("a BoolOp is 'and' or 'or' over two or more conditions")
        for v in self.values:
            _require_boolean(v)

    @property
    def precedence(self) -> int:  # type: ignore[override]
        return _AND if self.op == "and" else _OR

    def compile(self) -> Fn:
        parts, combine = [v.compile() for v in self.values], _and if self.op == "and" else _or
        return lambda props: combine(_bool(part(props)) for part in parts)

    def names(self) -> frozenset[str]:
        return frozenset().union(*(v.names() for v in self.values))

    def __str__(self) -> str:
        p = self.precedence
        return f" {self.op} ".join(v.wrap(p + 1) for v in self.values)


@dataclass(frozen=True)
class Not(Node):
    """``not a``."""

    operand: Node

    precedence = _NOT
    boolean = True

    def __post_init__(self) -> None:
        _require_boolean(self.operand)

    def compile(self) -> Fn:
        operand = self.operand.compile()

        def negation(props: Mapping[str, Value]) -> bool | None:
            v = operand(props)
            return not v if isinstance(v, bool) else None

        return negation

    def names(self) -> frozenset[str]:
        return self.operand.names()

    def __str__(self) -> str:
        return "not " + self.operand.wrap(_NOT)


def _require_boolean(node: Node) -> None:
    if not node.boolean:
        raise ConditionError(
            f"'{node}' is a quantity, not a condition: compare it (e.g. '{node} > 0') before and/or/not"
        )


@dataclass(frozen=True)
class Condition:
    """One condition over a case: true where it predicts that the case fails."""

    root: Node

    def __post_init__(self) -> None:
        _require_boolean(self.root)

    @cached_property
    def _compiled(self) -> Fn:
        return self.root.compile()

    def evaluate(self, props: Mapping[str, Value]) -> bool | None:
        """True, False, or None where it is undefined on this case (see the module docstring)."""
        return _bool(self._compiled(props))

    def names(self) -> frozenset[str]:
        """The property names it reads (dtype limits and symbols are constants)."""
        return self.root.names()

    def __str__(self) -> str:
        return str(self.root)


# --------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------


def _where(text: str, node: ast.AST | None) -> str:
    """`` at column N: <the text> / <a caret under it>`` for a node of ``text``."""
    col = getattr(node, "col_offset", None)
    if col is None or "\n" in text:
        return ""
    return f" at column {col + 1}:\n  {text}\n  {' ' * col}^"


class _Parser:
    """One walk over the ``ast`` of one text, node by node against the whitelist."""

    def __init__(self, text: str):
        self.text = text

    def fail(self, node: ast.AST | None, what: str) -> ConditionError:
        return ConditionError(f"condition {self.text!r}: {what}{_where(self.text, node)}\nallowed: {ALLOWED}")

    def expr(self, node: ast.expr, depth: int = 0) -> Node:
        if depth > MAX_DEPTH:
            raise self.fail(node, f"nested deeper than {MAX_DEPTH} levels")
        handler = getattr(self, "on_" + type(node).__name__, None)
        if handler is None:
            raise self.fail(node, f"{_describe(node)} is not part of the language")
        try:
            result: Node = handler(node, depth + 1)
        except ConditionError as exc:
            if exc.message.startswith("condition "):
                raise
            raise self.fail(node, exc.message) from None
        return result

    def on_Constant(self, node: ast.Constant, depth: int) -> Node:
        v = node.value
        if isinstance(v, float) and not math.isfinite(v):
            raise self.fail(node, f"the number {v!r} is not finite (write a dtype limit: float16.max)")
        if isinstance(v, (bool, float, str)):
            return Const(v)
        if isinstance(v, int):
            if abs(v) > MAX_INT:
                raise self.fail(node, f"the integer {str(v)[:20]}... is over 2**256")
            return Const(v)
        raise self.fail(node, f"the constant {v!r} is not a number, a bool or a string")

    def on_Name(self, node: ast.Name, depth: int) -> Node:
        if node.id in SYMBOLS:
            return Const(node.id)
        return self.on_path(node, depth)

    def on_Attribute(self, node: ast.Attribute, depth: int) -> Node:
        return self.on_path(node, depth)

    def on_Subscript(self, node: ast.Subscript, depth: int) -> Node:
        return self.on_path(node, depth)

    def on_path(self, node: ast.expr, depth: int) -> Node:
        parts = self.path(node, depth)
        if parts[0] in SYMBOLS:  # a dtype's limit: float16.max
            field = parts[1].lstrip(".")
            if len(parts) != 2 or limit(parts[0], field) is None:
                fields = [f for f in LIMIT_FIELDS if limit(parts[0], f) is not None]
                raise self.fail(
                    node, f"{''.join(parts)} is not a dtype limit ({parts[0]} has: {', '.join(fields) or 'none'})"
                )
            return Limit(parts[0], field)
        return Prop("".join(parts))

    def path(self, node: ast.expr, depth: int) -> list[str]:
        """``x.shape[-1]`` -> ["x", ".shape", "[-1]"]: a name, then .field and [integer] parts."""
        if depth > MAX_DEPTH:
            raise self.fail(node, f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(node, ast.Name):
            return [self.ident(node, node.id)]
        if isinstance(node, ast.Attribute):
            return self.path(node.value, depth + 1) + ["." + self.ident(node, node.attr)]
        if isinstance(node, ast.Subscript):
            return self.path(node.value, depth + 1) + [f"[{self.index(node.slice)}]"]
        raise self.fail(node, f"{_describe(node)} cannot start a property name (write a name: x.shape[-1])")

    def ident(self, node: ast.AST, name: str) -> str:
        if name.startswith("__"):
            raise self.fail(node, f"the name {name!r} is not a property (no dunder names)")
        return name

    def index(self, node: ast.expr) -> int:
        sign = 1
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            sign, node = -1, node.operand
        if isinstance(node, ast.Constant) and type(node.value) is int and node.value < 2**31:
            return sign * node.value
        raise self.fail(node, "an index is an integer constant: x.shape[-1], x.values.sumsq[0]")

    def on_UnaryOp(self, node: ast.UnaryOp, depth: int) -> Node:
        operand = self.expr(node.operand, depth)
        if isinstance(node.op, ast.Not):
            return Not(operand)
        if isinstance(node.op, ast.USub):
            value = operand.value if isinstance(operand, Const) else None
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return Const(-value)
            return Neg(operand)
        if isinstance(node.op, ast.UAdd):
            return operand
        raise self.fail(node, "'~' is not part of the language")

    def on_BinOp(self, node: ast.BinOp, depth: int) -> Node:
        ops = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}
        op = ops.get(type(node.op))
        if op is None:
            hint = {
                ast.Pow: "no '**' (write the product, or pow2(q) for an alignment)",
                ast.Div: "no '/' (use '//', floor division, or compare a product: a > 8 * b)",
            }.get(type(node.op), f"the operator {type(node.op).__name__} is not part of the language")
            raise self.fail(node, hint)
        left, right = self.expr(node.left, depth), self.expr(node.right, depth)
        for side in (left, right):
            if side.boolean and not isinstance(side, Prop):
                raise self.fail(node, f"'{side}' is a condition, not a quantity: no arithmetic on it")
        return Arith(left, op, right)

    def on_Call(self, node: ast.Call, depth: int) -> Node:
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            raise self.fail(node, f"only {', '.join(f'{f}()' for f in FUNCTIONS)} may be called")
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise self.fail(node, f"{node.func.id}() takes plain arguments (no keywords, no *)")
        return Call(node.func.id, tuple(self.expr(a, depth) for a in node.args))

    def on_BoolOp(self, node: ast.BoolOp, depth: int) -> Node:
        return BoolOp("and" if isinstance(node.op, ast.And) else "or", tuple(self.expr(v, depth) for v in node.values))

    def on_Compare(self, node: ast.Compare, depth: int) -> Node:
        names = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
        if any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            if len(node.ops) != 1:
                raise self.fail(node, "'in' stands alone: write 'a in {1, 2} and b > 0', not a chain")
            return In(
                self.expr(node.left, depth),
                self.members(node.comparators[0], depth),
                isinstance(node.ops[0], ast.NotIn),
            )
        ops = [names.get(type(op)) for op in node.ops]
        if None in ops:
            raise self.fail(node, "'is' / 'is not' are not part of the language (use == / !=)")
        return Compare(
            self.expr(node.left, depth),
            tuple(op for op in ops if op),
            tuple(self.expr(c, depth) for c in node.comparators),
        )

    def members(self, node: ast.expr, depth: int) -> tuple[Const, ...]:
        if not isinstance(node, (ast.Set, ast.List, ast.Tuple)):
            raise self.fail(node, "'in' takes a set of constants: x.dtype in {float16, bfloat16}")
        out = []
        for elt in node.elts:
            c = self.expr(elt, depth)
            if not isinstance(c, Const):
                raise self.fail(elt, f"'{c}' in a set is not a constant (numbers, strings, dtype names)")
            out.append(c)
        if not out:
            raise self.fail(node, "'in' needs at least one value: {a, b}")
        return tuple(out)


def _describe(node: ast.AST) -> str:
    kinds = {
        "Lambda": "a lambda",
        "ListComp": "a comprehension",
        "SetComp": "a comprehension",
        "DictComp": "a comprehension",
        "GeneratorExp": "a generator expression",
        "IfExp": "an 'if ... else' expression",
        "NamedExpr": "':='",
        "Dict": "a dict",
        "Starred": "'*'",
        "JoinedStr": "an f-string",
        "Await": "await",
        "Yield": "yield",
        "Slice": "a slice",
    }
    return kinds.get(type(node).__name__, f"'{type(node).__name__}'")


_SPACES = str.maketrans("\n\r\t", "   ")


def parse(text: str) -> Condition:
    """The condition a text states (see the module docstring); ConditionError if it is not one."""
    if not isinstance(text, str) or not text.strip():
        raise ConditionError("a condition is a non-empty text, e.g. 'x.shape[-1] % 8 != 0'")
    if len(text) > MAX_TEXT:
        raise ConditionError(f"a condition is at most {MAX_TEXT} characters, this one has {len(text)}")
    one_line = text.strip().translate(_SPACES)  # one line, the same columns
    try:
        tree = ast.parse(one_line, mode="eval")
    except SyntaxError as exc:
        col = (exc.offset or 1) - 1
        where = f" at column {col + 1}:\n  {one_line}\n  {' ' * col}^" if exc.offset else ""
        raise ConditionError(
            f"condition {one_line!r} is not valid syntax ({exc.msg}){where}\nallowed: {ALLOWED}"
        ) from None
    except (RecursionError, MemoryError, ValueError):
        raise ConditionError(f"condition {one_line[:80]!r}... is nested too deeply or holds a null byte") from None
    parser = _Parser(one_line)
    root = parser.expr(tree.body)
    if not root.boolean:
        raise parser.fail(tree.body, f"'{root}' is a quantity, not a condition: compare it (e.g. '{root} > 0')")
    return Condition(root)


def closest(name: str, known: Iterable[str]) -> list[str]:
    """``known`` ordered by their likeness to ``name`` (difflib), closest first."""
    return sorted(known, key=lambda k: (-difflib.SequenceMatcher(None, name, k).ratio(), k))


def check_names(condition: Condition, known: Iterable[str], *, show: int = 40) -> None:
    """ConditionError naming each property the condition reads that no case has, with the
    run's property names, closest first (at most ``show``)."""
    known_set = set(known)
    unknown = sorted(condition.names() - known_set)
    if not unknown:
        return
    ranked = closest(unknown[0], known_set)
    listed = ", ".join(ranked[:show]) + (f" and {len(ranked) - show} more" if len(ranked) > show else "")
    near = difflib.get_close_matches(unknown[0], list(known_set) + sorted(SYMBOLS), n=1, cutoff=0.75)
    hint = f" (did you mean {near[0]}?)" if near else ""
    raise ConditionError(
        f"condition {str(condition)!r}: {', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not a "
        f"property of any case of this run{hint}; this run's cases have: {listed or 'no properties'}"
    )


__all__ = [
    "ALLOWED",
    "Arith",
    "BoolOp",
    "Call",
    "Compare",
    "Condition",
    "ConditionError",
    "Const",
    "In",
    "Limit",
    "Neg",
    "Node",
    "Not",
    "Prop",
    "SYMBOLS",
    "check_names",
    "closest",
    "parse",
]
