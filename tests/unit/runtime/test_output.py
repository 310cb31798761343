"""imagekit/runtime/output.py: what is kept of a stream, read back as text."""

from __future__ import annotations

from pathlib import Path

from imagekit.runtime.output import Kept


def test_a_stream_kept_whole_reads_back_as_it_was_printed() -> None:
    kept = Kept("stdout", 8, (Path("assertions-stdout.raw"),), 0, b"ok\n\xffdone")
    assert kept.text() == "ok\n\ufffddone"  # bytes that are not UTF-8 replaced, never raised


def test_a_longer_stream_says_how_many_earlier_bytes_and_where_they_are() -> None:
    files = (Path("assertions-stdout.first-128MiB.raw"), Path("assertions-stdout.last-32MiB.raw"))
    kept = Kept("stdout", 100, files, 60, b"IMAGEKIT_ASSERT_PASS x\n")
    assert kept.text().splitlines() == [
        "[77 earlier bytes of stdout: assertions-stdout.first-128MiB.raw, "
        "assertions-stdout.last-32MiB.raw]",
        "IMAGEKIT_ASSERT_PASS x",
    ]
