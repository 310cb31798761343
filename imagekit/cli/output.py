"""What a command prints: human lines on stdout, progress and errors on stderr, and under
--json exactly one JSON document on stdout (``dump_json``), which ``StreamedDocument`` may print
item by item so a list of any length is never held whole."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import click

from imagekit.jsondoc import named_non_finite

if TYPE_CHECKING:
    from imagekit.attest.attach import AttestOutcome


def echo_err(text: str) -> None:
    """A line on stderr; above the progress bars while they are drawn (never through them)."""
    from imagekit.cli.progress import LiveReporter
    from imagekit.progress import current

    reporter = current()
    if isinstance(reporter, LiveReporter) and reporter.echo(text):
        return
    click.echo(text, err=True)


def echo_lines(lines: Iterable[str]) -> None:
    """Print a result's own lines for people, one each (stdout)."""
    for line in lines:
        click.echo(line)


def echo_attested(outcome: AttestOutcome, *, places: bool = False) -> None:
    """What a stage's attestation came to, in the words every command uses: its envelope
    digest and predicate type (and, with ``places``, where it is stored), or NOT ATTESTED and
    why."""
    stored = outcome.attestation
    if stored is None:
        click.echo(f"NOT ATTESTED: {outcome.problem}")
        return
    click.echo(f"attested: {stored.envelope_digest} ({stored.predicate_type})")
    if places:
        for where in stored.stored:
            click.echo(f"  {where}")


def _dumps(value: Any) -> str:
    # Strict JSON: a number that is not finite is written as the string "NaN", "Infinity" or
    # "-Infinity" (what was seen stays visible; a bare NaN is no JSON and strict parsers
    # refuse the whole document).
    return json.dumps(named_non_finite(value), indent=2, sort_keys=True, default=str)


def dump_json(document: Any) -> None:
    """Print the one JSON document; while a :class:`StreamedDocument` is open, its keys end
    that document instead (an error met half-way is still inside the one document)."""
    if _streaming and isinstance(document, dict):
        _streaming[-1].close_with(document)
        return
    sys.stdout.write(_dumps(document) + "\n")
    sys.stdout.flush()


class StreamedDocument:
    """A command's one JSON document whose list under ``key`` is printed item by item as a
    stage hands them on, so a list of any length is never held whole.

    It prints exactly what :func:`dump_json` prints for the whole document (``head``'s keys
    must sort before ``key``, and the keys that close it after): the object's opening is
    written with the first item, and the document is closed by the next :func:`dump_json`,
    whose keys other than those already written follow the list. An error or interrupt met
    after the first item thus ends up inside the same document.
    """

    def __init__(self, head: dict[str, Any], key: str) -> None:
        self.head = head
        self.key = key
        self.items = 0

    def add(self, item: Any) -> None:
        if self.items == 0:
            _streaming.append(self)
            opening = "".join(
                f"  {json.dumps(k)}: {_indented(v)},\n" for k, v in sorted(self.head.items())
            )
            sys.stdout.write("{\n" + opening + f"  {json.dumps(self.key)}: [")
        sys.stdout.write(("," if self.items else "") + "\n    " + _indented(item, 4))
        self.items += 1

    def close_with(self, document: dict[str, Any]) -> None:
        rest = {k: v for k, v in document.items() if k not in self.head and k != self.key}
        closing = "".join(f",\n  {json.dumps(k)}: {_indented(v)}" for k, v in sorted(rest.items()))
        sys.stdout.write("\n  ]" + closing + "\n}\n")
        sys.stdout.flush()
        _streaming.remove(self)


def _indented(value: Any, by: int = 2) -> str:
    return _dumps(value).replace("\n", "\n" + " " * by)


_streaming: list[StreamedDocument] = []  # the document being printed, if one is open
