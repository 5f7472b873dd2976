"""Which host kinds there are: a kind named NAME is the class ``HOST_KIND`` of ``tools/remote/NAME.py``.

A host kind is data, as a gateway spec is in pytest-xdist: the inventory names
it (``transport = "ssh"``, or ``scheduler = "slurm"`` in front of a login
host) and this module finds its class by that name, so adding a kind is one
new module and its inventory entry - no list to extend, no branch to add
(references/host-kinds.md): the kind's own inventory fields are its own model
(``HostKind.fields``).  A test may `register` a kind under a name of its
own.  This module imports no kind at load time (the kinds import the
inventory, which asks here for the fields and checks of an entry's kinds).
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_REGISTERED: dict[str, Any] = {}


class UnknownHostKind(ValueError):
    """No module of tools/remote defines a host kind of that name."""


def register(kind: Any) -> Any:
    """Make ``kind`` (a HostKind subclass) known under ``kind.name`` (a test's own kind)."""
    _REGISTERED[kind.name] = kind
    return kind


def host_kind(name: str) -> Any:
    """The HostKind class named ``name``: registered, else ``HOST_KIND`` of tools/remote/<name>.py."""
    if name in _REGISTERED:
        return _REGISTERED[name]
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise UnknownHostKind(f"{name!r} is not a host kind name (lower-case letters, digits, _)")
    source = Path(__file__).resolve().parent / f"{name}.py"
    # only a module that says it is a kind is imported: a name in the inventory never runs another module
    declared = source.is_file() and "\nHOST_KIND = " in source.read_text(encoding="utf-8")
    module = importlib.import_module(f"{__package__}.{name}") if declared else None
    kind = getattr(module, "HOST_KIND", None)
    if kind is None or getattr(kind, "name", None) != name:
        raise UnknownHostKind(
            f"no host kind {name!r}: tools/remote/{name}.py with HOST_KIND = a HostKind "
            f"named {name!r} (see references/host-kinds.md)"
        )
    return kind


def kind_of(host: Any) -> Any:
    """The kind that runs an inventory host's slots: its scheduler's, else its transport's."""
    return host_kind(host.scheduler or host.transport)
