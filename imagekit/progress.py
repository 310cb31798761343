"""Progress of long work, the one seam every stage reports through: bytes of a layer, a
retry and its wait, a wait with its elapsed time.

A stage never prints progress itself and never imports a terminal library: it asks
:func:`current` for the reporter and tells it what is happening. The reporter is
:class:`NullReporter` (silent) unless the CLI installs another with :func:`installed`: a
live display on a terminal (``imagekit.cli.progress``), :class:`PlainReporter` when stderr
is not a terminal (plain lines, at most one every few seconds per item), and nothing at all
under ``--json`` or ``--quiet``. Whatever it is, progress goes to stderr, never to stdout.

The vocabulary is docker's and skopeo's: a piece of :func:`Reporter.work` (copying DST's
layers) holds items (a layer), each with its bytes and rate, and an overall total; a
:meth:`Reporter.retry` is one line with its reason and the wait; a :meth:`Reporter.waiting`
is a spinner with the time elapsed (an engine pull, a Job, the nightly watch).

A foundation: it names no stage and imports nothing of imagekit. Reporters are called from
several threads at once (layers are copied in parallel), so each guards its own state.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol, TextIO

#: Seconds between two plain lines about the same item, or the same wait.
PLAIN_INTERVAL = 5.0


class Item(Protocol):
    """One piece of a :class:`Work` whose bytes are counted (a layer being copied)."""

    def advance(self, nbytes: int) -> None:
        """``nbytes`` more were moved (negative when a retry starts the item over)."""

    def done(self, how: str = "done") -> None:
        """The item is complete; ``how`` says how when no bytes moved ("already there")."""


class Work(Protocol):
    """Work made of items, with an overall total of bytes (a copy, a verification)."""

    def item(self, label: str, total: int | None) -> Item:
        """Start an item of ``total`` bytes (None: unknown), named ``label``."""


class Reporter(Protocol):
    """Where a stage's progress goes; :func:`current` hands out the one installed."""

    def work(self, label: str, *, total: int | None, items: int) -> Work:
        """Begin work of ``items`` items and ``total`` bytes; ended by :meth:`finish`."""

    def finish(self, work: Work) -> None:
        """The work is over (done, failed or interrupted): its display ends."""

    def retry(self, text: str) -> None:
        """One line: what is retried, why, and how long the wait before it is."""

    @contextmanager
    def waiting(self, label: str) -> Iterator[None]:
        """A wait with no bytes to count (an engine pull, a Job, a probe)."""
        yield


class _NullItem:
    def advance(self, nbytes: int) -> None:
        pass

    def done(self, how: str = "done") -> None:
        pass


class _NullWork:
    def item(self, label: str, total: int | None) -> Item:
        return _NullItem()


class NullReporter:
    """Says nothing: the library's default, and the CLI's under --json or --quiet."""

    def work(self, label: str, *, total: int | None, items: int) -> Work:
        return _NullWork()

    def finish(self, work: Work) -> None:
        pass

    def retry(self, text: str) -> None:
        pass

    @contextmanager
    def waiting(self, label: str) -> Iterator[None]:
        yield


def human_bytes(size: float) -> str:
    """A size in the unit that reads best: ``129 B``, ``12.3 KiB``, ``259.4 MiB``, ``2.0 GiB``."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``1 layer``, ``2 layers``: a count with its noun agreeing."""
    return f"{count} {noun if count == 1 else (nouns or noun + 's')}"


def _seconds(elapsed: float) -> str:
    if elapsed < 60:
        return f"{elapsed:.1f} s"
    minutes, seconds = divmod(int(elapsed), 60)
    return f"{minutes} min {seconds:02d} s"


