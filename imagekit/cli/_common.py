"""What every command shares: --json, one error line with a hint, and exit codes; the option
types and decorators more than one command takes; ``parsed``, which hands a command's parsed
options to its stage; and ``run``, which calls the stage once and renders what it returned.

The contract (docs/ARCHITECTURE.md): with --json, stdout carries exactly one JSON document
and nothing else; human text goes to stderr. The exit code comes from the error class; an
exception that is not an ImagekitError is a bug in imagekit, reported as a crash with its
own exit code (never 1, which would read as "a check said no"). SIGINT and SIGTERM end a
command with 130 and 143 (imagekit.interrupt), saying what was proved so far. A record the
ledger refused (RecordRefused) does not hide the stage's result: it is rendered, with the
refusal beside it.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import sys
import tempfile
import traceback
import types
import typing
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar, Union, cast, overload

import click

from imagekit.errors import CRASH_EXIT_CODE, ImagekitError, NotAttested, RecordRefused
from imagekit.interrupt import Interrupted, interrupted

T = TypeVar("T")
CRASH_DIR_ENV = "IMAGEKIT_CRASH_DIR"

#: The path types of options and arguments: a file (never a folder), a folder (never a
#: file), either; each parses to a pathlib.Path.
FILE_PATH = click.Path(dir_okay=False, path_type=Path)
DIR_PATH = click.Path(file_okay=False, path_type=Path)
ANY_PATH = click.Path(path_type=Path)

json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print exactly one JSON document on stdout."
)


def vuln_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--vuln-db, --vuln-db-max-age and --fail-on, spelt alike wherever an audit runs."""
    from imagekit.audit.vulns import DEFAULT_MAX_AGE_DAYS

    options = (
        click.option(
            "--vuln-db",
            type=ANY_PATH,
            envvar="IMAGEKIT_VULN_DB",
            metavar="PATH",
            help="An offline OSV export for PyPI (OSV's all.zip, or a folder of its JSON "
            "records) to match against instead of the service [env: IMAGEKIT_VULN_DB].",
        ),
        click.option(
            "--vuln-db-max-age",
            "max_age",
            type=click.IntRange(min=0),
            default=DEFAULT_MAX_AGE_DAYS,
            show_default=True,
            metavar="DAYS",
            help="A database older than this says unknown, never clean.",
        ),
        click.option(
            "--fail-on",
            type=click.Choice(["findings", "fixable", "never"]),
            default="findings",
            show_default=True,
            help="Which findings fail the audit (exit 1): any, those with a fixed version, "
            "or none.",
        ),
    )
    for option in reversed(options):
        command = option(command)
    return command


def builder_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--buildkit ADDR (with its TLS files), --buildx-builder NAME and --cache-ref REF,
    spelt alike by every command that builds (``build``, ``nightly``): the build goes to a
    BuildKit of its own (imagekit.build.remote), no engine on the path."""
    options = (
        click.option(
            "--buildkit",
            metavar="ADDR",
            help="Build on this BuildKit daemon (tcp://HOST:PORT or unix:///PATH), no engine; "
            "BuildKit pushes by digest.",
        ),
        click.option(
            "--buildkit-ca", type=ANY_PATH, help="CA certificate of the --buildkit daemon."
        ),
        click.option("--buildkit-cert", type=ANY_PATH, help="Client certificate for --buildkit."),
        click.option("--buildkit-key", type=ANY_PATH, help="Client key for --buildkit."),
        click.option(
            "--buildx-builder",
            metavar="NAME",
            help="Build on this buildx builder (remote, kubernetes, docker-container driver) as "
            "with --buildkit: no engine, pushed by digest.",
        ),
        click.option(
            "--cache-ref",
            metavar="REF",
            help="With --buildkit/--buildx-builder: import BuildKit's cache from and export it "
            "to REF in a registry (type=registry, mode=max).",
        ),
    )
    for option in reversed(options):
        command = option(command)
    return command


def sign_key_option(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--sign-key FILE (or IMAGEKIT_SIGNING_KEY), the one way every stage is asked to attest;
    ``what`` says what that stage signs and where it goes."""
    return click.option(
        "--sign-key",
        type=click.Path(path_type=Path, dir_okay=False),
        envvar="IMAGEKIT_SIGNING_KEY",
        metavar="FILE",
        help=f"{what} Env: IMAGEKIT_SIGNING_KEY.",
    )


