"""Under --json exactly one document, also when a streamed list meets an error half-way."""

from __future__ import annotations

import json

import pytest


def test_a_streamed_document_ends_with_the_error_met_half_way(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`ledger show --json` prints its records as it reads them; an error after the first
    still leaves exactly one JSON document, the error inside it."""
    from imagekit.cli.output import StreamedDocument, dump_json

    document = StreamedDocument({"ledger": "l.jsonl"}, "records")
    document.add({"seq": 1})
    document.add({"seq": 2, "images": {"a": "b"}})
    dump_json({"error": {"message": "cannot read the ledger", "exit_code": 3}})
    dump_json({"after": True})  # the stream is closed: a document of its own again
    first, second = capsys.readouterr().out.split("\n}\n", 1)
    assert json.loads(first + "}") == {
        "ledger": "l.jsonl",
        "records": [{"seq": 1}, {"seq": 2, "images": {"a": "b"}}],
        "error": {"message": "cannot read the ledger", "exit_code": 3},
    }
    assert json.loads(second) == {"after": True}


def test_a_number_that_is_not_finite_is_named_never_bare(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A bare NaN made the whole --json document unreadable to strict parsers; it is the
    string "NaN" (and "Infinity", "-Infinity"), so what was seen stays visible."""
    from imagekit.cli.output import StreamedDocument, dump_json

    dump_json({"busbw": float("nan"), "sizes": [1.5, float("inf"), -float("inf")]})
    document = StreamedDocument({"a": 1}, "items")
    document.add({"x": float("nan")})
    dump_json({"z": 0})
    first, second = capsys.readouterr().out.split("\n}\n", 1)
    strict = {"parse_constant": _refuse}
    assert json.loads(first + "}", **strict) == {  # type: ignore[arg-type]
        "busbw": "NaN",
        "sizes": [1.5, "Infinity", "-Infinity"],
    }
    assert json.loads(second, **strict) == {"a": 1, "items": [{"x": "NaN"}], "z": 0}  # type: ignore[arg-type]


def _refuse(name: str) -> None:
    raise AssertionError(f"bare {name} in a --json document")
