"""Every `imagekit ...` command line the documents show is one the CLI would take.

Each line of a fenced code block in README.md and docs/ that runs imagekit (``imagekit ...``
or ``$ imagekit ...``, after a shell prompt, an environment assignment or ``&&``), and each
command of the README's command table, is parsed against the command it names with click's
own parser, without running it: the command and subcommand exist, every option exists and
gets the values it takes, and every required option and argument is given. What the
documents write as a placeholder (``REF``, ``sha256:...``) is a value like any other; a
bracketed part of the table (``[--vuln-db PATH]``) is optional, so its options must exist
but need not be given.
"""

from __future__ import annotations

import itertools
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from imagekit.cli import main as imagekit_main
from tests.unit.test_docs import ROOT

_FENCE = re.compile(r"^ {0,3}(```|~~~)[^\n]*\n(.*?)^ {0,3}\1[^\n]*$", re.MULTILINE | re.DOTALL)
#: Where a command line ends: the shell's operators.
_SHELL_ENDS = {"|", "||", "&&", ";", ">", ">>", "2>", "2>&1", "<", "&"}
_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*$")
#: What click's parser leaves for a value not given (a sentinel of its own since 8.2).
_UNSET = getattr(click.core, "UNSET", None)
#: A redirection (``2>log``, ``>/dev/null``, ``2>&1``), dropped before the line is split.
_REDIRECT = re.compile(r"\s\d?>>?(&\d|\s*\S+)")


@dataclass(frozen=True)
class Shown:
    """A command line a document shows: where, and its words after ``imagekit``."""

    where: str
    words: tuple[str, ...]
    optional: tuple[str, ...] = ()  # options named only in an optional part (the table's)

    def __str__(self) -> str:
        return f"{self.where}: imagekit {' '.join(self.words)}"


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _logical_lines(block: str) -> Iterator[str]:
    """A code block's lines, a line ending in a backslash joined with the next."""
    pending = ""
    for line in block.splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield pending + line
        pending = ""
    if pending:
        yield pending


def _words(line: str) -> tuple[str, ...] | None:
    """The words after ``imagekit`` on a shell line that runs it, up to a shell operator or
    a comment; None when the line does not run imagekit."""
    text = line.strip()
    text = re.sub(r"^(\$|#|>)\s+", "", text)  # a prompt
    text = _REDIRECT.sub(" ", text)
    try:
        lexer = shlex.shlex(text, posix=True, punctuation_chars="|&;<>")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        tokens = list(lexer)
    except ValueError:
        return None
    while tokens and (_ASSIGNMENT.match(tokens[0]) or tokens[0] in ("time", "sudo", "env")):
        tokens = tokens[1:]
    if not tokens or tokens[0] not in ("imagekit", ".venv/bin/imagekit") or text.endswith(":"):
        return None
    words = []
    for token in tokens[1:]:
        if token in _SHELL_ENDS:
            break
        words.append(token)
    if words and not re.fullmatch(r"-.*|[a-z][a-z-]*", words[0]):
        return None  # output ("imagekit demo: hello") or a diagram, not a command
    return tuple(words)


def _optional(synopsis: str) -> tuple[str, ...]:
    """The options a synopsis names in its bracketed (optional) parts: ``[--policy FILE]``."""
    return tuple(re.findall(r"--[a-z][a-z-]*", " ".join(re.findall(r"\[[^\]]*\]", synopsis))))


def shown_on(where: str, line: str) -> Shown | None:
    """The command a line shows, its bracketed parts optional; None where it runs none."""
    optional = _optional(line)
    words = _words(re.sub(r"\[[^\]]*\]", " ", line) if optional else line)
    return None if words is None else Shown(where, words, optional)


def fenced_lines() -> list[Shown]:
    """Every command line of a fenced code block of README.md and docs/*.md."""
    found = []
    for document in _documents():
        text = document.read_text(encoding="utf-8")
        for match in _FENCE.finditer(text):
            first_line = text[: match.start()].count("\n") + 1
            for offset, line in enumerate(_logical_lines(match.group(2)), start=1):
                where = f"{document.relative_to(ROOT)}:{first_line + offset}"
                shown = shown_on(where, line)
                if shown is not None:
                    found.append(shown)
    return found


