"""One ledger through one handle: each method is the function of the same name, on the
workspace's ledger, with the same refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.errors import LedgerBroken, RecordRefused, UsageError
from imagekit.ledger.ledger import Ledger
from imagekit.workspace import Workspace


def test_append_records_verify_lock_over_one_ledger(ws: Workspace) -> None:
    ledger = Ledger(ws)
    assert ledger.path == ws.ledger_path
    first = ledger.append("note", status="seen", scope="a note", images={"image": "x:1"})
    second = ledger.append("note", status="seen again", scope="another", plan="p")
    assert (first.seq, second.seq) == (1, 2)
    assert [(r.kind, r.status, r.plan) for r in ledger.records()] == [
        ("note", "seen", None),
        ("note", "seen again", "p"),
    ]
    assert [r.seq for r in ledger] == [1, 2]
    report = ledger.verify()
    assert report.ok and report.exit_code == 0 and report.records == 2
    assert ledger.verify(head=report.head).ok
    lock = ledger.lock(ws.root / "lock.json")
    assert lock.ok and (ws.root / "lock.json").is_file()


def test_an_empty_ledger_verifies_nothing_and_locks_nothing(ws: Workspace) -> None:
    ws.ledger_path.parent.mkdir(parents=True)
    ws.ledger_path.touch()
    report = Ledger(ws).verify()
    assert not report.ok and report.exit_code == 1 and report.status == "empty"
    with pytest.raises(LedgerBroken):
        Ledger(ws).lock()


def test_a_torn_tail_refuses_appends_until_repaired(ws: Workspace) -> None:
    ledger = Ledger(ws)
    ledger.append("note", status="one", scope="s")
    ledger.append("note", status="two", scope="s")
    whole = ws.ledger_path.read_bytes()
    ws.ledger_path.write_bytes(whole[:-1])
    with pytest.raises(RecordRefused):
        ledger.append("note", status="three", scope="s")
    repaired = ledger.repair()
    assert repaired.ok and repaired.completed
    assert ledger.append("note", status="three", scope="s").seq == 3
    assert ledger.verify().ok


def test_a_misspelt_kind_is_bad_input(ws: Workspace) -> None:
    with pytest.raises(UsageError, match="unknown ledger record kind"):
        Ledger(ws).append("nots", status="x", scope="y")


def test_no_workspace_means_the_current_directorys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("IMAGEKIT_ROOT", "IMAGEKIT_LEDGER"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    assert Ledger().path == Workspace.at(tmp_path).ledger_path
