"""JSON from outside imagekit, read within bounds and strictly: the one reader every ledger
line, registry manifest, pod file, report and helper's answer goes through.

Python's ``json`` takes things a hostile or broken writer can use against its reader:

- nesting: the C decoder recurses once per level, so an array nested 1,000 deep is a
  RecursionError (a crash, not a refusal) and one 2 KB ledger line stopped every ledger
  command; a document shallower than that still crashes whoever walks it recursively next
  (pydantic, ``json.dumps``). Nesting past :data:`MAX_DEPTH` is refused here, in one line;
- ``NaN``, ``Infinity`` and ``-Infinity``, which are not JSON (RFC 8259 section 6) and which
  strict readers (Go's, jq's, cosign's) refuse: a document carrying one is refused;
- a key twice in one object, where ``json`` keeps the last silently (RFC 8259 section 4 says
  names SHOULD be unique; a reader that keeps the last while another keeps the first is how
  a signed document says two things): refused, naming the key;
- size: each caller states the cap of its kind of input (``limit``), and longer input is
  refused before it is parsed.

The caller keeps the exact bytes it passed (it hashes those, never a re-serialisation) and
validates the value with its strict model. :class:`JsonRefused` is a ``ValueError`` whose
text is one line; the caller wraps it in its own error, naming what sent the bytes (a
registry, a pod, a file), so that its exit code says whose fault it is.

Writing is strict too: :func:`dumps` refuses a value that is not finite (strict readers
refuse a bare ``NaN``), saying where it is in the document.
"""

from __future__ import annotations

import json
import math
from typing import Any

from imagekit.files import size_text

#: Deeper nesting is refused: an OCI index, a ledger record, a pod or a CycloneDX document
#: is a handful of levels deep; the deepest document imagekit writes is under 20.
MAX_DEPTH = 100


class JsonRefused(ValueError):
    """Input refused as a JSON document; ``str()`` is one line saying why (and where)."""


class _Duplicate(ValueError):
    pass


def _constant(name: str) -> Any:
    raise JsonRefused(f"{name} is not a JSON number (strict JSON has no NaN or Infinity)")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999: a number JSON allows that no float holds
        raise JsonRefused(f"the number {text[:40]} is too large for a float")
    return value


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document = dict(pairs)
    if len(document) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Duplicate(f"the key {key!r} appears twice in one object")
            seen.add(key)
    return document


def depth_of(value: Any, bound: int) -> int:
    """How deeply a parsed JSON value nests (a scalar is 0, ``[]`` is 1), counting no further
    than ``bound + 1``: level by level, without recursion, each level gathered by one
    comprehension (seven times quicker than a stack of every node on a 16 MB document)."""
    level = [value] if type(value) is dict or type(value) is list else []
    deepest = 0
    while level:
        deepest += 1
        if deepest > bound:
            break
        level = [
            child
            for item in level
            for child in (item.values() if type(item) is dict else item)
            if type(child) is dict or type(child) is list
        ]
    return deepest


def loads(data: bytes | str, *, limit: int, depth: int = MAX_DEPTH) -> Any:
    """The JSON value in ``data`` (UTF-8 bytes, or text), at most ``limit`` bytes long.

    Raises :class:`JsonRefused` for anything refused (see the module): too long, not UTF-8,
    not JSON, nested deeper than ``depth``, a NaN or Infinity, a key twice.
    """
    if len(data) > limit:
        raise JsonRefused(
            f"{len(data)} bytes, more than the {size_text(limit)} imagekit reads of one document"
        )
    if isinstance(data, bytes | bytearray | memoryview):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonRefused(
                f"not UTF-8 text: byte 0x{exc.object[exc.start]:02x} at offset {exc.start}"
            ) from None
    else:
        text = data
    try:
        value = json.loads(
            text, parse_constant=_constant, parse_float=_float, object_pairs_hook=_pairs
        )
    except RecursionError:
        raise JsonRefused(f"nested deeper than {depth} levels") from None
    except _Duplicate as exc:
        raise JsonRefused(str(exc)) from None
    except json.JSONDecodeError as exc:
        raise JsonRefused(f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if depth_of(value, depth) > depth:
        raise JsonRefused(f"nested deeper than {depth} levels")
    return value


def non_finite(value: Any, root: str = "$") -> str | None:
    """The first float in ``value`` that is not finite and where it sits (``nan at
    $.a[2].b``), or None; ``root`` names ``value`` itself."""
    stack: list[tuple[Any, str]] = [(value, root)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return f"{item} at {where}"
        if isinstance(item, dict):
            stack.extend((child, f"{where}.{key}") for key, child in item.items())
        elif isinstance(item, list | tuple):
            stack.extend((child, f"{where}[{index}]") for index, child in enumerate(item))
    return None


def dumps(value: Any, **options: Any) -> str:
    """``json.dumps(value, **options)`` that refuses (:class:`JsonRefused`) a float that is
    not finite, naming where it is, instead of writing a bare ``NaN``."""
    try:
        return json.dumps(value, allow_nan=False, **options)
    except ValueError as exc:
        where = non_finite(value)
        if where is None:
            raise
        raise JsonRefused(f"a number that is not finite: {where}") from exc


_NAMES = {math.inf: "Infinity", -math.inf: "-Infinity"}


def named_non_finite(value: Any) -> Any:
    """``value`` with every float that is not finite replaced by its name as a string
    (``"NaN"``, ``"Infinity"``, ``"-Infinity"``): for a document shown to people and
    scripts (``--json``), where what was seen must stay visible and the document strict.
    The value itself is returned when it holds none (the common case: nothing is copied)."""
    if non_finite(value) is None:
        return value

    def named(item: Any) -> Any:
        if isinstance(item, float) and not math.isfinite(item):
            return _NAMES.get(item, "NaN")
        if isinstance(item, dict):
            return {key: named(child) for key, child in item.items()}
        if isinstance(item, list | tuple):
            return [named(child) for child in item]
        return item

    return named(value)


__all__ = [
    "MAX_DEPTH",
    "JsonRefused",
    "depth_of",
    "dumps",
    "loads",
    "named_non_finite",
    "non_finite",
]
