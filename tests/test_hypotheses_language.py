"""The language is the space: every axis the tool's own hypotheses may name is a condition-language expression
(tools/analysis/grammar.py), and the language's evaluator (tools/conditions/) gives every atom of the space the
truth the space gives it, on runs of many shapes - rank 1 to 5, two inputs and tensor lists, integer, dtype,
list, string, bool and None attributes, several dtypes, strided, offset and channels_last inputs, value specs
and measured values.  A disagreement here is how a wrong finding gets written: the tool would state one thing
and the agent's language would read another."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from tools.conditions.grammar import expression, literal
from tools.analysis.hypotheses import Atom, atom_text, enumerate_hypotheses, hypothesis_axes
from tools.analysis.measured import measured_quantities
from tools.cases.axes import case_axes
from tools.conditions.grammar import OPEN, PRODUCTS, space_axes
from tools.cases.relations import fill_products
from tools.conditions.language import parse
from tools.conditions.properties import case_properties
from tools.schemas import Case, CaseResult


def _case(i: int, inputs: list[dict], attrs: dict | None = None, mode: str = "eager") -> Case:
    return Case.model_validate({"id": f"c{i}", "mode": mode, "inputs": inputs, "attributes": attrs or {}})


def _cases() -> list[Case]:
    out = []
    shapes = [[3, 5], [8, 16], [2, 3, 5], [4, 8, 32], [2, 6, 4, 4], [1, 8, 2, 3], [16, 1024]]
    i = 0
    for shape in shapes:
        for dtype in ("float16", "bfloat16", "float32"):
            i += 1
            attrs = {
                "groups": i % 3 + 1,
                "dim": -1 if i % 2 else 1,
                "eps": 1e-5 * i,
                "flag": bool(i % 2),
                "reduction": "mean" if i % 2 else "sum",
            }
            out.append(
                _case(
                    i,
                    [
                        {"name": "x", "shape": shape, "dtype": dtype},
                        {"name": "w", "shape": shape[-1:], "dtype": "float32"},
                    ],
                    attrs,
                )
            )
    w5 = {"name": "w", "shape": [5]}
    out += [
        _case(
            100,
            [{"name": "x", "shape": [2, 3, 4, 5], "strides": [60, 1, 15, 3], "dtype": "float16"}, w5],
            {"groups": 3},
        ),  # channels_last
        _case(
            101,
            [{"name": "x", "shape": [4, 6], "strides": [8, 1], "storage_offset": 4}, {"name": "w", "shape": [6]}],
            {"groups": 2},
        ),  # padded rows, an offset
        _case(
            102, [{"name": "x", "shape": [4, 6], "strides": [1, 4]}, {"name": "w", "shape": [4, 6]}], {"groups": 2}
        ),  # transposed
        _case(
            103,
            [
                {"name": "x", "shape": [4, 6], "strides": [12, 2], "storage_offset": 3, "values": {"kind": "zeros"}},
                {"name": "w", "shape": [1, 6], "dtype": "float16"},
            ],
            {"groups": 5},
        ),
        _case(104, [{"name": "x", "shape": [0, 6]}, {"name": "w", "shape": [6]}], {"groups": 1}, mode="compile"),
        _case(
            105,
            [
                {"name": "x", "shape": [3, 4, 5], "values": {"kind": "uniform", "low": 0, "high": 3}},
                {"name": "w", "shape": [5], "values": {"kind": "ones"}},
            ],
            {"groups": 4},
        ),
        _case(
            106,
            [
                {"name": "x", "shape": [2, 3, 4, 5, 6], "strides": [360, 1, 90, 18, 3], "dtype": "int32"},
                {"name": "w", "none": True},
            ],
            {"out_dtype": {"kind": "dtype", "value": "float16"}, "dims": [0, -1], "bias": None, "reduction": None},
        ),
        _case(
            107,
            [
                {"name": "x", "shape": [7], "dtype": "int8", "values": {"kind": "randint", "low": -3, "high": 4}},
                {"name": "ts", "tensors": [{"shape": [4]}, {"shape": [2, 2], "dtype": "float16"}]},
            ],
            {"out_dtype": {"kind": "dtype", "value": "float32"}, "dims": [1], "bias": 2.5},
        ),
        _case(
            108,
            [
                {
                    "name": "x",
                    "shape": [4, 4],
                    "values": {
                        "kind": "normal",
                        "specials": [
                            {"value": "nan", "count": 2},
                            {"value": "+0", "positions": [[1, 0], [1, 1], [1, 2], [1, 3]]},
                        ],
                    },
                },
                {"name": "ts", "tensors": [{"shape": [3]}]},
            ],
            {"out_dtype": {"kind": "dtype", "value": "float16"}, "dims": [0, -1]},
        ),
        _case(
            109,
            [
                {"name": "x", "shape": [2, 3, 4, 4], "layout": "NCHW", "values": {"kind": "full", "fill": -2.0}},
                {"name": "w", "shape": [4]},
            ],
            {},
            mode="graph",
        ),
        _case(110, [{"name": "x", "shape": []}, {"name": "w", "shape": [], "dtype": "int64"}], {"groups": 0}),  # 0-d
        _case(111, [{"name": "x", "shape": [3, 8], "strides": [0, 1]}, {"name": "w", "shape": [8]}],
              {"groups": -2}),  # broadcast rows, a negative attribute
        _case(112, [{"name": "x", "shape": [4, 8], "strides": [1, 1], "dtype": "bfloat16"},
                    {"name": "w", "shape": [2, 4, 8], "dtype": "bfloat16"}], {"groups": 8}),  # overlapping
        _case(113, [{"name": "x", "shape": [1, 8, 1, 1, 6], "strides": [48, 1, 48, 48, 8], "dtype": "float16",
                     "values": {"kind": "arange"}},
                    {"name": "w", "shape": [6], "values": {"kind": "uniform", "low": -4, "high": 0}}],
              {"groups": 2}, mode="compile"),  # channels_last_3d with unit dimensions
    ]
    return out


def _result(case: Case, k: int) -> CaseResult:
    x = {
        "numel": 8,
        "min": -1.5 - k % 3,
        "max": 300.0 * (k % 4),
        "max_abs": 300.0 * (k % 4) + 2,
        "sumsq": [None, 7e4 * (k % 2) + 3.0],
        "sum_abs": [None, 3.0 + k],
    }
    return CaseResult.model_validate(
        {"case_id": case.id, "status": "passed", "values": {"x": x}, "comparisons": [{"output": "out", "passed": True}]}
    )


def _space(cases: list[Case]) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Every axis the space offers on each case (the first space, the open one, products and ratios read at
    every rank, the measured statistics - space.widen's union), and the language's properties."""
    by_id = {c.id: c for c in cases}
    results = {c.id: _result(c, k) for k, c in enumerate(cases)}
    prods = {c.id: space_axes(c, PRODUCTS) for c in cases}
    fill_products(by_id, prods)
    space = {
        c.id: {
            **hypothesis_axes(c, case_axes(c)),
            **space_axes(c, OPEN),
            **prods[c.id],
            **measured_quantities(results[c.id]),
        }
        for c in cases
    }
    props = {c.id: case_properties(c, results[c.id]) for c in cases}
    return space, props


