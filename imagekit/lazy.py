"""A package's public face, handed out lazily from the one list of its names.

A package whose ``__init__.pyi`` lists its public names (``from M import N as N``, one a line)
hands each out on first use (PEP 562) instead of importing every module behind them when it
is imported. Type checkers read the stub; at import, the package reads it too (a few dozen
lines, parsed with ``ast``). So the list is written once, and importing one small module of
the package (``imagekit.registry.tls``, the manifest models) does not load the rest of it
(the registry's HTTP client, httpx): each command loads only what it runs.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any


def lazy_face(
    namespace: dict[str, Any],
) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """For the package whose module globals are NAMESPACE: its ``__all__`` (the stub's names,
    sorted by code point), its module ``__getattr__``, which imports a name's module on first
    use and keeps the value as a plain attribute for the next lookup, and its ``__dir__``."""
    stub = Path(namespace["__file__"]).with_suffix(".pyi")
    where: dict[str, tuple[str, str]] = {}
    for node in ast.parse(stub.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                where[alias.asname or alias.name] = (node.module, alias.name)
    package = namespace["__name__"]

    def attribute(name: str) -> Any:
        found = where.get(name)
        if found is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(found[0]), found[1])
        namespace[name] = value  # the next lookup is a plain attribute
        return value

    def listing() -> list[str]:
        return sorted({*namespace, *where})

    return sorted(where), attribute, listing