def table_lines() -> list[Shown]:
    """The README command table's commands: a bracketed part optional, ``A \\| B`` either."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    after = readme.split("\n## Commands\n", 1)[1]
    found = []
    for row in after.splitlines():
        if not row.startswith("| `imagekit"):
            continue
        first = row.split(" | ")[0]
        for span in re.findall(r"`(imagekit [^`]+)`", first):
            optional = _optional(span)
            plain = re.sub(r"\[[^\]]*\]", " ", span)
            # "gpu-preflight REF \| --host": two ways to call one command, each a line.
            first_way, *other_ways = re.split(r"\s*\\\|\s*", plain)
            words = tuple(first_way.split()[1:])
            found.append(Shown("README.md (command table)", words, optional))
            named = tuple(itertools.takewhile(lambda w: re.fullmatch(r"[a-z][a-z-]*", w), words))
            found += [
                Shown("README.md (command table)", (*named, *way.split()), optional)
                for way in other_ways
            ]
    return found


def _resolve(words: tuple[str, ...]) -> tuple[click.Command, list[str], str]:
    """The command WORDS name, the words left for it, and its name as typed."""
    command: click.Command = imagekit_main
    context = click.Context(imagekit_main, info_name="imagekit")
    rest = list(words)
    named = ["imagekit"]
    while isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
        found = command.get_command(context, rest[0])
        if found is None:
            raise click.UsageError(f"no such command {' '.join([*named, rest[0]])!r}")
        named.append(rest.pop(0))
        command = found
        context = click.Context(command, info_name=named[-1], parent=context)
    while isinstance(command, click.Group) and rest and rest[0] in ("-q", "--quiet"):
        rest.pop(0)  # the group's own option, before the command
        return _resolve(tuple(rest))
    return command, rest, " ".join(named)


def check(shown: Shown) -> str | None:
    """Why the CLI would refuse SHOWN's words (parsed, not run), or None when it takes them."""
    try:
        command, rest, name = _resolve(shown.words)
    except click.UsageError as exc:
        return exc.format_message()
    if any(word in ("--help", "-h", "--version") for word in rest):
        return None
    context = click.Context(command, info_name=name, resilient_parsing=False)
    parser = command.make_parser(context)
    try:
        values, extra, _order = parser.parse_args(list(rest))
    except click.UsageError as exc:
        return exc.format_message()
    if isinstance(command, click.Group):
        return f"{name} is a group: name one of its commands" if not rest else None
    if extra and not context.allow_extra_args:
        return f"unexpected extra argument(s): {' '.join(extra)}"
    known = {opt for param in command.params for opt in getattr(param, "opts", ())}
    for option in shown.optional:
        if option not in known:
            return f"no such option: {option}"
    for param in command.params:
        given = values.get(param.name or "", _UNSET)
        if param.required and (given is _UNSET or given in (None, ())):
            what = (
                f"option {param.opts[0]!r}"
                if isinstance(param, click.Option)
                else (f"argument {param.human_readable_name!r}")
            )
            return f"missing {what}"
    return None


def _all() -> list[Shown]:
    return fenced_lines() + table_lines()


@pytest.mark.parametrize("shown", _all(), ids=str)
def test_every_command_line_the_documents_show_parses(shown: Shown) -> None:
    assert check(shown) is None, f"{shown}: {check(shown)}"


def test_the_documents_show_many_command_lines() -> None:
    # The extraction finds the lines it is meant to (a regex gone wrong would pass vacuously).
    shown = fenced_lines()
    assert len(shown) > 30
    assert any(s.words[:1] == ("mirror",) for s in shown)
    assert len(table_lines()) >= len(
        re.findall(r"^\| `imagekit", (ROOT / "README.md").read_text(), re.M)
    )


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("imagekit inpsect REF", "no such command 'imagekit inpsect'"),
        ("imagekit pipeline demo --vuln-db PATH", "missing option '--registry'"),
        ("imagekit mirror --copyy SRC DST", "No such option '--copyy'. Did you mean '--copy'?"),
        ("imagekit mirror SRC", "missing argument 'DESTINATION'"),
        ("imagekit ledger verfy", "no such command 'imagekit ledger verfy'"),
        ("imagekit ledger show extra", "unexpected extra argument(s): extra"),
        ("imagekit verify REF --key", "Option '--key' requires an argument"),
        ("imagekit verify REF [--polcy FILE]", "no such option: --polcy"),
    ],
)
def test_the_check_refuses_what_the_cli_would(line: str, why: str) -> None:
    shown = shown_on("test", line)
    assert shown is not None
    said = check(shown)
    assert said is not None and why.lower() in said.lower(), said


def test_lines_that_do_not_run_imagekit_are_not_taken() -> None:
    assert _words("imagekit: interrupted by SIGINT before it finished") is None
    assert _words("docker run --rm image") is None
    assert _words("$ IMAGEKIT_QUIET=1 imagekit mirror A B 2>log | jq .") == ("mirror", "A", "B")
    assert _words("imagekit audit REF   # a comment") == ("audit", "REF")
