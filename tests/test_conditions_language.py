"""The condition language (tools/conditions/language.py): what it parses, what it refuses
and where, its canonical text, and its three-valued evaluation over one case."""

from __future__ import annotations

import pytest

from tools.conditions.language import (
    MAX_TEXT,
    Arith,
    BoolOp,
    Call,
    Compare,
    Condition,
    ConditionError,
    Const,
    In,
    Limit,
    Not,
    Prop,
    check_names,
    parse,
)
from tools.errors import ToolError

# the examples of references/conditions.md, and others that exercise each node
TEXTS = [
    "x.shape[1] // attr.groups > 8 and x.shape[1] // attr.groups % 8 != 0",
    "x.dtype == float16 and x.values.sumsq[-1] > float16.max",
    "positions.values.min < 0 or positions.values.max > 4095",
    "x.memory_format == channels_last",
    "x.shape[0] * x.shape[1] > 65535",
    "pow2(x.storage_offset * x.itemsize) < 32",
    "x.dtype in {float16, bfloat16}",
    "not x.contiguous",
    "0 <= a - (b - c) < -1",
    "-(a + b) * 2 > 1",
    "(a or b) and c",
    "attr.reduction == 'mean'",
    "grad.x.wrong.rows >= 1 and out.wrong.tail[-1] == 0",
    "x[1].shape[0] > 2",
    "x.shape[-1] % 8 not in {1, 3}",
    "not (a and b)",
    "mode == eager and x.contiguity == sliced",
    "min(a, b, 3) > abs(c - 1)",
    "x.values.max_abs > 1e4 or x.values.nan > 0",
]


@pytest.mark.parametrize("text", TEXTS)
def test_the_canonical_text_round_trips(text: str) -> None:
    c = parse(text)
    again = parse(str(c))
    assert again == c and str(again) == str(c)


def test_the_canonical_text_is_one_spelling() -> None:
    # quotes around a dtype, a list for a set, order and repeats of the members, spaces, parentheses
    assert str(parse("x.dtype in ['bfloat16', \"float16\", 'bfloat16']")) == "x.dtype in {bfloat16, float16}"
    assert str(parse("((x.shape[ 0 ]))*2>=+3")) == "x.shape[0] * 2 >= 3"
    assert str(parse("a - (b + c) > a - b + c")) == "a - (b + c) > a - b + c"
    assert str(parse("x.dtype == 'bfloat16'")) == "x.dtype == bfloat16"


def test_names_are_properties_and_symbols_and_limits_are_constants() -> None:
    c = parse(TEXTS[1])
    assert c.names() == {"x.dtype", "x.values.sumsq[-1]"}
    root = c.root
    assert isinstance(root, BoolOp) and root.op == "and"
    assert root.values[0] == Compare(Prop("x.dtype"), ("==",), (Const("float16"),))
    assert root.values[1] == Compare(Prop("x.values.sumsq[-1]"), (">",), (Limit("float16", "max"),))
    assert parse("x.memory_format == channels_last").names() == {"x.memory_format"}
    assert parse("grad.x.wrong.rows > 0").names() == {"grad.x.wrong.rows"}


def test_a_condition_built_in_code_is_the_one_parsed() -> None:
    ratio = Arith(Prop("x.shape[1]"), "//", Prop("attr.groups"))
    built = Condition(
        BoolOp("and", (Compare(ratio, (">",), (Const(8),)), Compare(Arith(ratio, "%", Const(8)), ("!=",), (Const(0),))))
    )
    assert built == parse(TEXTS[0]) and str(built) == TEXTS[0]
    assert (
        str(Condition(In(Prop("x.dtype"), (Const("float16"), Const("bfloat16"))))) == "x.dtype in {bfloat16, float16}"
    )
    assert str(Condition(Not(Compare(Call("pow2", (Prop("x.numel"),)), ("<", "<"), (Const(8), Const(9)))))) == (
        "not pow2(x.numel) < 8 < 9"
    )
    with pytest.raises(ConditionError, match="quantity, not a condition"):
        Condition(Arith(Prop("a"), "+", Const(1)))
    with pytest.raises(ConditionError, match="takes 1 arguments"):
        Call("abs", (Prop("a"), Prop("b")))


