"""The progress seam: silent by default, plain lines at a bounded rate, bytes and units."""

from __future__ import annotations

import io

from imagekit import progress
from imagekit.progress import NullReporter, PlainReporter, human_bytes, plural


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_units_read_as_people_read_them() -> None:
    assert human_bytes(129) == "129 B"
    assert human_bytes(0) == "0 B"
    assert human_bytes(12_345) == "12.1 KiB"
    assert human_bytes(272_003_372) == "259.4 MiB"
    assert human_bytes(3 << 30) == "3.0 GiB"
    assert human_bytes(5 << 40) == "5120.0 GiB"
    assert plural(1, "layer") == "1 layer"
    assert plural(2, "layer") == "2 layers"
    assert plural(0, "key") == "0 keys"


def test_the_default_reporter_is_silent_and_installed_restores_it() -> None:
    assert isinstance(progress.current(), NullReporter)
    stream = io.StringIO()
    with progress.installed(PlainReporter(stream)) as reporter:
        assert progress.current() is reporter
        progress.current().retry("GET x: connection refused; attempt 2 of 5 in 0.5 s")
    assert isinstance(progress.current(), NullReporter)
    assert stream.getvalue() == "retry: GET x: connection refused; attempt 2 of 5 in 0.5 s\n"


def test_plain_lines_come_at_most_once_an_interval_per_item() -> None:
    stream, clock = io.StringIO(), Clock()
    with progress.installed(PlainReporter(stream, interval=5.0, clock=clock)):
        with progress.work("copying to r/x", total=300 << 20, items=2) as work:
            big = work.item("sha256:aaaa", 200 << 20)
            for _ in range(100):  # a hundred chunks within one second: no line
                clock.now += 0.01
                big.advance(1 << 20)
            clock.now += 5.0
            big.advance(1 << 20)  # five seconds on: one line
            big.advance(99 << 20)  # at once after: none
            clock.now += 1.0
            big.done()
            work.item("sha256:bbbb", 100 << 20).done("already there")
    lines = stream.getvalue().splitlines()
    assert lines[0] == "copying to r/x: 2 items, 300.0 MiB"
    assert lines[1].startswith("copying to r/x: 1/2 sha256:aaaa 101.0 MiB / 200.0 MiB (")
    assert lines[1].endswith("; overall 101.0 MiB / 300.0 MiB (34%)")
    assert lines[2].startswith("copying to r/x: done 1/2 sha256:aaaa 200.0 MiB / 200.0 MiB (")
    assert " in 7.0 s; overall 200.0 MiB / 300.0 MiB (67%)" in lines[2]
    assert lines[3] == (
        "copying to r/x: already there 2/2 sha256:bbbb 100.0 MiB; overall 300.0 MiB / "
        "300.0 MiB (100%)"
    )
    assert len(lines) == 4


def test_a_wait_is_said_when_it_begins_and_ends() -> None:
    stream, clock = io.StringIO(), Clock()
    reporter = PlainReporter(stream, clock=clock)
    with reporter.waiting("pulling r/x@sha256:abc into the engine"):
        clock.now += 12.5
    assert stream.getvalue().splitlines() == [
        "pulling r/x@sha256:abc into the engine ...",
        "pulling r/x@sha256:abc into the engine: 12.5 s",
    ]


def test_a_long_wait_says_it_is_still_waiting() -> None:
    stream = io.StringIO()
    reporter = PlainReporter(stream, interval=0.01)  # a line every 0.06 s
    clock = Clock()
    reporter.clock = clock
    import time

    with reporter.waiting("the Job"):
        time.sleep(0.2)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "the Job ..." and lines[-1].startswith("the Job: ")
    assert any(line.startswith("the Job: still waiting (") for line in lines[1:-1])


def test_the_null_reporter_takes_every_call_and_says_nothing() -> None:
    reporter = NullReporter()
    work = reporter.work("x", total=None, items=1)
    item = work.item("y", None)
    item.advance(10)
    item.done()
    reporter.retry("z")
    with reporter.waiting("w"):
        pass
    reporter.finish(work)
