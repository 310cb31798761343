"""Finding records: ledger show's filters, the lines it skipped, its JSON streamed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from imagekit.errors import UsageError
from imagekit.ledger import (
    append_record,
    show,
)
from imagekit.workspace import Workspace
from tests.support.ledger_chain import write_chain
from tests.unit.ledger.support import DIGEST_A, ledger_lines, note, run_cli

DIGEST_B = "sha256:" + "b" * 64


def test_show_filters(ws: Workspace) -> None:
    note(ws, 1, plan="a")
    append_record(
        ws,
        "push",
        plan="b",
        images={"image": "local", "pushed": f"reg/x@{DIGEST_B}"},
        status="pushed",
        scope="",
        details={"manifest_digest": DIGEST_B},
    )
    append_record(
        ws,
        "final-pull",
        plan="b",
        images={"image": "reg/x"},
        status="pulled",
        scope="",
        details={"image_id": DIGEST_A},
    )
    assert [r.seq for r in show(ws, plan="b").records] == [2, 3]
    assert [r.seq for r in show(ws, kind="push").records] == [2]
    assert [r.seq for r in show(ws, image=DIGEST_B).records] == [2]
    assert [r.seq for r in show(ws, image=DIGEST_A).records] == [1, 3]
    assert [r.seq for r in show(ws, plan="b", image=DIGEST_A).records] == [3]
    with pytest.raises(UsageError):
        show(ws, kind="nope")
    with pytest.raises(UsageError):
        show(ws, image="sha256:xyz")


def test_show_marks_what_it_skipped(ws: Workspace) -> None:
    for n in range(3):
        note(ws, n)
    lines = ledger_lines(ws)
    lines.insert(1, b"this line was pasted in by hand\n")
    ws.ledger_path.write_bytes(b"".join(lines) + b'{"torn')
    result = show(ws)
    assert [r.seq for r in result.records] == [1, 2, 3]
    assert [(s.line, s.why) for s in result.skipped] == [(2, "malformed"), (5, "torn")]
    shown = run_cli(ws, "ledger", "show", "--json")
    assert shown.returncode == 1
    document = json.loads(shown.stdout)
    assert [r["seq"] for r in document["records"]] == [1, 2, 3]
    assert [s["line"] for s in document["skipped"]] == [2, 5]
    human = run_cli(ws, "ledger", "show")
    assert human.returncode == 1
    assert "skipped line 2" in human.stderr and "skipped line 5" in human.stderr


# `ledger show --json` in a child process, its peak of Python allocations measured around the
# command itself (imagekit imported first), its document written to a file.
_SHOW_PEAK = """
import sys, tracemalloc
import imagekit.cli, imagekit.ledger
sys.argv = ["imagekit", "ledger", "show", "--json"]
tracemalloc.start()
try:
    imagekit.cli.main()
except SystemExit as exc:
    code = exc.code
sys.stderr.write(f"PEAK {tracemalloc.get_traced_memory()[1]} {code}\\n")
"""


def _show_peak(ws: Workspace) -> tuple[int, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGEKIT_")}
    env["IMAGEKIT_ROOT"] = str(ws.root)
    out = ws.root / "shown.json"
    with out.open("wb") as stdout:
        proc = subprocess.run(  # noqa: S603 - this interpreter, fixed code
            [sys.executable, "-c", _SHOW_PEAK],
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            check=False,
            timeout=120,
        )
    peak, code = proc.stderr.strip().splitlines()[-1].split()[1:]
    assert code == "0", proc.stderr
    return int(peak), json.loads(out.read_bytes())


def test_show_json_streams_its_array_in_bounded_memory(tmp_path: Path) -> None:
    """Five thousand more records must cost show --json nowhere near their bytes: the
    array is printed as the ledger is read, and is the same document as before."""
    peaks, sizes = [], []
    for count in (1000, 6000):
        ws = Workspace.at(tmp_path / str(count))
        ws.ledger_path.parent.mkdir(parents=True)
        write_chain(ws.ledger_path, records=count)
        peak, document = _show_peak(ws)
        assert [r["seq"] for r in document["records"]] == list(range(1, count + 1))
        assert document["records"][0] == json.loads(ws.ledger_path.read_bytes().splitlines()[0])
        assert document["skipped"] == [] and document["ledger"] == str(ws.ledger_path)
        peaks.append(peak)
        sizes.append(ws.ledger_path.stat().st_size)
    grown = peaks[1] - peaks[0]
    assert grown < (sizes[1] - sizes[0]) / 4, f"peaks {peaks} for ledgers of {sizes} bytes"


def test_show_json_prints_the_document_dump_json_would(ws: Workspace) -> None:
    """The streamed document is byte for byte what printing it whole gives."""
    ws.ledger_path.parent.mkdir(parents=True)
    write_chain(ws.ledger_path, records=3)
    with ws.ledger_path.open("ab") as fh:
        fh.write(b"not a record\n")
    shown = run_cli(ws, "ledger", "show", "--json")
    assert shown.returncode == 1
    whole = json.loads(shown.stdout)
    assert shown.stdout == json.dumps(whole, indent=2, sort_keys=True) + "\n"
    assert len(whole["records"]) == 3 and whole["skipped"][0]["why"] == "malformed"
    empty = Workspace.at(ws.root / "empty")
    empty.ledger_path.parent.mkdir(parents=True)
    empty.ledger_path.write_bytes(b"")
    none = run_cli(empty, "ledger", "show", "--json")
    assert none.returncode == 0 and json.loads(none.stdout)["records"] == []