def test_evaluation_follows_the_case() -> None:
    groups = parse(TEXTS[0])
    assert groups.evaluate({"x.shape[1]": 36, "attr.groups": 3}) is True  # 12 per group: > 8, not a multiple of 8
    assert groups.evaluate({"x.shape[1]": 48, "attr.groups": 3}) is False  # 16 per group
    assert groups.evaluate({"x.shape[1]": 21, "attr.groups": 3}) is False  # 7 per group
    overflow = parse(TEXTS[1])
    assert overflow.evaluate({"x.dtype": "float16", "x.values.sumsq[-1]": 70000.0}) is True
    assert overflow.evaluate({"x.dtype": "float16", "x.values.sumsq[-1]": 60000.0}) is False
    assert overflow.evaluate({"x.dtype": "float32", "x.values.sumsq[-1]": 70000.0}) is False
    assert parse("pow2(x.storage_offset * x.itemsize) < 32").evaluate({"x.storage_offset": 6, "x.itemsize": 2}) is True
    assert (
        parse("pow2(x.storage_offset * x.itemsize) < 32").evaluate({"x.storage_offset": 16, "x.itemsize": 2}) is False
    )
    assert parse("1 < a < 3").evaluate({"a": 2}) is True and parse("1 < a < 3").evaluate({"a": 3}) is False
    assert parse("not x.contiguous").evaluate({"x.contiguous": False}) is True
    assert parse("x.dtype not in {float16, bfloat16}").evaluate({"x.dtype": "float32"}) is True
    assert parse("attr.k in {1, 2}").evaluate({"attr.k": "1"}) is False  # a string is not the number
    assert parse("-(a + b) * 2 > -7").evaluate({"a": 1, "b": 2}) is True


