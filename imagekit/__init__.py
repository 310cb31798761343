"""imagekit: build, audit, mirror and record the container images that serve large models.

The public face: the names imported in ``imagekit/__init__.pyi``, the one list of them. Type
checkers read that stub; at import this module reads it too (a few dozen lines, parsed with
``ast``) and hands each name out on first use (PEP 562), so that ``import imagekit`` (and so
the CLI's start-up) loads no stage. ``__all__`` is the stub's names, sorted
them (by code point). docs/API.md shows each with an example; everything else under ``imagekit.`` is
internal and may move.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Any

from imagekit.version import __version__ as __version__


def _face() -> dict[str, tuple[str, str]]:
    """Public name -> (module, its name there), read from the stub beside this file."""
    tree = ast.parse(Path(__file__).with_suffix(".pyi").read_text())
    where: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                where[alias.asname or alias.name] = (node.module, alias.name)
    return where


_WHERE = _face()
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'imagekit' has no attribute {name!r}")
    value = getattr(importlib.import_module(where[0]), where[1])
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
