"""mcp_server/compact.py: the schema tools/list publishes accepts exactly what
pydantic's own schema of the same model accepts, over a corpus of valid
requests and of mutations of each of their values (a wrong type, a bound, an
unknown key), and it is smaller."""

from __future__ import annotations

import copy
import json
from typing import Any, Iterator

import jsonschema
import pytest

from conftest import minimal_plan_request, mismatch_result, passed_result
from mcp_server.compact import compact_schema
from tools.schemas import RecordResultArgs, RunCaseRemoteArgs
from tools.schemas import PlanRequest

# what a mutation puts in place of a value: each is the wrong type or out of bounds somewhere
REPLACEMENTS: list[Any] = ["4", "bfloat16", "", 4, 4.5, -1, 0, True, None, [], [1, "a"], {}, {"kind": "dtype"},
                           {"kind": "dtype", "value": "int8"}, "nan"]


def _paths(doc: Any, path: tuple = ()) -> Iterator[tuple]:
    yield path
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, path + (i,))


def _set(doc: Any, path: tuple, value: Any) -> Any:
    out = copy.deepcopy(doc)
    if not path:
        return value
    node = out
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    return out


def _mutations(doc: dict) -> Iterator[Any]:
    for path in _paths(doc):
        for value in REPLACEMENTS:
            yield _set(doc, path, value)
        target = doc
        for p in path:
            target = target[p]
        if isinstance(target, dict):
            yield _set(doc, path, {**target, "unknown_key": 1})


def _star_request() -> dict:
    req = minimal_plan_request("star", ("a",))
    base = req.pop("cases")[0]
    base["inputs"][0]["values"] = {"kind": "uniform", "low": -1, "high": 1,
                                   "specials": [{"value": "nan", "positions": [[0, 1]]}],
                                   "by_dtype": {"float16": {"kind": "zeros"}}}
    base["inputs"][1]["strides"] = [1, 4]
    base["attributes"]["dtype"] = {"kind": "dtype", "value": "bfloat16"}
    req["stars"] = [{"base": base, "vary": [{"axis": "dtype", "values": ["float16", "bfloat16"]},
                                            {"axis": "shape", "input": "x", "values": [[2, 8], None]},
                                            {"axis": "values", "values": [{"kind": "ones"}]}]}]
    req["config"]["tolerance"] = {"atol": 1e-5, "per_dtype": {"bfloat16": {"atol": 0.01, "rtol": 0.01}}}
    req["captured_files"] = {"cap-1": "/tmp/x.pt"}
    return req


CORPUS = [
    (PlanRequest, minimal_plan_request("plain", ("a", "b"))),
    (PlanRequest, _star_request()),
    (RecordResultArgs, {"run_id": "r", "result": mismatch_result("a")}),
    (RecordResultArgs, {"run_id": "r", "result": {**passed_result("a"), "source": {"host": "h"},
                                                  "recorded_at": "2026-11-30T00:00:00Z"}}),
    (RecordResultArgs, {"run_id": "r", "result": {"case_id": "c", "status": "crash",
                                                  "error": {"type": "E", "message": "m", "signature": "s"}}}),
    (RunCaseRemoteArgs, {"run_id": "r", "case_ids": ["a"], "hosts": ["local"], "keep_outputs": True}),
]


@pytest.mark.parametrize("model,doc", CORPUS, ids=lambda v: getattr(v, "__name__", ""))
def test_the_compact_schema_accepts_exactly_what_the_model_schema_accepts(model: Any, doc: dict) -> None:
    full = model.model_json_schema()
    compact = compact_schema(full, nested_descriptions=False)
    documented = compact_schema(full, defaults=True, share=False)
    assert len(json.dumps(compact)) < len(json.dumps(full))
    validators = [jsonschema.Draft202012Validator(s) for s in (full, compact, documented)]
    for v in validators:
        v.check_schema(v.schema)
    assert all(v.is_valid(doc) for v in validators)
    checked = rejected = 0
    for mutated in _mutations(doc):
        verdicts = [v.is_valid(mutated) for v in validators]
        assert verdicts[1:] == verdicts[:1] * 2, (verdicts, json.dumps(mutated)[:300])
        checked += 1
        rejected += not verdicts[0]
    assert rejected > checked // 2  # most mutations are refused: the corpus exercises the contract


def test_the_rewrites_keep_their_meaning_on_small_schemas() -> None:
    # type-only branches become one type list; integer beside number says nothing more
    schema = {"anyOf": [{"type": "number"}, {"type": "integer"}, {"type": "boolean"}, {"enum": ["nan", "inf"]},
                        {"type": "null"}]}
    assert compact_schema(schema) == {"anyOf": [{"type": ["number", "boolean", "null"]}, {"enum": ["nan", "inf"]}]}
    # numeric bounds of one branch must not reach the other numeric type: left alone
    bounded = {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "number"}]}
    assert compact_schema(bounded) == bounded
    # a subschema written out three times goes to $defs once, a description stays beside its $ref
    slug = {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$"}
    schema = {"type": "object", "properties": {"a": {**slug, "description": "A."}, "b": slug,
                                               "c": {"type": "array", "items": slug}}}
    out = compact_schema(schema)
    assert out["$defs"] == {"S0": slug}
    assert out["properties"]["a"] == {"$ref": "#/$defs/S0", "description": "A."}
    assert out["properties"]["b"] == {"$ref": "#/$defs/S0"}
    # a $defs entry used once is written in place; a recursive one stays
    schema = {"type": "object", "properties": {"one": {"$ref": "#/$defs/One"}, "tree": {"$ref": "#/$defs/Tree"}},
              "$defs": {"One": {"type": "object", "properties": {"x": {"type": "integer"}},
                                "additionalProperties": False},
                        "Tree": {"type": "object", "properties": {"kids": {"type": "array",
                                                                           "items": {"$ref": "#/$defs/Tree"}}}}}}
    out = compact_schema(schema)
    assert out["properties"]["one"] == schema["$defs"]["One"]
    assert set(out["$defs"]) == {"Tree"}
    # only the top-level properties keep their description when asked
    described = {"type": "object", "properties": {"a": {"type": "object", "description": "top",
                                                         "properties": {"b": {"type": "integer",
                                                                              "description": "nested"}}}}}
    assert compact_schema(described, nested_descriptions=False)["properties"]["a"] == {
        "type": "object", "description": "top", "properties": {"b": {"type": "integer"}}}
