"""Verify never vouches for what it cannot prove: an empty ledger, a file that is not a ledger
at all, a malformed head, and a forged ``prev`` blamed on the record that carries it."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import time
from pathlib import Path

import pytest

from imagekit.errors import ReferenceFormatError, UsageError
from imagekit.ledger import append_record, line_hash, verify
from imagekit.ledger.listing import LISTED
from imagekit.ledger.lockfile import write_lock
from imagekit.workspace import Workspace
from tests.support.ledger_chain import write_chain
from tests.unit.ledger.support import ledger_lines, notes, peak_bytes, run_cli

# ----------------------------------------------------------------------------- item 1


def test_an_empty_ledger_is_empty_not_verified(ws: Workspace) -> None:
    ws.ledger_path.parent.mkdir(parents=True)
    ws.ledger_path.write_bytes(b"")
    report = verify(ws)
    assert report.status == "empty" and not report.ok
    assert report.records == 0 and report.head is None
    shown = run_cli(ws, "ledger", "verify", "--json")
    assert shown.returncode == 1, shown.stdout
    document = json.loads(shown.stdout)
    assert document["ok"] is False and document["status"] == "empty"
    human = run_cli(ws, "ledger", "verify")
    assert human.returncode == 1 and "empty: nothing verified" in human.stdout


def test_an_emptied_ledger_fails_against_a_head_or_a_lock(ws: Workspace) -> None:
    notes(ws, 3)
    head = verify(ws).head
    assert head is not None
    lock = ws.root / "manifests" / "images.lock.json"
    write_lock(ws, lock)
    ws.ledger_path.write_bytes(b"")
    against_head = verify(ws, head=head)
    assert against_head.status == "broken"
    assert against_head.first is not None and against_head.first.kind == "head-mismatch"
    assert "empty" in against_head.first.message
    against_lock = run_cli(ws, "ledger", "verify", "--lock", str(lock), "--json")
    assert against_lock.returncode == 1
    document = json.loads(against_lock.stdout)
    assert document["status"] == "broken"
    assert "3 records" in document["first_problem"]["message"]


def test_a_lock_pins_the_record_it_was_written_from(ws: Workspace) -> None:
    """Records appended after the lock are fine; an edit of the locked head is not."""
    notes(ws, 2)
    lock = ws.root / "manifests" / "images.lock.json"
    write_lock(ws, lock)
    notes(ws, 2)
    assert run_cli(ws, "ledger", "verify", "--lock", str(lock)).returncode == 0
    lines = ledger_lines(ws)
    lines[1] = lines[1].replace(b'"scope":"n1"', b'"scope":"nX"')
    ws.ledger_path.write_bytes(b"".join(lines))
    report = run_cli(ws, "ledger", "verify", "--lock", str(lock), "--json")
    assert report.returncode == 1
    kinds = [p["kind"] for p in json.loads(report.stdout)["problems"]]
    assert "head-mismatch" in kinds


@pytest.mark.parametrize("what", ["fifo", "directory", "dev-zero"])
def test_a_ledger_that_is_not_a_regular_file_is_bad_input_at_once(
    ws: Workspace, tmp_path: Path, what: str
) -> None:
    if what == "fifo":
        path = tmp_path / "ledger.fifo"
        os.mkfifo(path)
    elif what == "directory":
        path = tmp_path / "ledger.d"
        path.mkdir()
    else:
        path = tmp_path / "zero.jsonl"
        path.symlink_to("/dev/zero")
    started = time.monotonic()
    for command in ("verify", "show", "repair", "lock"):
        done = run_cli(ws, "ledger", command, "--json", ledger=path, timeout=30)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert "not a regular file" in json.loads(done.stdout)["error"]["message"]
    assert time.monotonic() - started < 30
    elsewhere = dataclasses.replace(ws, ledger_path=path)
    with pytest.raises(UsageError, match="not a regular file"):
        append_record(elsewhere, "note", plan=None, images={}, status="s", scope="")


# ----------------------------------------------------------------------------- item 5


def _forge_prev(ws: Workspace, index: int) -> None:
    lines = ledger_lines(ws)
    record = json.loads(lines[index])
    record["prev"] = "sha256:" + "f" * 64
    lines[index] = json.dumps(record, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    ws.ledger_path.write_bytes(b"".join(lines))


def test_a_forged_prev_is_blamed_on_the_record_that_carries_it(ws: Workspace) -> None:
    notes(ws, 30)
    _forge_prev(ws, 23)  # seq 24
    report = verify(ws)
    assert [(p.kind, p.seq, p.line) for p in report.problems] == [("edited", 24, 24)]
    assert "seq 24" in report.problems[0].message and "prev" in report.problems[0].message
    assert "seq 23 (line 23) was edited" not in report.problems[0].message


def test_an_edited_record_is_still_blamed_on_itself(ws: Workspace) -> None:
    notes(ws, 30)
    lines = ledger_lines(ws)
    lines[22] = lines[22].replace(b'"scope":"n22"', b'"scope":"n99"')  # seq 23
    ws.ledger_path.write_bytes(b"".join(lines))
    report = verify(ws)
    assert [(p.kind, p.seq) for p in report.problems] == [("edited", 23)]


def test_a_forged_prev_in_the_newest_record_is_told_apart_by_the_head(ws: Workspace) -> None:
    notes(ws, 5)
    head_before = verify(ws).head
    _forge_prev(ws, 4)  # seq 5, the newest
    alone = verify(ws)
    assert alone.first is not None and alone.first.seq == 5
    assert "--head" in alone.first.message  # the chain alone cannot tell which one changed
    against = verify(ws, head=head_before)
    assert {(p.kind, p.seq) for p in against.problems} == {("edited", 5), ("head-mismatch", 5)}
    # With the head the newest record still has, the record before it is the edited one.
    lines = ledger_lines(ws)
    assert verify(ws, head=line_hash(lines[-1])).first is not None
    assert verify(ws, head=line_hash(lines[-1])).problems[0].seq == 4


# ----------------------------------------------------------------------------- item 6


@pytest.mark.parametrize("head", ["garbage", "sha256:xyz", "sha256:" + "A" * 64, ""])
def test_a_malformed_head_is_bad_input(ws: Workspace, head: str) -> None:
    notes(ws, 1)
    with pytest.raises(ReferenceFormatError):
        verify(ws, head=head)
    shown = run_cli(ws, "ledger", "verify", "--head", head, "--json")
    assert shown.returncode == 2, shown.stdout
    assert json.loads(shown.stdout)["error"]["exit_code"] == 2


def test_verify_holds_bounded_memory_whatever_the_ledger_length(tmp_path: Path) -> None:
    """A ten times longer ledger must not need ten times the memory: verify streams."""
    peaks = []
    for count in (500, 5000):
        ws = Workspace.at(tmp_path / str(count))
        ws.ledger_path.parent.mkdir(parents=True)
        write_chain(ws.ledger_path, records=count)
        report = verify(ws)
        assert report.ok and report.records == count
        peaks.append(peak_bytes(functools.partial(verify, ws)))
    small, large = peaks
    assert large < small * 2, f"peak {small} bytes for 500 records, {large} for 5000"


def test_problems_beyond_the_listed_are_counted_and_the_first_named(ws: Workspace) -> None:
    """A ledger of many broken lines is reported in bounded memory: the first problems
    listed in file order, the rest counted, the status broken."""
    ws.ledger_path.parent.mkdir(parents=True)
    ws.ledger_path.write_bytes(b"\n" * (LISTED + 5))
    report = verify(ws)
    assert report.status == "broken"
    assert len(report.problems) == LISTED and report.problems_not_listed == 5
    assert [p.line for p in report.problems[:2]] == [1, 2]
    assert report.to_json()["problems_not_listed"] == 5
    said = run_cli(ws, "ledger", "verify", ledger=ws.ledger_path)
    assert said.returncode == 1
    assert "BROKEN  and 5 more problems, not listed" in said.stdout
    assert "ledger broken: first problem at line 1: malformed" in said.stdout
