"""Published JSON schemas, as small as they can be without accepting anything
more: what an agent pays for on every ``tools/list``.

- ``title`` keywords go (pydantic derives them from the field names);
- an optional field's ``anyOf: [{type: T, ...}, {type: null}]`` becomes
  ``type: [T, "null"]`` with the same type-specific keywords (``minimum``,
  ``pattern``, ``items``, ``properties``... apply only to values of their own
  type, so the set of accepted values is unchanged); beside a branch with
  ``enum``, ``const``, ``$ref`` or a combinator, the type-specific branches
  still become one (``anyOf: [{type: [boolean, number]}, {$ref: X}]``);
  ``integer`` beside ``number`` goes (every integer is a number);
- ``default`` goes: the server applies defaults (an omitted field is not
  required); the documented input schema (``defaults=True``,
  ``opdebug://schemas/{tool}/input``) and SKILL.md list them;
- ``additionalProperties: true`` and ``items: {}`` go (they say what an
  absent keyword says), and so does the ``type`` of an ``enum``/``const``
  whose values all have that type;
- ``anyOf`` of enums (and null) becomes one ``enum``;
- a ``$defs`` entry referenced once is written where it is referenced;
- a subschema written out more than once is written once under ``$defs`` and
  referenced, while that makes the schema shorter (the biggest saving first; a
  description stays beside the ``$ref``, in its property);
- tools/list keeps the descriptions of the top-level arguments only
  (``nested_descriptions=False``), and not those marked ``x-documented-only``
  (a run_id, a bounded budget: the name says enough there); every field's
  description is in the documented input schema, which keeps the models under
  their own names;
- ``output=True`` also drops ``description`` and ``default``; the output
  schema resource (``opdebug://schemas/{tool}``) keeps every field's
  description (what an agent reads in a structured answer), and
  :func:`shallow_output_schema` keeps their top level only (field names,
  types, enums; not closed): every answer still validates against it.

A map whose keys are constrained (``patternProperties``) is closed to other
keys, as the server is.  ``additionalProperties: false``, ``type``,
``required``, patterns, bounds and enums are all kept: the compacted schema
accepts exactly what the original accepts (tests/test_compact_schema.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tools.schemas.base import DOCUMENTED_ONLY_KEY

# Keywords whose meaning does not depend on the instance's type: a branch that
# has one cannot be merged with {"type": "null"}.
_NOT_TYPE_SPECIFIC = {"enum", "const", "$ref", "anyOf", "oneOf", "allOf", "not", "if", "then", "else"}


def compact_schema(
    schema: Any, *, output: bool = False, nested_descriptions: bool = True, defaults: bool = False, share: bool = True
) -> Any:
    """``nested_descriptions=False``: only the top-level properties keep their
    description (what tools/list carries; the rest is in the documented schema).
    ``defaults=True``: keep each ``default``; ``share=False``: the models stay
    under their own names in ``$defs`` (the documented input schema)."""
    if not nested_descriptions and isinstance(schema, dict):
        schema = _top_descriptions_only(schema)
    schema = _compact(schema, output=output, in_map=False, defaults=defaults)
    if not share:
        return schema
    if isinstance(schema, dict) and schema.get("$defs"):
        # a model used once is written where it is used (then `anyOf: [object, null]` can merge)
        schema = _compact(_inline_single_use(schema), output=output, in_map=False, defaults=defaults)
    return _inline_single_use(_share_repeats(schema))


def _top_descriptions_only(schema: dict[str, Any]) -> dict[str, Any]:
    def strip(node: Any, in_map: bool = False) -> Any:
        if isinstance(node, list):
            return [strip(v) for v in node]
        if not isinstance(node, dict):
            return node
        if in_map:
            return {k: strip(v) for k, v in node.items()}
        return {k: strip(v, k in _MAP_KEYS) for k, v in node.items() if k != "description"}

    out = strip(schema)
    for name, prop in (schema.get("properties") or {}).items():
        if isinstance(prop, dict) and "description" in prop and not prop.get(DOCUMENTED_ONLY):
            out["properties"][name] = {**out["properties"][name], "description": prop["description"]}
    return out


# A property marked so keeps its description in the documented input schema only: its
# name says enough in tools/list (run_id, case_id, host, a bounded budget).
DOCUMENTED_ONLY = DOCUMENTED_ONLY_KEY


_MAP_KEYS = ("properties", "$defs", "patternProperties")


def _text(node: Any) -> str:
    return json.dumps(node, sort_keys=True, separators=(",", ":"))


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/$defs/{name}"}


def _map(node: dict[str, Any], fn: Any) -> dict[str, Any]:
    """Apply ``fn(child, in_map)`` to each child of a subschema."""
    return {k: fn(v, k in _MAP_KEYS) for k, v in node.items()}


def _subschemas(node: Any, in_map: bool = False) -> Any:
    """Every subschema (not the name -> schema maps themselves), depth first."""
    if isinstance(node, list):
        for v in node:
            yield from _subschemas(v)
    elif isinstance(node, dict):
        if in_map:
            for v in node.values():
                yield from _subschemas(v)
            return
        yield node
        for k, v in node.items():
            yield from _subschemas(v, k in _MAP_KEYS)


def _rewrite(node: Any, fn: Any, in_map: bool = False) -> Any:
    """``node`` with every subschema ``s`` replaced by ``fn(s)`` (None: keep it, look inside)."""
    if isinstance(node, list):
        return [_rewrite(v, fn) for v in node]
    if not isinstance(node, dict):
        return node
    if in_map:
        return {k: _rewrite(v, fn) for k, v in node.items()}
    replaced = fn(node)
    if replaced is not None:
        return replaced
    return {k: _rewrite(v, fn, k in _MAP_KEYS) for k, v in node.items()}


def _texts(node: Any, seen: dict[int, tuple[str, str]], in_map: bool = False) -> str:
    """``node``'s canonical JSON (as :func:`_text` writes it), built from its
    children's; each subschema's text, and its text without its description,
    go into ``seen`` by ``id`` (one pass over the schema, not one per node)."""
    if isinstance(node, list):
        return "[" + ",".join(_texts(v, seen) for v in node) + "]"
    if not isinstance(node, dict):
        return json.dumps(node, separators=(",", ":"))
    parts = {k: _texts(node[k], seen, k in _MAP_KEYS and not in_map) for k in sorted(node)}
    text = "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in parts.items()) + "}"
    if not in_map:
        bare = (
            text
            if "description" not in node
            else "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in parts.items() if k != "description") + "}"
        )
        seen[id(node)] = (text, bare)
    return text


def _swapper(seen: dict[int, tuple[str, str]], node_text: str, name: str) -> Callable[[dict[str, Any]], Any]:
    """The rewrite that puts a $ref to ``name`` where a node reads ``node_text``
    (as it is, or without its description, which then stays beside the $ref)."""

    def swap(node: dict[str, Any]) -> Any:
        text, bare = seen[id(node)]
        if text == node_text:
            return _ref(name)
        if bare == node_text:
            return {**_ref(name), "description": node["description"]}
        return None

    return swap


def _share_repeats(schema: Any) -> Any:
    """Move subschemas written out more than once to $defs, while that makes the
    schema shorter: the biggest saving first, counted again after each move."""
    if not isinstance(schema, dict):
        return schema
    body = {k: v for k, v in schema.items() if k != "$defs"}
    defs = dict(schema.get("$defs") or {})
    while True:
        seen: dict[int, tuple[str, str]] = {}
        counts: dict[str, int] = {}
        for root in (body, *defs.values()):
            _texts(root, seen)
            for node in _subschemas(root):
                if node is root and root is not body:
                    continue  # a def's own body is already shared
                # a described node is counted as it is and without its description (that
                # stays beside the $ref, in its property): the bigger saving wins
                for text in set(seen[id(node)]):
                    counts[text] = counts.get(text, 0) + 1
        name = next(f"S{i}" for i in range(len(defs) + 1) if f"S{i}" not in defs)
        cost = len(_text(_ref(name)))
        best, saving = None, 0
        for text, n in counts.items():
            gain = (n - 1) * len(text) - n * cost - len(name) - 4  # "name": and a comma
            if n > 1 and gain > saving:
                best, saving = text, gain
        if best is None:
            break
        swap = _swapper(seen, best, name)
        body = _rewrite(body, swap)
        defs = {
            k: (_map(v, lambda c, m, swap=swap: _rewrite(c, swap, m)) if isinstance(v, dict) else v)
            for k, v in defs.items()
        }
        defs[name] = json.loads(best)
    if defs:
        body["$defs"] = defs
    return body


def _undescribed(node: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in node.items() if k != "description"} if "description" in node else node


def _placer(target: str, body: dict[str, Any], placed: list[bool]) -> Callable[[dict[str, Any]], Any]:
    """The rewrite that writes ``body`` where a node is a $ref to ``target``; each
    placement appends to ``placed``."""

    def put(node: dict[str, Any]) -> Any:
        if node.get("$ref") != target:
            return None
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        if set(siblings) - {"description"} & set(body):
            return None  # a keyword beside the $ref that the body also has: keep the $ref
        placed.append(True)
        return {**body, **siblings}

    return put


def _inline_single_use(schema: dict[str, Any]) -> dict[str, Any]:
    """Write a $defs entry referenced once (and not from inside itself) where it is
    referenced; drop entries referenced nowhere."""
    schema = dict(schema)
    kept: set[str] = set()  # referenced once, from a node that cannot take the body
    while schema.get("$defs"):
        defs = schema["$defs"]
        refs: dict[str, int] = {name: 0 for name in defs}
        for node in _subschemas({k: v for k, v in schema.items() if k != "$defs"}):
            _count_ref(node, refs)
        inside: dict[str, set[str]] = {}
        for name, d in defs.items():
            for node in _subschemas(d):
                _count_ref(node, refs)
                if isinstance(node.get("$ref"), str):
                    inside.setdefault(name, set()).add(node["$ref"].rsplit("/", 1)[-1])
        unused = [n for n, c in refs.items() if c == 0]
        if unused:
            schema["$defs"] = {n: d for n, d in defs.items() if n not in unused}
            continue
        once = next((n for n, c in refs.items() if c == 1 and n not in inside.get(n, ()) and n not in kept), None)
        if once is None:
            break
        placed: list[bool] = []
        put = _placer(f"#/$defs/{once}", defs[once], placed)
        new_rest = _rewrite({k: v for k, v in schema.items() if k != "$defs"}, put)
        new_defs = {n: _rewrite(d, put) for n, d in defs.items() if n != once}
        if not placed:
            kept.add(once)
            continue
        schema = {**new_rest, "$defs": new_defs} if new_defs else new_rest
    if "$defs" in schema and not schema["$defs"]:
        del schema["$defs"]
    return schema


def _count_ref(node: dict[str, Any], refs: dict[str, int]) -> None:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        name = ref.rsplit("/", 1)[-1]
        if name in refs:
            refs[name] += 1


def _compact(node: Any, *, output: bool, in_map: bool, defaults: bool = False) -> Any:
    if isinstance(node, list):
        return [_compact(v, output=output, in_map=False, defaults=defaults) for v in node]
    if not isinstance(node, dict):
        return node
    if in_map:  # a mapping of names to schemas ("properties", "$defs"): every key is a name
        return {k: _compact(v, output=output, in_map=False, defaults=defaults) for k, v in node.items()}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" or key == DOCUMENTED_ONLY or (output and key in ("description", "default", "examples")):
            continue
        if key == "description" and isinstance(value, str):
            value = " ".join(value.split())  # a docstring's line breaks and indentation
        if (key == "additionalProperties" and value is True) or (key == "items" and value == {}):
            continue  # both say what an absent keyword says
        if key == "default" and not defaults:
            continue  # the server applies defaults; the documented schema and SKILL.md list them
        if key == "default":  # a value, not a schema
            out[key] = value
            continue
        out[key] = _compact(value, output=output, in_map=key in _MAP_KEYS, defaults=defaults)
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


def _mergeable(branch: Any) -> bool:
    """A branch that allows one JSON type, with keywords that apply to that type only."""
    return isinstance(branch, dict) and isinstance(branch.get("type"), str) and not _NOT_TYPE_SPECIFIC & set(branch)


def _merge_branches(branches: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Type-specific branches as one ``type`` list with their keywords side by
    side; None when a type or a keyword is in two branches, or when numeric
    keywords would also reach a second numeric type."""
    types: list[str] = []
    merged: dict[str, Any] = {}
    for b in branches:
        if b["type"] in types:
            return None
        types.append(b["type"])
        for k, v in b.items():
            if k == "type":
                continue
            if k in merged:
                return None
            merged[k] = v
    if _NUMERIC_KEYWORDS & set(merged) and {"integer", "number"} <= set(types):
        return None
    merged["type"] = _drop_integer(types)
    return merged