def registry_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--insecure HOST, --ca-file PATH and --registry-mirror URL, one story for every command
    that reaches a registry (imagekit.registry.tls, imagekit.registry.mirrors): they hold for
    every registry client the command makes, with Docker's certs.d, the engine's and
    containerd's mirrors and the IMAGEKIT_* variables beside them; which mirror served a
    read, and every fallback, is said on stderr."""
    from imagekit.registry.tls import CA_FILE_ENV, CERTS_D_ENV, INSECURE_ENV

    @functools.wraps(command)
    def with_settings(
        *args: Any,
        insecure: tuple[str, ...],
        ca_file: Path | None,
        registry_mirror: tuple[str, ...],
        **kw: Any,
    ) -> Any:
        from imagekit.registry.mirrors import use_mirrors
        from imagekit.registry.tls import use_settings

        with (
            use_settings(insecure=insecure, ca_file=ca_file),
            use_mirrors(registry_mirror, say=echo_err),
        ):
            return command(*args, **kw)

    options = (
        click.option(
            "--insecure",
            multiple=True,
            metavar="HOST",
            help="A registry to reach as Docker's insecure-registries are: TLS without "
            "verifying its certificate, plain HTTP if it speaks no TLS; repeatable "
            f"[env: {INSECURE_ENV}, comma-separated].",
        ),
        click.option(
            "--ca-file",
            type=FILE_PATH,
            envvar=CA_FILE_ENV,
            metavar="PATH",
            help="A CA bundle (PEM) to trust for registries, beside the system's and "
            f"/etc/docker/certs.d/HOST/ca.crt [env: {CA_FILE_ENV}; ${CERTS_D_ENV} moves "
            "certs.d].",
        ),
        click.option(
            "--registry-mirror",
            multiple=True,
            metavar="URL",
            help="A Docker Hub mirror to read docker.io through before registry-1.docker.io; "
            "repeatable, beside the engine's registry-mirrors and containerd's hosts.toml "
            "[env: IMAGEKIT_REGISTRY_MIRRORS].",
        ),
    )
    wrapped: Callable[..., Any] = with_settings
    for option in reversed(options):
        wrapped = option(wrapped)
    return wrapped


def parsed(target: Callable[..., T], /, *args: object, **given: object) -> T:
    """Call ``target`` (a stage, or an options dataclass) with the command's parsed options.

    Each parameter of ``target`` that ``args`` and ``given`` leave open takes the click
    parameter of the same name, where the command has one, so a command does not list every
    option a second time to hand it on; ``given`` holds those spelt otherwise or converted on
    the way (``assertions=not no_assertions``). Every value is checked against the annotation
    of the parameter it fills: an option wired to the wrong parameter, or a name ``target``
    does not take, is a crash at once (a bug), never a wrong value deep in a stage.
    """
    options = click.get_current_context().params
    signature = inspect.signature(target)
    taken = set(list(signature.parameters)[: len(args)]) | set(given)
    filled = {
        name: options[name]
        for name in signature.parameters
        if name not in taken and name in options
    }
    bound = signature.bind(*args, **given, **filled)
    hints = typing.get_type_hints(target)
    for name, value in bound.arguments.items():
        if name in hints and not _conforms(value, hints[name]):
            where = getattr(target, "__qualname__", target)
            raise TypeError(f"{where}: {name}={value!r} is not {hints[name]}")
    return target(*bound.args, **bound.kwargs)


def _conforms(value: object, hint: Any) -> bool:
    """Whether ``value`` is of the annotated type (the forms a command's options take)."""
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if hint is Any:
        return True
    if hint is None or hint is type(None):
        return value is None
    if origin in (Union, types.UnionType):
        return any(_conforms(value, argument) for argument in arguments)
    if origin is Literal:
        return value in arguments
    if origin in (tuple, list):
        if not isinstance(value, origin) or not arguments:
            return isinstance(value, origin)
        if origin is tuple and not (len(arguments) == 2 and arguments[1] is Ellipsis):
            raise TypeError(f"no check for {hint} (only tuple[X, ...])")
        return all(_conforms(item, arguments[0]) for item in cast("Iterable[object]", value))
    if hint is float:  # an int is a float, as type checkers take it
        return isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(hint, type):
        return isinstance(value, hint)
    raise TypeError(f"no check for {hint}")


def echo_err(text: str) -> None:
    click.echo(text, err=True)


def echo_lines(lines: Iterable[str]) -> None:
    """Print a result's own lines for people, one each (stdout)."""
    for line in lines:
        click.echo(line)


def _dumps(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


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
    proved = f": {summary}" if summary else ""
    kept = f"; partial evidence kept in {exc.evidence}" if exc.evidence else ""
    message = f"interrupted by {exc.name} before it finished{proved}; nothing was recorded{kept}"
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
                    "recorded": False,
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
