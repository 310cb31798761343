"""The one reader of outside JSON (imagekit.jsondoc), and the rule that every parse of outside
JSON or YAML in the package goes through it (or through imagekit.yamldoc)."""

from __future__ import annotations

import ast
import json
import math
import resource
import time
from pathlib import Path

import pytest

from imagekit import jsondoc

PACKAGE = Path(__file__).resolve().parents[2] / "imagekit"

#: Modules that parse JSON or YAML themselves, each with why it may.
ALLOWED = {
    # The bounded readers themselves.
    "imagekit/jsondoc.py": "the JSON reader",
    "imagekit/yamldoc.py": "the YAML reader",
    # Standard-library Python run alone inside the image or under torch's launcher, never
    # imported by imagekit: they cannot import the package, and read only what imagekit
    # itself handed them (a spec on the command line, a check file it rendered).
    "imagekit/audit/probe.py": "runs inside the image, alone",
    "imagekit/gpu/probe.py": "runs where the GPUs are, alone",
    "imagekit/plans/assert_checker.py": "runs inside the image, alone",
}

#: Modules another branch is rewriting (the GPU preflight's report reader, and its --fault
#: option): they move onto ``jsondoc.loads`` there. Listed so that this test stays honest:
#: an entry whose module no longer parses by itself fails below and must be removed.
PENDING: dict[str, str] = {}

_JSON_CALLS = {"load", "loads"}
_YAML_CALLS = {"load", "safe_load", "full_load", "unsafe_load", "load_all", "safe_load_all"}
_PYDANTIC_CALLS = {"model_validate_json", "validate_json"}


def _bypasses(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        name, owner = node.func.attr, node.func.value
        base = owner.id if isinstance(owner, ast.Name) else None
        if (
            (base == "json" and name in _JSON_CALLS)
            or (base == "yaml" and name in _YAML_CALLS)
            or name in _PYDANTIC_CALLS
        ):
            found.append(f"line {node.lineno}: {base or '...'}.{name}(...)")
    return found


def test_every_parse_of_outside_json_or_yaml_goes_through_the_reader() -> None:
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        shown = path.relative_to(PACKAGE.parent).as_posix()
        if shown in ALLOWED:
            continue
        calls = _bypasses(ast.parse(path.read_text(encoding="utf-8")))
        if calls and shown not in PENDING:
            offenders[shown] = calls
        elif not calls and shown in PENDING:
            offenders[shown] = ["no longer parses by itself: remove it from PENDING"]
    assert offenders == {}, (
        "parse outside JSON with imagekit.jsondoc.loads (and YAML with imagekit.yamldoc.load), "
        f"then validate the value with the model: {offenders}"
    )


def test_the_scan_finds_a_direct_parse() -> None:
    source = "import json, yaml\njson.loads(b)\nyaml.safe_load(t)\nM.model_validate_json(b)\n"
    assert _bypasses(ast.parse(source)) == [
        "line 2: json.loads(...)",
        "line 3: yaml.safe_load(...)",
        "line 4: M.model_validate_json(...)",
    ]


@pytest.mark.parametrize(
    ("data", "refusal"),
    [
        pytest.param(b"[" * 1000 + b"]" * 1000, "nested deeper than 100 levels", id="1000 deep"),
        pytest.param(b"[" * 100_000, "nested deeper than 100 levels", id="100000 open"),
        pytest.param(b'{"a":' * 101 + b"1" + b"}" * 101, "nested deeper", id="101 objects"),
        pytest.param(b"[1, NaN]", "NaN is not a JSON number", id="NaN"),
        pytest.param(b'{"x": Infinity}', "Infinity is not a JSON number", id="Infinity"),
        pytest.param(b"-Infinity", "-Infinity is not a JSON number", id="-Infinity"),
        pytest.param(b"[1e999]", "the number 1e999 is too large for a float", id="1e999"),
        pytest.param(b'{"a": 1, "b": {"c": 1, "c": 2}}', "the key 'c' appears twice", id="dup"),
        pytest.param(b'"\xff"', "not UTF-8 text: byte 0xff at offset 1", id="not UTF-8"),
        pytest.param(b"{", "not JSON: Expecting property name", id="torn"),
        pytest.param(b"", "not JSON: Expecting value at line 1 column 1", id="empty"),
    ],
)
def test_refusals_are_one_line(data: bytes, refusal: str) -> None:
    with pytest.raises(jsondoc.JsonRefused) as caught:
        jsondoc.loads(data, limit=1 << 20)
    assert refusal in str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_cap_is_the_callers_and_refused_before_parsing() -> None:
    with pytest.raises(jsondoc.JsonRefused, match="11 bytes, more than the 10 bytes"):
        jsondoc.loads(b'"123456789"', limit=10)
    assert jsondoc.loads(b'"12345678"', limit=10) == "12345678"


def test_what_strict_json_allows_is_read_as_json_reads_it() -> None:
    data = b'{"a": [1, 2.5, "x", null, true], "b": {"c": -0.0}, "d": 1e308, "e": "\\u00e9"}'
    assert jsondoc.loads(data, limit=1 << 20) == json.loads(data)
    deepest = b"[" * 100 + b"]" * 100
    assert jsondoc.depth_of(jsondoc.loads(deepest, limit=1 << 20), 100) == 100


def test_depth_is_measured_without_recursion() -> None:
    value: list[object] = []
    for _ in range(200_000):
        value = [value]
    assert jsondoc.depth_of(value, 100) == 101
    assert jsondoc.depth_of({"a": [1, {"b": 2}]}, 100) == 3
    assert jsondoc.depth_of(1, 100) == 0


def test_dumps_refuses_a_number_that_is_not_finite_naming_where() -> None:
    with pytest.raises(jsondoc.JsonRefused, match=r"nan at \$\.details\.busbw\[1\]"):
        jsondoc.dumps({"details": {"busbw": [1.0, math.nan]}})
    with pytest.raises(jsondoc.JsonRefused, match=r"inf at \$\.x"):
        jsondoc.dumps({"x": math.inf})
    assert jsondoc.dumps({"x": 1.5}, sort_keys=True) == '{"x": 1.5}'


def test_a_large_document_stays_within_time_and_memory() -> None:
    """A 16 MiB ledger line (the largest cap): parsed once, in bounded time and memory."""
    item = {"name": "x" * 40, "values": [1, 2.5, "y"], "nested": {"a": {"b": [True, None]}}}
    data = json.dumps([item] * 130_000).encode()
    assert 14 << 20 < len(data) <= 16 << 20
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    value = jsondoc.loads(data, limit=16 << 20)
    elapsed = time.monotonic() - started
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert len(value) == 130_000
    assert elapsed < 30
    assert grown_mib < 1024
