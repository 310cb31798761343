"""YAML a user wrote, parsed strictly: one document, not nested past a bound, no key twice.

PyYAML's SafeLoader takes a mapping with the same key twice and keeps the last value (YAML
says a key is unique; PyYAML does not check), so a policy that says ``status`` twice is
silently half read. Its composer is recursive, so a list nested 100,000 deep is a
RecursionError (a crash, not a refusal). Bytes that are not UTF-8 (or UTF-16 with its byte
order mark, which YAML also allows) are a ReaderError here, never a UnicodeDecodeError.

Every refusal is a ``yaml.YAMLError`` with a mark, and :func:`describe` turns any of them
into one line ("line 4: the key 'status' appears twice (lines 3 and 4)") for the caller's
own error, which names the file.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node
from yaml.reader import ReaderError

#: Nesting deeper than this is refused: a plan or a policy is a few levels deep.
MAX_DEPTH = 64
_MERGE = "tag:yaml.org,2002:merge"


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that bounds nesting while composing and refuses a key given twice."""

    def __init__(self, stream: bytes | str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        if self._depth >= MAX_DEPTH:
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            raise ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        # The node's own keys; those a merge (<<) brings in may be overridden, as YAML says.
        lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = lines.get(key)
            except TypeError:
                continue  # unhashable: SafeLoader refuses it below, saying so
            line = key_node.start_mark.line + 1
            if first is not None:
                raise ConstructorError(
                    "while reading a mapping",
                    node.start_mark,
                    f"the key {key!r} appears twice (lines {first} and {line})",
                    key_node.start_mark,
                )
            lines[key] = line
        return super().construct_mapping(node, deep=deep)


def load(data: bytes) -> Any:
    """The one document in ``data``; raises ``yaml.YAMLError`` for anything refused."""
    return yaml.load(data, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass


def describe(exc: yaml.YAMLError) -> str:
    """One line saying what is wrong and where (a line, or a byte offset)."""
    if isinstance(exc, ReaderError):
        if exc.encoding != "unicode":  # bytes that do not decode (PyYAML gives the byte's value)
            name = "UTF-8" if exc.encoding == "utf-8" else exc.encoding
            return (
                f"not {name} text, byte 0x{exc.character:02x} at offset {exc.position}: "
                f"{exc.reason}"
            )
        return f"character U+{exc.character:04X} at offset {exc.position} is not allowed in YAML"
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    if context and str(problem).startswith("but "):  # "expected X, but found Y"
        problem = f"{context}, {problem}"
    return f"line {mark.line + 1}: {problem}" if mark is not None else str(problem)


__all__ = ["MAX_DEPTH", "describe", "load"]
