"""Strict YAML: a key given twice, nesting past the bound and bytes that are not text are
refused with one line saying where, never a crash and never a silent last-one-wins."""

from __future__ import annotations

import pytest
import yaml

from imagekit import yamldoc


def _refusal(data: bytes) -> str:
    with pytest.raises(yaml.YAMLError) as caught:
        yamldoc.load(data)
    return yamldoc.describe(caught.value)


def test_a_key_given_twice_is_refused_at_any_depth() -> None:
    assert _refusal(b"a: 1\na: 2\n") == "line 2: the key 'a' appears twice (lines 1 and 2)"
    nested = b"audit:\n  platform: linux/amd64\n  status: [A]\n  status: [B]\n"
    assert _refusal(nested) == "line 4: the key 'status' appears twice (lines 3 and 4)"
    deeper = b"x:\n- y:\n    z: {k: 1, k: 2}\n"
    assert _refusal(deeper) == "line 3: the key 'k' appears twice (lines 3 and 3)"


def test_keys_a_merge_brings_may_be_overridden_as_yaml_says() -> None:
    assert yamldoc.load(b"base: &b {a: 1, c: 3}\nx:\n  <<: *b\n  a: 2\n") == {
        "base": {"a": 1, "c": 3},
        "x": {"a": 2, "c": 3},
    }


def test_nesting_past_the_bound_is_refused_without_a_crash() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    assert _refusal(deep) == f"line 1: nested deeper than {yamldoc.MAX_DEPTH} levels"
    mappings = b"{k: " * 100_000 + b"v" + b"}" * 100_000
    assert _refusal(mappings).endswith(f"nested deeper than {yamldoc.MAX_DEPTH} levels")
    within = b"[" * (yamldoc.MAX_DEPTH - 1) + b"]" * (yamldoc.MAX_DEPTH - 1)
    assert yamldoc.load(within) is not None


def test_bytes_that_are_not_text_are_named_by_offset() -> None:
    said = _refusal(b"version: 1\n# caf\xe9\n")
    assert said == "not UTF-8 text, byte 0xe9 at offset 16: invalid continuation byte"
    assert _refusal(b"a: \x07\n") == "character U+0007 at offset 3 is not allowed in YAML"
    # UTF-16 with its byte order mark is text YAML allows.
    assert yamldoc.load("a: 1\n".encode("utf-16")) == {"a": 1}


def test_other_refusals_are_one_line() -> None:
    assert _refusal(b"? [1]\n: 2\n") == "line 1: found unhashable key"
    assert _refusal(b"a: 1\n---\nb: 2\n") == (
        "line 2: expected a single document in the stream, but found another document"
    )
    assert "\n" not in _refusal(b"[unclosed\n")