def _drop_integer(types: list[str]) -> list[str] | str:
    """``integer`` beside ``number`` says nothing more (every integer is a number)."""
    if "integer" in types and "number" in types:
        types = [t for t in types if t != "integer"]
    return types[0] if len(types) == 1 else types


def _merge_nullable(node: dict[str, Any]) -> dict[str, Any]:
    """``anyOf`` of branches that each allow one JSON type, with keywords that
    apply to that type only, as one ``type`` list with the keywords side by
    side: ``anyOf: [{type: string, maxLength: 5}, {type: null}]`` is
    ``type: [string, null], maxLength: 5``.  When other branches (enum, const,
    $ref, a combinator) are there too, the type-specific ones still become one
    branch beside them: ``anyOf: [{type: boolean}, {type: number}, {$ref: X}]``
    is ``anyOf: [{type: [boolean, number]}, {$ref: X}]``.  Left alone when a
    keyword is in two branches, or when numeric keywords would also reach a
    second numeric type."""
    if isinstance(node.get("type"), list):
        node = {**node, "type": _drop_integer(list(node["type"]))}
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
    typed = [b for b in branches if _mergeable(b)]
    merged = _merge_branches(typed) if len(typed) > 1 or len(typed) == len(branches) else None
    if merged is None:
        return node
    if len(typed) < len(branches):  # the merged branch beside the others, where the first typed one was
        first = branches.index(typed[0])
        rest = [b for b in branches if not any(b is t for t in typed)]
        return {**node, "anyOf": rest[:first] + [merged] + rest[first:]}
    if set(merged) & (set(node) - {"anyOf"}):  # a clash of keywords with the wrapper: leave it
        return node
    out = {k: v for k, v in node.items() if k != "anyOf"}
    out.update(merged)
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
        return {k: node[k] for k in ("type", "enum", "const") if k in node}

    out = {k: schema[k] for k in ("type",) if k in schema}
    out["properties"] = {name: top(sub) for name, sub in (schema.get("properties") or {}).items()}
    return out
