"""The one exception type tools raise for input the caller can fix."""

from __future__ import annotations

import json

from pydantic import ValidationError

from .schemas import format_validation_error


class ToolError(Exception):
    """A refusal or failure the caller can act on (bad input, duplicate record,
    unknown case, harness or connection failure).  The MCP layer returns it as
    a tool error; the CLI prints it and exits non-zero."""

    def __init__(self, message: str, *, code: str = "invalid_request", details: dict | None = None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.details = details or {}

    @classmethod
    def from_validation(cls, exc: ValidationError, what: str) -> ToolError:
        return cls(f"invalid {what}: " + format_validation_error(exc), code="validation_error")

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"

    def details_line(self) -> str:
        """The details as one JSON line, ``{"details": {...}}`` ('' when there are none):
        appended to the error text by the MCP server and the CLI, so they reach the
        caller as structured data."""
        if not self.details:
            return ""
        return json.dumps({"details": self.details}, default=str, sort_keys=True)

    def with_details(self) -> str:
        """``str(self)``, then the details line when there are details."""
        line = self.details_line()
        return f"{self}\n{line}" if line else str(self)
