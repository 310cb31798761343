"""``parsed``: a command's options handed to its stage by name, each checked against its type."""

from __future__ import annotations

import click
from click.testing import CliRunner


def test_parsed_refuses_a_value_of_the_wrong_type_and_a_name_the_target_lacks() -> None:
    from dataclasses import dataclass

    from imagekit.cli.options import parsed

    @dataclass(frozen=True)
    class Options:
        count: int
        label: str | None = None

    seen: list[Options] = []

    @click.command()
    @click.option("--count", default="3")  # a string: wired wrong on purpose
    @click.option("--label", default=None)
    def wrong(count: str, label: str | None) -> None:
        seen.append(parsed(Options))

    @click.command()
    @click.option("--count", type=int, default=3)
    def right(count: int) -> None:
        seen.append(parsed(Options, label="x"))

    @click.command()
    @click.option("--count", type=int, default=3)
    def unknown(count: int) -> None:
        seen.append(parsed(Options, colour="red"))

    runner = CliRunner()
    assert runner.invoke(right, []).exit_code == 0
    assert seen == [Options(count=3, label="x")]
    failed = runner.invoke(wrong, [])
    assert isinstance(failed.exception, TypeError)
    assert "count='3'" in str(failed.exception)
    assert isinstance(runner.invoke(unknown, []).exception, TypeError)
    assert len(seen) == 1
