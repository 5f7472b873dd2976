"""Published JSON schemas, as small as they can be without accepting anything
more: what an agent pays for on every ``tools/list``.

- ``title`` keywords go (pydantic derives them from the field names);
- an optional field's ``anyOf: [{type: T, ...}, {type: null}]`` becomes
  ``type: [T, "null"]`` with the same type-specific keywords (``minimum``,
  ``pattern``, ``items``, ``properties``... apply only to values of their own
  type, so the set of accepted values is unchanged); a branch with ``enum``,
  ``const``, ``$ref`` or a combinator stays as it is;
- ``default`` goes: the server applies defaults (an omitted field is not
  required), and SKILL.md lists the ones that matter;
- ``additionalProperties: true`` and ``items: {}`` go (they say what an
  absent keyword says), and so does the ``type`` of an ``enum``/``const``
  whose values all have that type;
- ``anyOf`` of enums (and null) becomes one ``enum``;
- a subschema written out more than once (e.g. the scalar union of four
  comparison fields) is written once under ``$defs`` and referenced;
- output schemas also lose ``description`` and ``default`` (they describe
  what the server sends; SKILL.md and references/ explain the fields), and
  :func:`shallow_output_schema` keeps their top level only (field names,
  types, enums; not closed): every answer still validates against it, and the
  full schema is a resource (``opdebug://schemas/{tool}``).

A map whose keys are constrained (``patternProperties``) is closed to other
keys, as the server is.  ``additionalProperties: false``, ``required``, patterns, bounds and enums are
all kept: the compacted schema accepts exactly what the original accepts.
"""

from __future__ import annotations

import json
from typing import Any

# Keywords whose meaning does not depend on the instance's type: a branch that
# has one cannot be merged with {"type": "null"}.
_NOT_TYPE_SPECIFIC = {"enum", "const", "$ref", "anyOf", "oneOf", "allOf", "not", "if", "then", "else"}


def compact_schema(schema: Any, *, output: bool = False) -> Any:
    return _share_repeats(_compact(schema, output=output, in_map=False))


_MIN_SHARED_CHARS = 28


def _share_repeats(schema: Any) -> Any:
    """Move subschemas that occur more than once (and are not tiny) to $defs."""
    if not isinstance(schema, dict):
        return schema
    counts: dict[str, int] = {}

    def count(node: Any, in_map: bool) -> None:
        if isinstance(node, list):
            for v in node:
                count(v, False)
        elif isinstance(node, dict):
            if not in_map:
                text = json.dumps(node, sort_keys=True, separators=(",", ":"))
                # a node with a description stays where it is read (its property)
                if len(text) >= _MIN_SHARED_CHARS and "$ref" not in node and "description" not in node:
                    counts[text] = counts.get(text, 0) + 1
            for k, v in node.items():
                count(v, k in ("properties", "$defs", "patternProperties") and not in_map)

    for k, v in schema.items():
        if k != "$defs":
            count(v, k in ("properties", "patternProperties"))
    for v in (schema.get("$defs") or {}).values():
        for k, sub in v.items():
            count(sub, k in ("properties", "patternProperties"))
    shared = {text: f"S{i}" for i, text in enumerate(t for t, n in counts.items() if n > 1)}
    if not shared:
        return schema

    def replace(node: Any, in_map: bool) -> Any:
        if isinstance(node, list):
            return [replace(v, False) for v in node]
        if not isinstance(node, dict):
            return node
        if not in_map:
            name = shared.get(json.dumps(node, sort_keys=True, separators=(",", ":")))
            if name is not None:
                return {"$ref": f"#/$defs/{name}"}
        return {k: replace(v, k in ("properties", "$defs", "patternProperties") and not in_map)
                for k, v in node.items()}

    out = {k: (v if k == "$defs" else replace(v, k in ("properties", "patternProperties")))
           for k, v in schema.items()}
    defs = {name: {k: replace(v, k in ("properties", "patternProperties")) for k, v in d.items()}
            for name, d in (schema.get("$defs") or {}).items()}
    # a shared subschema may contain another one: replace inside, but never itself
    for text, name in shared.items():
        node = json.loads(text)
        defs[name] = {k: replace(v, k in ("properties", "patternProperties")) for k, v in node.items()}
    out["$defs"] = defs
    return out


