"""Which reporter a command gets, and the live one: stderr only, never stdout."""

from __future__ import annotations

import io

import pytest

from imagekit import progress
from imagekit.cli.progress import LiveReporter, chosen, for_command
from imagekit.progress import NullReporter, PlainReporter


def test_json_and_quiet_say_nothing_a_terminal_gets_bars_else_plain_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("IMAGEKIT_QUIET", raising=False)
    assert isinstance(chosen(quiet=False, as_json=True, terminal=True), NullReporter)
    assert isinstance(chosen(quiet=True, as_json=False, terminal=True), NullReporter)
    assert isinstance(chosen(quiet=False, as_json=False, terminal=True), LiveReporter)
    assert isinstance(chosen(quiet=False, as_json=False, terminal=False), PlainReporter)
    monkeypatch.setenv("IMAGEKIT_QUIET", "1")
    assert isinstance(chosen(quiet=False, as_json=False, terminal=True), NullReporter)
    monkeypatch.setenv("IMAGEKIT_QUIET", "0")
    assert isinstance(chosen(quiet=False, as_json=False, terminal=False), PlainReporter)


def test_the_live_display_draws_on_stderr_only(capsys: pytest.CaptureFixture[str]) -> None:
    reporter = LiveReporter()
    with progress.installed(reporter):
        with progress.work("copying to r/x", total=1600, items=2) as work:
            first = work.item("sha256:aaaaaaaaaaaa", 1000)
            first.advance(600)
            first.done()
            work.item("sha256:bbbbbbbbbbbb", 600).done("mounted")
        progress.current().retry("GET r/x: HTTP 503; attempt 2 of 5 in 0.5 s")
        with progress.current().waiting("pulling r/x into the engine"):
            pass
    overall = reporter.bars().tasks[0]
    assert overall.completed == overall.total == 1600  # the mounted layer counts too
    reporter.close()
    captured = capsys.readouterr()
    assert captured.out == ""
    for said in (
        "copying to r/x (2 items)",
        "sha256:aaaaaaaaaaaa",
        "sha256:bbbbbbbbbbbb (mounted)",
        "retry: GET r/x: HTTP 503; attempt 2 of 5 in 0.5 s",
        "pulling r/x into the engine",
    ):
        assert said in captured.err


def test_a_command_gets_its_reporter_and_gives_it_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("IMAGEKIT_QUIET", raising=False)
    monkeypatch.setattr("sys.stderr", io.StringIO())
    with for_command(quiet=False, as_json=False) as reporter:
        assert progress.current() is reporter and isinstance(reporter, PlainReporter)
    assert isinstance(progress.current(), NullReporter)
    with for_command(quiet=True, as_json=False) as reporter:
        assert isinstance(reporter, NullReporter)


def test_imagekits_own_lines_print_above_the_bars_while_they_are_drawn(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from imagekit.cli.output import echo_err

    reporter = LiveReporter()
    with progress.installed(reporter):
        assert reporter.echo("not drawn yet") is False  # no bars: click prints it
        with progress.work("copying to r/x", total=10, items=1):
            echo_err("uploaded aaaaaaaaaaaa (10 B)")
    reporter.close()
    captured = capsys.readouterr()
    assert captured.out == "" and "uploaded aaaaaaaaaaaa (10 B)" in captured.err