def test_undefined_is_three_valued_and_never_a_crash() -> None:
    c = parse("x.rank == 3 and x.shape[2] > 8")
    assert c.evaluate({"x.rank": 3, "x.shape[2]": 9}) is True
    assert c.evaluate({"x.rank": 2}) is False  # the first term decides: no dimension 2 is needed
    assert c.evaluate({"x.rank": 2, "x.shape[2]": 9}) is False
    assert c.evaluate({"x.rank": 3}) is None  # the first term holds: the second is needed and absent
    assert parse("0 < x.shape[2] < 8").evaluate({}) is None and parse("3 < 2 < a").evaluate({}) is False
    assert parse("x.shape[2] > 8").evaluate({"x.rank": 2}) is None
    assert parse("x.rank == 2 or x.shape[2] > 8").evaluate({"x.rank": 3}) is None
    assert parse("x.rank == 3 or x.shape[2] > 8").evaluate({"x.rank": 3}) is True
    assert parse("not x.shape[2] > 8").evaluate({}) is None
    # by zero, pow2(0), a string against a number, a bool property that is not a bool
    assert parse("a // b > 1").evaluate({"a": 4, "b": 0}) is None
    assert parse("a % b == 0").evaluate({"a": 4, "b": 0}) is None
    assert parse("pow2(a) >= 8").evaluate({"a": 0}) is None
    assert parse("pow2(a) >= 8").evaluate({"a": 2.5}) is None
    assert parse("x.dtype > 3").evaluate({"x.dtype": "float16"}) is None
    assert parse("x.dtype + 1 > 3").evaluate({"x.dtype": "float16"}) is None
    assert parse("x.contiguous").evaluate({"x.contiguous": 3}) is None
    # no huge integers: a product over 2**256 is undefined
    assert parse("a * a * a > 0").evaluate({"a": 2**100}) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("__import__('os').system('true')", r"only min\(\), max\(\), abs\(\), pow2\(\) may be called"),
        ("open('/etc/passwd') == 1", r"only min\(\), max\(\), abs\(\), pow2\(\) may be called"),
        ("x.__class__ == 1", "no dunder names"),
        ("x.shape.__len__() > 1", r"only min\(\), max\(\), abs\(\), pow2\(\) may be called"),
        ("(lambda: 1)() == 1", r"only min\(\)"),
        ("(lambda: 1) == 1", "a lambda is not part of the language"),
        ("[a for a in b] == 1", "a comprehension is not part of the language"),
        ("any(a for a in b)", r"only min\(\)"),
        ("a ** 2 > 1", "no '\\*\\*'"),
        ("a / 2 > 1", "no '/'"),
        ("a if b else c", "an 'if ... else' expression"),
        ("x.shape[i] > 1", "an index is an integer constant"),
        ("x.shape[0:2] == 1", "an index is an integer constant"),
        ("(a := 1) > 0", "':='"),
        ("f'{a}' == 'b'", "an f-string"),
        ("a is None", "'is'"),
        ("a in b", "'in' takes a set of constants"),
        ("a in {b}", "in a set is not a constant"),
        ("1 < a in {1}", "'in' stands alone"),
        ("min(a, b=2) > 0", "no keywords"),
        ("x.shape[0]", "is a quantity, not a condition"),
        ("(a > 1) + 2 > 0", "is a condition, not a quantity"),
        ("a > 1 and b + 1", "is a quantity, not a condition"),
        ("1e999 > a", "not finite"),
        ("float16.ulp > a", "float16.ulp is not a dtype limit \\(float16 has: max, min, tiny, eps\\)"),
        ("int8.eps > a", "int8 has: max, min\\)"),
        ("float16.max.x > a", "not a dtype limit"),
        ("{1: 2} == a", "a dict is not part of the language"),
        ("a > None", "not a number, a bool or a string"),
        ("a >", "not valid syntax"),
        ("import os", "not valid syntax"),
        ("a > 1; b > 2", "not valid syntax"),
        ("", "non-empty"),
        ("a > " + "1 + " * 70 + "1", "nested deeper than"),
        ("a > " + "(" * 300 + "1" + ")" * 300, "nested too deeply|not valid syntax"),
        ("a > " + "9" * 100, "over 2\\*\\*256"),
    ],
)
def test_the_whitelist_refuses_with_a_clear_message(text: str, message: str) -> None:
    with pytest.raises(ConditionError, match=message) as exc:
        parse(text)
    assert isinstance(exc.value, ToolError) and exc.value.code == "invalid_condition"


def test_an_error_says_where_and_what_is_allowed() -> None:
    with pytest.raises(ConditionError) as exc:
        parse("x.shape[-1] > 8 and x.y ** 2 > 3")
    text = exc.value.message
    assert "at column 21" in text and "\n  " + " " * 20 + "^" in text
    assert "allowed:" in text and "pow2(q)" in text


def test_a_text_over_the_bound_is_refused_before_parsing() -> None:
    with pytest.raises(ConditionError, match=f"at most {MAX_TEXT} characters"):
        parse("a > 1 or " * 300 + "a > 1")


def test_check_names_lists_the_runs_properties_closest_first() -> None:
    known = {"x.shape[0]", "x.shape[-1]", "x.rank", "mode", "attr.groups", "x.dtype"}
    check_names(parse("x.shape[0] > 1 and mode == eager"), known)  # known: no error
    with pytest.raises(ConditionError) as exc:
        check_names(parse("x.shap[0] > 1"), known)
    text = exc.value.message
    assert "x.shap[0] is not a property of any case of this run" in text
    assert "did you mean x.shape[0]?" in text
    listed = text.split("this run's cases have: ")[1].split(", ")
    assert listed[0] == "x.shape[0]" and set(listed) == known
    with pytest.raises(ConditionError, match="did you mean float16"):
        check_names(parse("x.dtype == flaot16"), known)