def _atoms(axis: str, values: list[Any]) -> list[Atom]:
    """Every atom the space can form over one axis from these values."""
    if all(isinstance(v, bool) for v in values):
        return [Atom(axis, "class", (True,)), Atom(axis, "class", (False,))]
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        s = sorted(set(values))
        out = [Atom(axis, "value", (s[0],))]
        step = max(1, len(s) // 6)  # six boundaries an axis: each side of each, a bracket and a closed one
        for a, b in list(zip(s, s[1:]))[::step]:
            out += [
                Atom(axis, "threshold", direction="above", fails_at=b, passes_at=a),
                Atom(axis, "threshold", direction="below", fails_at=a, passes_at=b),
                Atom(axis, "threshold", direction="above", fails_at=b),
            ]
        return out
    assert all(isinstance(v, str) for v in values), (axis, values)  # one type per axis
    kind = "relation" if "~" in axis else "value"
    out = [Atom(axis, kind, (v,)) for v in sorted(set(values))]
    if len(set(values)) > 2:  # a set of every value holds everywhere: never an atom of the space
        out.append(Atom(axis, "set" if kind == "value" else kind, tuple(sorted(set(values))[:2])))
    return out


def test_every_atom_of_the_space_reads_the_same_in_the_language() -> None:
    cases = _cases()
    space, props = _space(cases)
    values: dict[str, list[Any]] = defaultdict(list)
    for ax in space.values():
        for k, v in ax.items():
            values[k].append(v)
    mismatches: list[str] = []
    checked = 0
    for axis, vals in sorted(values.items()):
        for atom in _atoms(axis, vals):
            cond = parse(atom_text(atom))  # every atom's text is a condition of the language
            for c in cases:
                if axis not in space[c.id]:
                    continue
                want, got = atom.holds(space[c.id][axis]), cond.evaluate(props[c.id])
                checked += 1
                if got is not want:
                    mismatches.append(f"{atom.text!r} on {c.id}: the space says {want}, the language {got}")
    assert not mismatches, "\n".join(mismatches[:20])
    assert len(values) > 150 and checked > 10000  # the run is as varied as it says


def test_every_quantity_of_the_space_has_the_languages_value() -> None:
    cases = _cases()
    space, props = _space(cases)
    for c in cases:
        for axis, v in space[c.id].items():
            if "~" in axis or isinstance(v, bool) or (isinstance(v, str) and not axis.startswith("attr.")):
                continue  # relations, classes and categories: their atoms above
            cond = parse(f"{expression(axis)} == {literal(axis, v)}")
            assert cond.evaluate(props[c.id]) is True, (c.id, axis, v, str(cond))


@pytest.mark.parametrize(
    "truth",
    [
        "x.shape[0] * x.shape[-1] > 100",
        "x.dtype == bfloat16 and x.rank == 3",
        "attr.groups == 2",
        "x.memory_format == channels_last",
        "attr.bias.none",
        "x.shape != w.shape",
        "attr.reduction == 'sum'",
        "x.values.sumsq[-1] > float16.max",
        "x.sign == nonpositive",
        "x.shape[-1] // attr.groups > 4",
    ],
)
def test_the_hypotheses_the_space_finds_read_the_same_in_the_language(truth: str) -> None:
    """A run split by a hidden condition: every hypothesis the space enumerates, parsed back, holds exactly on
    the cases the space says it holds on."""
    cases = _cases()
    space, props = _space(cases)
    hidden = parse(truth)
    failing = [c.id for c in cases if hidden.evaluate(props[c.id])]
    passing = [c.id for c in cases if hidden.evaluate(props[c.id]) is False]
    hyps = enumerate_hypotheses(space, failing, passing).hypotheses
    assert hyps, truth
    for h in hyps:
        cond = parse(h.text)
        for cid in failing + passing:
            assert cond.evaluate(props[cid]) in (h.holds(space[cid]), None), (h.text, cid)
            if all(a.axis in space[cid] for a in h.atoms):
                assert cond.evaluate(props[cid]) is h.holds(space[cid]), (h.text, cid)


# --------------------------------------------------------------------------
# The grammar (tools/conditions/grammar.py)
# --------------------------------------------------------------------------


def test_the_productions_are_simplest_first_within_each_space_and_the_spaces_in_widen_order() -> None:
    from tools.conditions.grammar import PRODUCTIONS, SPACES

    order = [(SPACES.index(p.space), p.cost) for p in PRODUCTIONS]
    assert order == sorted(order)
    assert {p.space for p in PRODUCTIONS} == set(SPACES)


def test_every_production_a_condition_names_by_itself_is_a_property_of_the_language() -> None:
    """One place: what a production derives is in the space and in what the language reads, same value."""
    from tools.conditions.grammar import named

    for c in _cases():
        props = case_properties(c)
        derived = named(c)
        assert derived and {k: props.get(k) for k in derived} == derived, c.id


def test_the_grammar_says_what_its_bounds_leave_out() -> None:
    from tools.conditions.grammar import cuts

    small = _cases()[:5]
    assert cuts(small) == []
    wide = _case(200, [{"name": n, "shape": [2] * 7} for n in ("a", "b", "c", "d", "e")],
                 {k: 2 for k in "pqrst"})
    said = cuts([*small, wide])
    assert said == sorted([
        "relations of sizes only up to rank 6", "relations of the first 4 tensor inputs only",
        "products and ratios of the first 2 inputs only", "products and ratios of the last 4 dimensions only",
        "ratios over the first 4 integer attributes only"]), said


def test_the_analysis_says_when_the_grammar_left_something_out() -> None:
    """A rank-7 input: its sizes' relations are out of the grammar's bounds, and the analysis' cap note says so."""
    from tools.analysis.build import diagnose_run

    cases = [_case(i, [{"name": "x", "shape": [2, 2, 2, 2, 2, 2, n]}]) for i, n in enumerate((4, 8, 16, 32))]
    results = {c.id: CaseResult.model_validate(
        {"case_id": c.id, "status": "numerical_mismatch" if c.inputs[0].shape[-1] > 8 else "passed",
         "comparisons": [{"output": "out", "passed": c.inputs[0].shape[-1] <= 8, "max_abs": 1.0}]})
        for c in cases}
    space = diagnose_run(cases, results, []).space
    assert space is not None and "the grammar left out: " in space.cap, space
    assert "relations of sizes only up to rank 6" in space.cap
    small = [_case(i, [{"name": "x", "shape": [2, n]}]) for i, n in enumerate((4, 8, 16, 32))]
    results = {c.id: r.model_copy(update={"case_id": c.id}) for c, r in zip(small, results.values())}
    space = diagnose_run(small, results, []).space
    assert space is not None and "the grammar left out" not in space.cap
