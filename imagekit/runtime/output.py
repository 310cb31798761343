"""A process's raw output: read with a bound, streamed to evidence, its report found at its end.

The image under test chooses what its processes print (the audit's probe, the GPU
preflight's ranks), so nothing they print may decide how much memory or disk imagekit takes.
Each stream (stdout, stderr) is read to its end on a thread of its own, every byte
counted: the first ``FILE_CAP`` bytes go to its evidence file as they arrive
(``probe-stdout.raw``), and only the last ``TAIL_CAP`` bytes stay in memory, which is where
the probe's report is (its last line). A longer stream keeps its first part
as ``probe-stdout.first-128MiB.raw`` and its last part as ``probe-stdout.last-32MiB.raw``,
and says how many bytes in between were read but kept nowhere. The names say what the files
hold: raw bytes, not a JSON document (whatever the image printed).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

MiB = 1 << 20
FILE_CAP = 128 * MiB
TAIL_CAP = 32 * MiB
_READ = MiB


@dataclass(frozen=True)
class Kept:
    """What was kept of one stream: its size, its evidence files, the bytes kept nowhere."""

    stream: str
    total: int
    files: tuple[Path, ...]
    cut: int
    tail: bytes = field(repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "bytes": self.total,
            "files": [p.name for p in self.files],
            "cut_bytes": self.cut,
        }

    def last_line(self) -> str | None:
        """The last non-empty line, or None when there is none or its start was cut off."""
        data = self.tail.rstrip()
        if not data:
            return None
        start = data.rfind(b"\n") + 1
        if start == 0 and self.total > len(self.tail):
            return None  # the line began before the part kept in memory
        return data[start:].decode("utf-8", errors="replace")

    def last_words(self, limit: int = 200) -> str:
        """The stream's last non-empty line, shortened to one readable line."""
        lines = self.tail.decode("utf-8", errors="replace").splitlines()
        text = next((line.strip() for line in reversed(lines) if line.strip()), "")
        return text if len(text) <= limit else text[: limit - 3] + "..."

    def text(self) -> str:
        """The part kept in memory as text; where more was read, a first line says how many
        earlier bytes there were and which evidence files hold them."""
        said = self.tail.decode("utf-8", errors="replace")
        if self.total > len(self.tail):
            files = ", ".join(p.name for p in self.files)
            said = (
                f"[{self.total - len(self.tail)} earlier bytes of {self.stream}: {files}]\n" + said
            )
        return said

    @property
    def report_cut(self) -> bool:
        """Whether the stream ends in a line longer than what is kept in memory."""
        return bool(self.tail.strip()) and self.last_line() is None


class Capture:
    """One stream read to its end on its own thread (see the module docstring)."""

    def __init__(self, stream: IO[bytes], path: Path) -> None:
        self._stream = stream
        self._path = path
        self._file = path.open("xb")
        self._tail: deque[bytes] = deque()
        self._tail_bytes = 0
        self.total = 0
        self._thread = threading.Thread(target=self._pump, name=f"capture {path.name}")
        self._thread.daemon = True  # never keeps the process alive; finish() joins it
        self._thread.start()

    def _pump(self) -> None:
        read = getattr(self._stream, "read1", self._stream.read)
        try:
            while chunk := read(_READ):
                if self.total < FILE_CAP:
                    self._file.write(chunk[: FILE_CAP - self.total])
                self.total += len(chunk)
                self._tail.append(chunk)
                self._tail_bytes += len(chunk)
                while self._tail_bytes - len(self._tail[0]) >= TAIL_CAP:
                    self._tail_bytes -= len(self._tail.popleft())
        finally:
            self._file.close()
            self._stream.close()

    def finish(self, timeout: float = 30) -> Kept:
        """Wait for the end of the stream; name the evidence file(s) for what they hold."""
        self._thread.join(timeout)
        tail = b"".join(self._tail)[-TAIL_CAP:]
        stream = self._path.name.split(".")[0]
        if self.total <= FILE_CAP:
            return Kept(stream, self.total, (self._path,), 0, tail)
        first = self._path.with_name(f"{stream}.first-{FILE_CAP // MiB}MiB.raw")
        last = self._path.with_name(f"{stream}.last-{TAIL_CAP // MiB}MiB.raw")
        self._path.rename(first)
        with last.open("xb") as fh:
            fh.write(tail)
        cut = max(0, self.total - FILE_CAP - len(tail))
        return Kept(stream, self.total, (first, last), cut, tail)
