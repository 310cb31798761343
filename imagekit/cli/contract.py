"""The command-line contract (docs/ARCHITECTURE.md): ``run`` calls a command's stage once,
renders what it returned, and exits with the code its result or its error says.

With --json, stdout carries exactly one JSON document and nothing else; human text goes to
stderr. The exit code comes from the error class; an exception that is not an ImagekitError
is a bug in imagekit, reported as a crash with its own exit code (never 1, which would read as
"a check said no"). SIGINT and SIGTERM end a command with 130 and 143 (imagekit.interrupt),
saying what was proved so far. A record the ledger refused (RecordRefused) does not hide the
stage's result: it is rendered, with the refusal beside it. A usage error click finds is exit
2 (``usage_error``, called by the group in imagekit.cli).
"""

from __future__ import annotations

import os
import sys
import tempfile
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar, overload

import click

from imagekit.cli.output import dump_json, echo_err
from imagekit.errors import CRASH_EXIT_CODE, ImagekitError, NotAttested, RecordRefused
from imagekit.interrupt import Interrupted, interrupted

T = TypeVar("T")
CRASH_DIR_ENV = "IMAGEKIT_CRASH_DIR"


class Document(Protocol):
    """A result that is its own JSON document (``to_json``), as most stages' results are."""

    def to_json(self) -> Any: ...


class Checked(Protocol):
    """A result that says whether its checks held."""

    @property
    def ok(self) -> bool: ...


DocumentT = TypeVar("DocumentT", bound=Document)


def unless_ok(result: Checked) -> int:
    """The exit code of a result whose checks either held (0) or said no (1)."""
    return 0 if result.ok else 1


@overload
def run(
    action: Callable[[], DocumentT],
    *,
    as_json: bool,
    human: Callable[[DocumentT], None],
    exit_code: Callable[[DocumentT], int] = ...,
) -> None: ...


@overload
def run(
    action: Callable[[], T],
    *,
    as_json: bool,
    human: Callable[[T], None],
    to_json: Callable[[T], Any],
    exit_code: Callable[[T], int] = ...,
) -> None: ...


def run(
    action: Callable[[], Any],
    *,
    as_json: bool,
    human: Callable[[Any], None],
    to_json: Callable[[Any], Any] | None = None,
    exit_code: Callable[[Any], int] = lambda _: 0,
) -> None:
    """Call the library once, render its result, exit with the contract's code.

    ``human`` prints to stdout for people (stderr is for progress and errors); with --json
    only ``to_json(result)`` is printed, by default the result's own document. An
    ImagekitError becomes one line plus its hint. A refused record that carries the stage's
    result renders that result and the refusal, and exits 1 at least.
    """
    if to_json is None:
        to_json = _own_document
    try:
        result = action()
    except (RecordRefused, NotAttested) as exc:
        if exc.result is None:
            _error(exc, as_json)
        # The stage finished and attached its own result (RecordRefused.keeping); flows that
        # chain stages catch their errors, so what reaches a command is its own result.
        kept: Any = exc.result
        if as_json:
            document = to_json(kept)
            if isinstance(document, dict):
                key = "ledger_refused" if isinstance(exc, RecordRefused) else "not_attested"
                document = {**document, key: exc.to_json()}
            dump_json(document)
        else:
            human(kept)
        echo_err(f"error: {exc.diagnostics()}")
        sys.exit(max(exit_code(kept), exc.exit_code))
    except KeyboardInterrupt as exc:
        report_interrupt(interrupted(exc), as_json=as_json)
    except ImagekitError as exc:
        _error(exc, as_json)
    except Exception as exc:  # a bug: reported as a crash, never as a verdict
        crash(exc, as_json=as_json)
    if as_json:
        dump_json(to_json(result))
    else:
        human(result)
    sys.exit(exit_code(result))


def _own_document(result: Document) -> Any:
    return result.to_json()


def _error(exc: ImagekitError, as_json: bool) -> None:
    echo_err(f"error: {exc.diagnostics()}")
    if as_json:
        dump_json({"error": exc.to_json()})
    sys.exit(exc.exit_code)


def report_interrupt(exc: Interrupted, *, as_json: bool) -> None:
    """End the command as interrupted: 130 or 143, what was proved so far, no verdict."""
    summary = (exc.so_far or {}).get("summary")
    # Work of several parts (a pool's nodes) may have recorded the parts that finished.
    recorded = list((exc.so_far or {}).get("ledger_seqs") or [])
    proved = f": {summary}" if summary else ""
    kept = f"; partial evidence kept in {exc.evidence}" if exc.evidence else ""
    nothing = "" if recorded else "; nothing was recorded"
    message = f"interrupted by {exc.name} before it finished{proved}{nothing}{kept}"
    echo_err(f"imagekit: {message}")
    if as_json:
        dump_json(
            {
                "interrupted": {
                    "signal": exc.name,
                    "exit_code": exc.exit_code,
                    "message": message,
                    "so_far": exc.so_far,
                    "evidence": str(exc.evidence) if exc.evidence else None,
                    "recorded": bool(recorded),
                }
            }
        )
    sys.exit(exc.exit_code)


def usage_error(exc: click.ClickException, *, as_json: bool) -> None:
    """A usage error found by click: its text on stderr and, with --json, one document."""
    exc.show()
    if as_json:
        ctx = getattr(exc, "ctx", None)
        where = ctx.command_path if ctx is not None else "imagekit"
        dump_json(
            {
                "error": {
                    "type": "UsageError",
                    "message": exc.format_message(),
                    "hint": f"`{where} --help` lists the arguments and options",
                    "exit_code": 2,
                }
            }
        )
    sys.exit(2)


def _crash_dir() -> Path:
    if os.environ.get(CRASH_DIR_ENV):
        return Path(os.environ[CRASH_DIR_ENV])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "imagekit" / "crashes"


def _write_traceback(exc: BaseException) -> Path | None:
    """Keep the whole traceback in a file of its own; None when no file could be written."""
    text = "".join(traceback.format_exception(exc))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    for folder in (_crash_dir(), Path(tempfile.gettempdir())):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"imagekit-crash-{stamp}-{os.getpid()}.txt"
            path.write_text(f"imagekit {' '.join(sys.argv[1:])}\n\n{text}", encoding="utf-8")
        except OSError:
            continue
        return path
    return None


def crash(exc: Exception, *, as_json: bool) -> None:
    """Report an unexpected exception as what it is, a bug, and exit with CRASH_EXIT_CODE.

    One line on stderr names the exception and where its traceback was written; with
    --json, one JSON document says the same. Nothing is recorded as a verdict: whatever the
    command had not yet recorded stays unrecorded.
    """
    path = _write_traceback(exc)
    first = str(exc).splitlines()[0] if str(exc) else ""
    where = f"the traceback is in {path}" if path else "no traceback file could be written"
    echo_err(
        f"error: imagekit crashed: {type(exc).__name__}: {first}\n"
        f"hint: this is a bug in imagekit, not a verdict on the image; {where}"
    )
    if path is None:
        traceback.print_exception(exc, file=sys.stderr)
    if as_json:
        dump_json(
            {
                "error": {
                    "type": "crash",
                    "exception": type(exc).__name__,
                    "message": first,
                    "traceback": str(path) if path else None,
                    "exit_code": CRASH_EXIT_CODE,
                }
            }
        )
    sys.exit(CRASH_EXIT_CODE)
