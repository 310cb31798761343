"""The documents a clone holds link only to what a clone holds, and the README lists every command.

A relative link in README.md, docs/ or an evidence README must name a file or folder inside
the repository, and a link to a heading (``page.md#heading``) a heading that page has, as
GitHub names its anchors; links inside code are not links. The README's command table has a
row for every command `imagekit --help` lists, down to each subcommand of a group (``plans
bump`` was once missing).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import click
import pytest

from imagekit.cli import main as imagekit_main

ROOT = Path(__file__).resolve().parents[2]

_FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(`+)(?!`).+?(?<!`)\1(?!`)", re.DOTALL)
_INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)"
)
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$", re.MULTILINE)
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)[ \t]*#*[ \t]*$", re.MULTILINE)
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def documents() -> list[Path]:
    """The hand-written documents: README.md, every page under docs/, the evidence READMEs."""
    found = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return found + sorted((ROOT / "evidence").rglob("README.md"))


def _prose(text: str) -> str:
    """The text without fenced code blocks and code spans, where brackets are not links (a
    code span may wrap a line, never a paragraph)."""
    paragraphs = re.split(r"\n[ \t]*\n", _FENCE.sub("", text))
    return "\n\n".join(_CODE_SPAN.sub("", paragraph) for paragraph in paragraphs)


def links(text: str) -> list[str]:
    """Every link target of a markdown text: inline links, images and reference definitions."""
    prose = _prose(text)
    return _INLINE_LINK.findall(prose) + _REFERENCE.findall(prose)


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives the headings of a markdown text: the heading's text without
    its markup, lower-cased, punctuation dropped, spaces made hyphens; a repeated one -1, -2."""
    seen: dict[str, int] = {}
    result = set()
    for heading in _HEADING.findall(_FENCE.sub("", text)):
        words = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
        slug = re.sub(r"[^\w\- ]", "", words.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        result.add(slug if count == 0 else f"{slug}-{count}")
    return result


def broken_links(document: Path, root: Path) -> list[str]:
    """Each relative link of ``document`` that a clone of ``root`` could not follow, and why."""
    text = document.read_text(encoding="utf-8")
    problems = []
    for target in links(text):
        if not target or _SCHEME.match(target):
            continue  # a web address or a mail link: not the clone's business
        path_part, _, fragment = target.partition("#")
        linked = (document.parent / unquote(path_part)).resolve() if path_part else document
        if not linked.is_relative_to(root.resolve()):
            problems.append(f"{target}: outside the repository")
        elif not linked.exists():
            problems.append(f"{target}: no such file or folder")
        elif fragment and linked.suffix == ".md" and linked.is_file():
            if unquote(fragment) not in anchors(linked.read_text(encoding="utf-8")):
                problems.append(f"{target}: {linked.name} has no heading #{fragment}")
    return problems


@pytest.mark.parametrize("document", documents(), ids=lambda path: str(path.relative_to(ROOT)))
def test_every_relative_link_resolves_in_a_clone(document: Path) -> None:
    assert broken_links(document, ROOT) == []


def test_the_link_check_says_no_to_what_a_clone_cannot_follow(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# A page\n\n## Statuses, and what each proves\n")
    readme = tmp_path / "README.md"
    readme.write_text(
        "# Title\n\n"
        "[fine](docs/page.md) [anchor](docs/page.md#statuses-and-what-each-proves) [self](#title)\n"
        "[gone](docs/missing.md) [bad anchor](docs/page.md#statuses) [out](../elsewhere.md)\n"
        "[web](https://example.com/x.md) ![image](docs/missing.png)\n"
        "[label]: docs/also-missing.md\n\n"
        "`[in code](docs/nothing.md)`\n\n```\n[in a block](docs/nothing.md)\n```\n"
    )
    assert broken_links(readme, tmp_path) == [
        "docs/missing.md: no such file or folder",
        "docs/page.md#statuses: page.md has no heading #statuses",
        "../elsewhere.md: outside the repository",
        "docs/missing.png: no such file or folder",
        "docs/also-missing.md: no such file or folder",
    ]


def test_anchors_are_named_as_github_names_them() -> None:
    text = "# `imagekit nightly`: the watch\n## Setup\n## Setup\n## [A link](x.md) too\n"
    assert anchors(text) == {"imagekit-nightly-the-watch", "setup", "setup-1", "a-link-too"}


def commands(group: click.Group, words: tuple[str, ...] = ()) -> Iterator[str]:
    """``imagekit WORDS`` for every command the CLI lists, a group's subcommands in its place."""
    context = click.Context(group)
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        assert command is not None, f"imagekit {' '.join((*words, name))} is listed but not found"
        if isinstance(command, click.Group):
            yield from commands(command, (*words, name))
        else:
            yield " ".join(("imagekit", *words, name))


def _command_named(span: str) -> str:
    """The command a code span names: its leading lower-case words (``imagekit ledger sync``
    of ``imagekit ledger sync --key PUB``)."""
    words = itertools.takewhile(lambda word: re.fullmatch(r"[a-z][a-z-]*", word), span.split())
    return " ".join(words)


def table_rows(readme: str) -> list[set[str]]:
    """The commands each row of the README's command table names in its first column."""
    after = readme.split("\n## Commands\n", 1)[1].lstrip("\n").splitlines()
    table = list(itertools.takewhile(lambda line: line.startswith("|"), after))
    first_cells = [re.split(r"(?<!\\)\|", line)[1] for line in table[2:]]  # not an escaped \|
    return [
        {_command_named(span) for span in re.findall(r"`(imagekit [^`]*)`", cell)}
        for cell in first_cells
    ]


def test_the_readme_has_a_row_for_every_command() -> None:
    rows = table_rows((ROOT / "README.md").read_text(encoding="utf-8"))
    listed = set().union(*rows)
    assert [command for command in commands(imagekit_main) if command not in listed] == []


def test_the_readme_gives_each_command_a_row_of_its_own() -> None:
    rows = table_rows((ROOT / "README.md").read_text(encoding="utf-8"))
    assert [row for row in rows if len(row) != 1] == []  # `doctor` / `pipeline` / `nightly`
    named = [command for row in rows for command in row]
    assert len(named) == len(set(named))


def test_the_row_check_says_no_to_a_row_of_several_commands() -> None:
    readme = (
        "# x\n\n## Commands\n\n| command | what |\n| --- | --- |\n"
        "| `imagekit plans list\\|show` | plans |\n"
        "| `imagekit doctor [NAME]` / `imagekit pipeline NAME` | two |\n"
        "| `imagekit ledger sync --key PUB` / `--from PIECE` | one |\n\nafter\n"
    )
    assert table_rows(readme) == [
        {"imagekit plans"},
        {"imagekit doctor", "imagekit pipeline"},
        {"imagekit ledger sync"},
    ]
