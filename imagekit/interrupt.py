"""Interrupts: SIGINT and SIGTERM end a command cleanly, and never as a verdict.

An interrupted command has proved nothing: it exits 130 (SIGINT) or 143 (SIGTERM), the
shell's ``128 + signal`` convention, never 1 ("a check said no") and never 70 (a crash). The
CLI turns both signals into :class:`Interrupted`, a ``KeyboardInterrupt``, so every ``finally``
and ``with`` block on the way out runs: audit containers are removed, registry upload
sessions cancelled, temporary folders deleted. It is not an ``ImagekitError`` on purpose:
the flows that catch a stage's errors to report them must never catch an interrupt as a
stage's failure and go on with the next stage.

A stage that has proved something before the signal came (a mirror that verified some layers)
keeps it as evidence marked partial and says so on the way out (``Interrupted.so_far`` and
``Interrupted.evidence``); it records no verdict.

Work spread over threads stops through a :class:`Stop` flag: only the main thread receives
the signal, so it sets the flag, cancels what has not started, and waits for the workers,
which check the flag between pieces of work (``wait_all``).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the CLI installs the handlers at start-up: nothing heavy at import
    from concurrent.futures import Future


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived; carries what the stage proved so far, if anything."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.so_far: dict[str, Any] | None = None
        self.evidence: Path | None = None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def keeping(self, so_far: dict[str, Any] | None, evidence: Path | None) -> Interrupted:
        """This interrupt, carrying the stage's partial evidence (raise it again)."""
        self.so_far, self.evidence = so_far, evidence
        return self


def interrupted(exc: KeyboardInterrupt) -> Interrupted:
    """``exc`` as an Interrupted: a plain KeyboardInterrupt (no handler installed) is SIGINT."""
    if isinstance(exc, Interrupted):
        return exc
    return Interrupted(signal.SIGINT)


class Stopped(BaseException):  # noqa: N818 - a control signal between threads, not an error
    """A worker stopped because the command was interrupted; never an error verdict."""


class Stop:
    """A flag that worker threads check between pieces of work."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        if self._event.is_set():
            raise Stopped


def wait_all(futures: Iterable[Future[Any]], stop: Stop) -> None:
    """Wait for every future; on an interrupt, stop the workers and raise it again.

    Only the waiting (main) thread gets the signal. It sets ``stop``, cancels the work that
    has not started and waits for the running workers to notice the flag and finish their
    own cleanup, so nothing is left running or half-open when the interrupt goes on up.
    """
    from concurrent.futures import wait

    pending = list(futures)
    try:
        wait(pending)
    except KeyboardInterrupt:
        stop.set()
        for future in pending:
            future.cancel()
        wait(pending)
        raise


def install_handlers() -> dict[int, Any]:
    """Turn SIGINT and SIGTERM into :class:`Interrupted` in this (main) thread.

    The first signal raises; a second one while cleanup runs is ignored, so a Ctrl-C pressed
    twice does not cut the cleanup short; a third gives up on it. Returns the previous
    handlers, for :func:`restore_handlers`.
    """
    seen: list[int] = []

    def handler(signum: int, frame: object) -> None:
        seen.append(signum)
        if len(seen) == 1:
            raise Interrupted(signum)
        if len(seen) >= 3:
            raise SystemExit(128 + signum)

    previous: dict[int, Any] = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        previous[signum] = signal.signal(signum, handler)
    return previous


def restore_handlers(previous: dict[int, Any]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)
