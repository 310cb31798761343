"""Which progress reporter a command gets (imagekit.progress), and the terminal one.

On a terminal, the progress of long work is drawn live on stderr as docker and skopeo draw
it: a bar a layer with its bytes and rate, one overall bar, a spinner with the time elapsed
for a wait, and a line a retry printed above them. Where stderr is not a terminal (a CI
log, a pipe) the same events are plain lines at a bounded rate
(:class:`imagekit.progress.PlainReporter`). Under ``--json`` or ``--quiet`` nothing is said.
Never on stdout: the live display writes to stderr and leaves stdout alone.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from imagekit.progress import (
    Item,
    NullReporter,
    PlainReporter,
    Reporter,
    Work,
    installed,
)

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

#: Set to anything but "" or "0", imagekit says no progress, as `imagekit --quiet` does.
QUIET_ENV = "IMAGEKIT_QUIET"


def chosen(*, quiet: bool, as_json: bool, terminal: bool) -> Reporter:
    """The reporter of a command: silent under --quiet or --json, live on a terminal, plain
    lines otherwise."""
    if quiet or as_json or os.environ.get(QUIET_ENV, "") not in ("", "0"):
        return NullReporter()
    if terminal:
        return LiveReporter()
    return PlainReporter(sys.stderr)


@contextmanager
def for_command(*, quiet: bool, as_json: bool) -> Iterator[Reporter]:
    """Install the command's reporter for its duration, and end its display on the way out."""
    reporter = chosen(quiet=quiet, as_json=as_json, terminal=sys.stderr.isatty())
    with installed(reporter):
        try:
            yield reporter
        finally:
            if isinstance(reporter, LiveReporter):
                reporter.close()


class _LiveItem:
    def __init__(self, reporter: LiveReporter, task: TaskID, overall: TaskID | None) -> None:
        self._reporter, self._task, self._overall = reporter, task, overall

    def advance(self, nbytes: int) -> None:
        bars = self._reporter.bars()
        bars.update(self._task, advance=nbytes)
        if self._overall is not None:
            bars.update(self._overall, advance=nbytes)

    def done(self, how: str = "done") -> None:
        bars = self._reporter.bars()
        task = bars.tasks[self._task] if self._task < len(bars.tasks) else None
        if task is None:  # pragma: no cover - tasks are never removed
            return
        left = (task.total or 0) - task.completed
        if how != "done":
            bars.update(self._task, description=f"{task.description} ({how})")
        bars.update(self._task, completed=task.total or task.completed)
        if self._overall is not None and left > 0:
            bars.update(self._overall, advance=left)


class _LiveWork:
    def __init__(self, reporter: LiveReporter, label: str, overall: TaskID | None) -> None:
        self._reporter, self._label, self.overall = reporter, label, overall

    def item(self, label: str, total: int | None) -> Item:
        task = self._reporter.bars().add_task(f"  {label}", total=total, kind="bytes")
        return _LiveItem(self._reporter, task, self.overall)


class LiveReporter:
    """rich's live display on stderr: a bar an item, an overall bar a work, spinners for
    waits. Started on first use, so a command with nothing long to say draws nothing."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bars: Progress | None = None

    def bars(self) -> Progress:
        with self._lock:
            if self._bars is None:
                self._bars = _new_bars()
                self._bars.start()
            return self._bars

    def echo(self, text: str) -> bool:
        """Print TEXT above the bars while they are drawn (True), else leave it (False).

        click writes to stderr's binary buffer, past the proxy rich puts in its place, which
        would tear the display; imagekit's own lines come here instead."""
        with self._lock:
            bars = self._bars
        if bars is None:
            return False
        bars.console.print(text, markup=False, highlight=False, soft_wrap=True)
        return True

    def close(self) -> None:
        with self._lock:
            if self._bars is not None:
                self._bars.stop()
                self._bars = None

    def work(self, label: str, *, total: int | None, items: int) -> Work:
        overall = self.bars().add_task(f"{label} ({items} item{'s' * (items != 1)})", total=total)
        return _LiveWork(self, label, overall)

    def finish(self, work: Work) -> None:
        if isinstance(work, _LiveWork) and work.overall is not None:
            bars = self.bars()
            task = bars.tasks[work.overall]
            bars.update(work.overall, completed=task.total or task.completed)

    def retry(self, text: str) -> None:
        self.bars().console.print(f"retry: {text}", markup=False, highlight=False)

    @contextmanager
    def waiting(self, label: str) -> Iterator[None]:
        bars = self.bars()
        task = bars.add_task(label, total=None, kind="wait")
        try:
            yield
        finally:
            bars.update(task, total=1, completed=1)


def _new_bars() -> Progress:
    from rich.console import Console, RenderableType
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        ProgressColumn,
        SpinnerColumn,
        Task,
        TextColumn,
        TimeElapsedColumn,
        TransferSpeedColumn,
    )
    from rich.text import Text

    class BytesOnly(ProgressColumn):
        """A column shown for tasks that count bytes, blank for a wait."""

        def __init__(self, column: ProgressColumn) -> None:
            super().__init__()
            self.column = column

        def render(self, task: Task) -> RenderableType:
            return self.column.render(task) if task.fields.get("kind") != "wait" else Text("")

    columns: list[Any] = [
        SpinnerColumn(finished_text="✓"),
        TextColumn("{task.description}"),
        BarColumn(),
        BytesOnly(DownloadColumn(binary_units=True)),
        BytesOnly(TransferSpeedColumn()),
        TimeElapsedColumn(),
    ]
    return Progress(
        *columns,
        console=Console(stderr=True),
        redirect_stdout=False,  # stdout is the command's own: never drawn on
        redirect_stderr=True,  # other lines on stderr print above the bars
        transient=False,
    )