def _compact(node: Any, *, output: bool, in_map: bool) -> Any:
    if isinstance(node, list):
        return [_compact(v, output=output, in_map=False) for v in node]
    if not isinstance(node, dict):
        return node
    if in_map:  # a mapping of names to schemas ("properties", "$defs"): every key is a name
        return {k: _compact(v, output=output, in_map=False) for k, v in node.items()}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" or (output and key in ("description", "default", "examples")):
            continue
        if key == "description" and isinstance(value, str):
            value = " ".join(value.split())  # a docstring's line breaks and indentation
        if (key == "additionalProperties" and value is True) or (key == "items" and value == {}):
            continue  # both say what an absent keyword says
        if key == "default":
            continue  # the server applies defaults; SKILL.md lists them once
        out[key] = _compact(value, output=output, in_map=key in ("properties", "$defs", "patternProperties"))
    if ("enum" in out or "const" in out) and "type" in out and _values_have_type(out):
        del out["type"]  # the listed values already say it
    if "patternProperties" in out and "additionalProperties" not in out and "properties" not in out:
        # pydantic's dict with constrained keys: the server refuses any other key, and so does the schema
        out["additionalProperties"] = False
    return _merge_nullable(out)


_NUMERIC_KEYWORDS = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}


def _json_type(value: Any) -> set[str]:
    if value is None:
        return {"null"}
    if isinstance(value, bool):
        return {"boolean"}
    if isinstance(value, int):
        return {"integer", "number"}
    if isinstance(value, float):
        return {"number", "integer"} if value.is_integer() else {"number"}
    if isinstance(value, str):
        return {"string"}
    if isinstance(value, list):
        return {"array"}
    return {"object"}


def _values_have_type(node: dict[str, Any]) -> bool:
    """Every enum/const value is of a type the node's ``type`` allows (so ``type`` adds nothing)."""
    allowed = set(node["type"]) if isinstance(node["type"], list) else {node["type"]}
    values = node["enum"] if "enum" in node else [node["const"]]
    return isinstance(values, list) and all(_json_type(v) & allowed for v in values)


def _merge_nullable(node: dict[str, Any]) -> dict[str, Any]:
    """``anyOf`` of branches that each allow one JSON type, with keywords that
    apply to that type only, as one ``type`` list with the keywords side by
    side: ``anyOf: [{type: string, maxLength: 5}, {type: null}]`` is
    ``type: [string, null], maxLength: 5``.  Left alone when a keyword is in
    two branches, when numeric keywords would also reach a second numeric
    type, or when a branch has enum/const/$ref/a combinator."""
    branches = node.get("anyOf")
    if not isinstance(branches, list) or len(branches) < 2 or not all(isinstance(b, dict) for b in branches):
        return node
    if all(set(b) <= {"enum", "const"} or b == {"type": "null"} for b in branches) and "enum" not in node:
        values: list[Any] = []  # enums (and null) side by side: one enum
        for b in branches:
            for v in b.get("enum", [b["const"]] if "const" in b else [None]):
                if v not in values:
                    values.append(v)
        return {**{k: v for k, v in node.items() if k != "anyOf"}, "enum": values}
    types: list[str] = []
    merged: dict[str, Any] = {}
    for b in branches:
        t = b.get("type")
        if not isinstance(t, str) or t in types or _NOT_TYPE_SPECIFIC & set(b):
            return node
        types.append(t)
        for k, v in b.items():
            if k == "type":
                continue
            if k in merged:
                return node
            merged[k] = v
    if _NUMERIC_KEYWORDS & set(merged) and {"integer", "number"} <= set(types):
        return node
    if set(merged) & (set(node) - {"anyOf"}):  # a clash of keywords with the wrapper: leave it
        return node
    out = {k: v for k, v in node.items() if k != "anyOf"}
    out.update(merged)
    out["type"] = types
    return out


def shallow_output_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The top level of an output schema: each property's JSON type (and enum or
    const), nested objects and arrays as their bare type (``required``, closure
    and the nested contracts are in the full schema)."""
    defs = schema.get("$defs") or {}

    def top(node: dict[str, Any]) -> dict[str, Any]:
        if "$ref" in node:
            node = defs.get(node["$ref"].rsplit("/", 1)[-1], {})
        if "anyOf" in node:
            types: list[str] = []
            for branch in node["anyOf"]:
                t = top(branch).get("type")
                for one in t if isinstance(t, list) else [t]:
                    if one and one not in types:
                        types.append(one)
            return {"type": types} if types else {}
        out = {k: node[k] for k in ("type", "enum", "const") if k in node}
        return out

    out = {k: schema[k] for k in ("type",) if k in schema}
    out["properties"] = {name: top(sub) for name, sub in (schema.get("properties") or {}).items()}
    return out
