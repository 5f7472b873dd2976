"""How a tool is built and published: the argument model, the strict argument
check, errors as tool errors, the text summary beside the structured answer,
and the schemas a server publishes (tools/list carries the compacted input
schema; the documented input schema and the full output schema are resources).

One `ToolCatalog` per server instance holds what each of its tools publishes;
nothing is kept in module globals, so two servers built in one process (tests,
the benchmark) never see each other's tools.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from typing import Any, cast

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, UnexpectedToolError
from mcp.server.mcpserver.exceptions import ToolError as MCPToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ValidationError, create_model

from tools.errors import ToolError
from tools.schemas import format_validation_error

from .compact import compact_schema, shallow_output_schema

# tools/list carries the input schemas (strict, complete) but not the output schemas: with
# them it passed 15,000 characters as the tools grew. Each tool's full output schema is the
# resource opdebug://schemas/{tool}, and every answer is still validated against it here.
PUBLISH_OUTPUT_SCHEMAS = False


def arguments_model(name: str, request_model: type[BaseModel]) -> type[ArgModelBase]:
    """The request model as the SDK's argument model: same fields, same
    validators, unknown fields forbidden (the request models are Strict)."""
    model = create_model(f"{name}_arguments", __base__=(request_model, ArgModelBase))
    assert model.model_config.get("extra") == "forbid", f"{request_model.__name__} must forbid unknown fields"
    return cast(type[ArgModelBase], model)  # ArgModelBase is among its bases; create_model does not type that


class StrictTool(Tool):
    """A Tool whose argument errors read like every other error of the project:
    all of them at once, each with its field path."""

    @property
    def output_schema(self) -> dict[str, Any] | None:  # what tools/list publishes
        return self.fn_metadata.output_schema if PUBLISH_OUTPUT_SCHEMAS else None

    async def run(self, arguments: dict[str, Any], context: Any, convert_result: bool = False) -> Any:
        # Strict types, as the published schema says: "4" is not an integer, "1e-5" not a
        # number, "yes" or 1 not a boolean, and a list is not a JSON string of one.
        try:
            self.fn_metadata.arg_model.model_validate_json(json.dumps(arguments), strict=True)
        except ValidationError as exc:
            raise MCPToolError(
                f"Error executing tool {self.name}: [validation_error] invalid arguments: "
                + format_validation_error(exc)
            ) from exc
        except (TypeError, ValueError) as exc:
            raise MCPToolError(
                f"Error executing tool {self.name}: [validation_error] invalid arguments: not JSON: {exc}"
            ) from exc
        try:
            return await super().run(arguments, context, convert_result=convert_result)
        except MCPToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError) and not isinstance(exc, UnexpectedToolError):
                raise MCPToolError(
                    f"Error executing tool {self.name}: [validation_error] invalid arguments: "
                    + format_validation_error(cause)
                ) from cause
            raise


def as_tool_errors(name: str, body: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Turn every failure of a tool body into a message the agent can act on,
    and an answer into a short human summary (text) beside the data (structured)."""

    @functools.wraps(body)
    async def handler(ctx: Context, **fields: Any) -> Any:
        try:
            response = await body(ctx, **fields)
            if not isinstance(response, BaseModel):
                return response
            from tools.render.summary import summarize

            return CallToolResult(
                content=[TextContent(type="text", text=summarize(name, response))],
                structured_content=response.model_dump(mode="json", by_alias=True),
            )
        except MCPToolError:
            raise
        except ToolError as exc:  # its details follow as a JSON line: structured data for the agent
            raise MCPToolError(exc.with_details()) from exc
        except ValidationError as exc:
            raise MCPToolError(f"[validation_error] {format_validation_error(exc)}") from exc
        except Exception as exc:  # a bug or an environment failure: say what it was, keep serving
            raise MCPToolError(f"[internal_error] unexpected {type(exc).__name__}: {exc}") from exc

    return handler


class ToolCatalog:
    """The tools of one server and what each publishes.

    ``tool(...)`` builds a tool: its compacted input schema goes to tools/list;
    its documented input schema (every field's description and default) and its
    full output schema are kept here and served as the resources
    ``opdebug://schemas/{tool}/input`` and ``opdebug://schemas/{tool}``,
    compacted when first read (not at start-up)."""

    def __init__(self) -> None:
        self.documented_inputs: dict[str, dict[str, Any]] = {}
        self.full_outputs: dict[str, dict[str, Any]] = {}
        self._texts: dict[tuple[str, str], str] = {}

    def names(self) -> list[str]:
        return sorted(self.full_outputs)

    async def check_known(self, name: str) -> None:
        """An unknown tool name is refused with the list of the tools (the SDK's error names none)."""
        if name not in self.full_outputs:
            raise MCPToolError(f"[unknown_tool] no tool {name!r}; the tools: {', '.join(self.names())}")

    def tool(
        self,
        name: str,
        *,
        description: str,
        arguments: type[BaseModel],
        output: Any,
        annotations: ToolAnnotations,
        body: Callable[..., Awaitable[Any]],
        meta: dict[str, Any] | None = None,
    ) -> Tool:
        arg_model = arguments_model(name, arguments)
        metadata = FuncMetadata(arg_model=arg_model, output_model=output)
        input_schema = arg_model.model_json_schema(by_alias=True)
        self.documented_inputs[name] = input_schema
        if metadata.output_schema is not None:
            self.full_outputs[name] = metadata.output_schema
            metadata.output_schema = shallow_output_schema(metadata.output_schema)
        return StrictTool(
            fn=as_tool_errors(name, body),
            name=name,
            description=description,
            parameters=compact_schema(input_schema, nested_descriptions=False),
            fn_metadata=metadata,
            is_async=True,
            context_kwarg="ctx",
            annotations=annotations,
            meta=meta,  # tools/list's _meta, e.g. the MCP App view of the answer (ui.resourceUri)
        )

    def schema_text(self, kind: str, tool: str) -> str:
        """A tool's full output schema (``kind`` "output"), or its documented input
        schema ("input"), compacted when first read."""
        key = (kind, tool)
        if key not in self._texts:
            schemas = self.full_outputs if kind == "output" else self.documented_inputs
            if tool not in schemas:
                raise ResourceNotFoundError(f"no tool {tool!r}; tools: {sorted(schemas)}")
            if kind == "output":  # every field described: what the agent reads in the structured answer
                schema = compact_schema(schemas[tool], share=False)
            else:
                schema = compact_schema(schemas[tool], defaults=True, share=False)
            self._texts[key] = json.dumps(schema, separators=(",", ":"))
        return self._texts[key]
