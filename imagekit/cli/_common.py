"""What every command shares: --json, one error line with a hint, and exit codes.

The contract (DESIGN.md): with --json, stdout carries exactly one JSON document and nothing
else; human text goes to stderr. The exit code comes from the error class.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from imagekit.errors import ImagekitError

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print exactly one JSON document on stdout."
)


def echo_err(text: str) -> None:
    click.echo(text, err=True)


def dump_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=2, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()


def run(
    action: Callable[[], T],
    *,
    as_json: bool,
    human: Callable[[T], None],
    to_json: Callable[[T], Any],
    exit_code: Callable[[T], int] = lambda _: 0,
) -> None:
    """Call the library once, render its result, exit with the contract's code.

    ``human`` prints to stdout for people (stderr is for progress and errors); with --json
    only ``to_json(result)`` is printed. An ImagekitError becomes one line plus its hint.
    """
    try:
        result = action()
    except ImagekitError as exc:
        echo_err(f"error: {exc.diagnostics()}")
        if as_json:
            dump_json({"error": exc.to_json()})
        sys.exit(exc.exit_code)
    if as_json:
        dump_json(to_json(result))
    else:
        human(result)
    sys.exit(exit_code(result))
