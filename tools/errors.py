"""The one exception type tools raise for input the caller can fix."""

from __future__ import annotations

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
    def from_validation(cls, exc: ValidationError, what: str) -> "ToolError":
        return cls(f"invalid {what}: " + format_validation_error(exc), code="validation_error")

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"