class _PlainItem:
    def __init__(self, work: _PlainWork, number: int, label: str, total: int | None) -> None:
        self._work, self._number, self._label, self._total = work, number, label, total
        self._moved = 0
        self._started = self._said = work.reporter.clock()

    def _line(self, verb: str, now: float) -> str:
        of = f" / {human_bytes(self._total)}" if self._total is not None else ""
        rate = self._moved / max(now - self._started, 1e-3)
        said = f"{verb} " if verb else ""
        return (
            f"{self._work.label}: {said}{self._number}/{self._work.items} {self._label} "
            f"{human_bytes(self._moved)}{of} ({human_bytes(rate)}/s)"
        )

    def advance(self, nbytes: int) -> None:
        self._moved += nbytes
        self._work.moved(nbytes)
        now = self._work.reporter.clock()
        if now - self._said >= self._work.reporter.interval:
            self._said = now
            self._work.reporter.say(self._line("", now) + self._work.overall())

    def done(self, how: str = "done") -> None:
        now = self._work.reporter.clock()
        if how != "done":  # no bytes moved: its size counts towards the whole all the same
            self._work.moved((self._total or 0) - self._moved)
            self._work.reporter.say(
                f"{self._work.label}: {how} {self._number}/{self._work.items} {self._label}"
                + (f" {human_bytes(self._total)}" if self._total is not None else "")
                + self._work.overall()
            )
            return
        self._work.reporter.say(
            self._line("done", now) + f" in {_seconds(now - self._started)}" + self._work.overall()
        )


class _PlainWork:
    def __init__(self, reporter: PlainReporter, label: str, total: int | None, items: int) -> None:
        self.reporter, self.label, self.total, self.items = reporter, label, total, items
        self._lock = threading.Lock()
        self._moved = 0
        self._count = 0

    def moved(self, nbytes: int) -> None:
        with self._lock:
            self._moved += nbytes

    def overall(self) -> str:
        if not self.total:
            return ""
        with self._lock:
            share = 100 * self._moved / self.total
            return (
                f"; overall {human_bytes(self._moved)} / {human_bytes(self.total)} ({share:.0f}%)"
            )

    def item(self, label: str, total: int | None) -> Item:
        with self._lock:
            self._count += 1
            number = self._count
        return _PlainItem(self, number, label, total)


class PlainReporter:
    """Plain lines on a stream that is not a terminal (a CI log, a file): each item when it
    ends, and while it runs at most one line every ``interval`` seconds; each retry; a wait
    when it begins, every ``interval`` * 6 seconds while it lasts, and when it ends."""

    def __init__(
        self,
        stream: TextIO,
        *,
        interval: float = PLAIN_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream, self.interval, self.clock = stream, interval, clock
        self._lock = threading.Lock()

    def say(self, text: str) -> None:
        with self._lock:
            self._stream.write(text + "\n")
            self._stream.flush()

    def work(self, label: str, *, total: int | None, items: int) -> Work:
        size = f", {human_bytes(total)}" if total is not None else ""
        self.say(f"{label}: {plural(items, 'item')}{size}")
        return _PlainWork(self, label, total, items)

    def finish(self, work: Work) -> None:
        pass

    def retry(self, text: str) -> None:
        self.say(f"retry: {text}")

    @contextmanager
    def waiting(self, label: str) -> Iterator[None]:
        started = self.clock()
        self.say(f"{label} ...")
        stop = threading.Event()

        def tick() -> None:
            while not stop.wait(self.interval * 6):
                self.say(f"{label}: still waiting ({_seconds(self.clock() - started)})")

        ticker = threading.Thread(target=tick, name="imagekit-progress-wait", daemon=True)
        ticker.start()
        try:
            yield
        finally:
            stop.set()
            ticker.join()
            self.say(f"{label}: {_seconds(self.clock() - started)}")


_NULL = NullReporter()
_current: Reporter = _NULL


def current() -> Reporter:
    """The reporter stages tell their progress to (silent unless the CLI installed one)."""
    return _current


@contextmanager
def installed(reporter: Reporter) -> Iterator[Reporter]:
    """Make ``reporter`` the current one for the duration (the CLI, around a command)."""
    global _current
    previous, _current = _current, reporter
    try:
        yield reporter
    finally:
        _current = previous


@contextmanager
def work(label: str, *, total: int | None, items: int) -> Iterator[Work]:
    """:meth:`Reporter.work` on the current reporter, finished on the way out however it ends."""
    reporter = current()
    begun = reporter.work(label, total=total, items=items)
    try:
        yield begun
    finally:
        reporter.finish(begun)
