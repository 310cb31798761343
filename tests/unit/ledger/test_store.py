"""The ledger's record format, hash chain, verify, repair and show, on real files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from imagekit.errors import LedgerBroken, RecordRefused, UsageError
from imagekit.ledger import (
    KINDS,
    LedgerRecord,
    NoteDetails,
    PushDetails,
    append_record,
    read_records,
    repair,
    verify,
)
from imagekit.workspace import Workspace
from tests.unit.ledger.support import DIGEST_A, ledger_lines, note, run_cli

DIGEST_B = "sha256:" + "b" * 64


def test_append_writes_every_field_and_chains_exact_bytes(ws: Workspace) -> None:
    evidence = ws.evidence_dir / "run" / "report.json"
    evidence.parent.mkdir(parents=True)
    evidence.write_bytes(b'{"ok": true}\n')
    first = append_record(
        ws,
        "audit",
        plan="sglang",
        images={"image": f"reg/x@{DIGEST_A}"},
        status="CPU_PASS",
        scope="CPU only; proves nothing about GPU service",
        evidence=evidence,
        details={"report": {"failing": []}},
    )
    second = note(ws, 2)
    lines = ledger_lines(ws)
    assert len(lines) == 2
    doc = json.loads(lines[0])
    assert set(doc) == {
        "schema",
        "seq",
        "time",
        "kind",
        "plan",
        "images",
        "status",
        "scope",
        "evidence",
        "imagekit",
        "host",
        "details",
        "prev",
    }
    assert doc["schema"] == 1 and doc["seq"] == 1 and doc["prev"] is None
    assert doc["time"].endswith("Z")
    assert doc["evidence"] == {
        "path": "evidence/run/report.json",
        "sha256": "sha256:" + hashlib.sha256(b'{"ok": true}\n').hexdigest(),
    }
    assert first.status == "CPU_PASS" and first.details == {"report": {"failing": []}}
    assert second.seq == 2
    assert second.prev == "sha256:" + hashlib.sha256(lines[0]).hexdigest()
    assert json.loads(lines[1])["prev"] == second.prev
    report = verify(ws)
    assert report.ok and report.records == 2 and report.evidence_checked == 1
    assert report.head == "sha256:" + hashlib.sha256(lines[1]).hexdigest()


@pytest.mark.parametrize("size", [0, 1, 65_000, 65_536, 200_000])
def test_chain_holds_across_long_lines(ws: Workspace, size: int) -> None:
    """append reads the previous line backwards in 64 KiB blocks; long lines must chain."""
    for n in range(3):
        append_record(
            ws,
            "note",
            plan=None,
            images={},
            status="ok",
            scope="",
            details={"n": n, "x": "y" * size},
        )
        note(ws, n)
    report = verify(ws)
    assert report.ok and report.records == 6


def test_every_kind_is_accepted_and_unknown_is_usage_error(ws: Workspace) -> None:
    for kind in KINDS:
        append_record(ws, kind, plan=None, images={}, status="s", scope="")
    assert [r.kind for r in read_records(ws.ledger_path)] == list(KINDS)
    with pytest.raises(UsageError, match="unknown ledger record kind"):
        append_record(ws, "deploy", plan=None, images={}, status="s", scope="")


def test_read_back_refuses_unknown_fields(ws: Workspace) -> None:
    note(ws, 1)
    doc = json.loads(ledger_lines(ws)[0])
    doc["extra"] = 1
    with pytest.raises(ValueError, match="extra"):
        LedgerRecord.from_json(doc)


@pytest.mark.parametrize(
    ("details", "scope"),
    [
        ({"password": "hunter2"}, ""),
        ({"nested": [{"Authorization": "x"}]}, ""),
        ({}, "sent Authorization: Basic dXNlcjpwYXNz"),
        ({"log": "Bearer eyJhbGciOiJFUzI1NiJ9.e30.sig"}, ""),
        ({"ca": "-----BEGIN CERTIFICATE-----\nMIIB\n"}, ""),
    ],
)
def test_credentials_are_refused_not_scrubbed(
    ws: Workspace, details: dict[str, object], scope: str
) -> None:
    with pytest.raises(UsageError, match="credential"):
        append_record(ws, "note", plan=None, images={}, status="s", scope=scope, details=details)
    assert not ws.ledger_path.exists() or ws.ledger_path.read_bytes() == b""


def test_prose_about_auth_is_not_mistaken_for_a_credential(ws: Workspace) -> None:
    scope = "a basic roundtrip passed; Bearer tokens are never recorded; authorization: refused"
    rec = append_record(
        ws, "note", plan=None, images={}, status="s", scope=scope, details={"auth": "token"}
    )
    assert rec.scope == scope
    with pytest.raises(UsageError, match="credential"):
        append_record(
            ws,
            "note",
            plan=None,
            images={},
            status="s",
            scope="",
            details={"header": "Basic dXNlcjpwYXNzd29yZA=="},
        )


def test_missing_evidence_is_refused(ws: Workspace) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        append_record(
            ws, "note", plan=None, images={}, status="s", scope="", evidence=ws.root / "nope"
        )


def test_verify_names_an_edited_record(ws: Workspace) -> None:
    for n in range(5):
        note(ws, n)
    lines = ledger_lines(ws)
    lines[1] = lines[1].replace(b'"status":"ok"', b'"status":"OK"')
    ws.ledger_path.write_bytes(b"".join(lines))
    report = verify(ws)
    assert not report.ok
    assert report.first is not None
    assert (report.first.kind, report.first.seq, report.first.line) == ("edited", 2, 2)
    assert len(report.problems) == 1


def test_verify_names_a_deleted_record(ws: Workspace) -> None:
    for n in range(5):
        note(ws, n)
    lines = ledger_lines(ws)
    del lines[2]
    ws.ledger_path.write_bytes(b"".join(lines))
    report = verify(ws)
    assert report.first is not None
    assert report.first.kind == "deleted" and report.first.seq == 4
    assert "seq 3 missing" in report.first.message


def test_verify_names_swapped_records(ws: Workspace) -> None:
    for n in range(5):
        note(ws, n)
    lines = ledger_lines(ws)
    lines[1], lines[2] = lines[2], lines[1]
    ws.ledger_path.write_bytes(b"".join(lines))
    report = verify(ws)
    assert report.first is not None
    assert (report.first.kind, report.first.line, report.first.seq) == ("reordered", 2, 3)
    assert "seq 2 comes later" in report.first.message


def test_verify_finds_a_reformatted_line_and_a_changed_evidence_file(ws: Workspace) -> None:
    evidence = ws.root / "evidence" / "log.txt"
    evidence.parent.mkdir(parents=True)
    evidence.write_text("build ok\n")
    append_record(ws, "build", plan="p", images={}, status="built", scope="", evidence=evidence)
    note(ws, 2)
    evidence.write_text("build ok, edited\n")
    report = verify(ws)
    assert [p.kind for p in report.problems] == ["evidence-changed"]
    assert "evidence/log.txt" in report.problems[0].message
    evidence.unlink()
    assert [p.kind for p in verify(ws).problems] == ["evidence-missing"]


def test_edit_of_newest_record_is_found_against_a_known_head(ws: Workspace) -> None:
    for n in range(3):
        note(ws, n)
    head = verify(ws).head
    assert head is not None
    lines = ledger_lines(ws)
    lines[-1] = lines[-1].replace(b'"status":"ok"', b'"status":"no"')
    ws.ledger_path.write_bytes(b"".join(lines))
    assert verify(ws).ok  # the chain alone cannot see it: documented
    report = verify(ws, head=head)
    assert [p.kind for p in report.problems] == ["head-mismatch"]


def test_torn_line_is_reported_refused_and_repaired(ws: Workspace) -> None:
    for n in range(3):
        note(ws, n)
    complete = ws.ledger_path.read_bytes()
    with ws.ledger_path.open("ab") as fh:
        fh.write(b'{"details":{},"evidence":nu')
    report = verify(ws)
    assert [p.kind for p in report.problems] == ["torn"]
    assert report.first is not None and report.first.line == 4
    assert f"offset {len(complete)}" in report.first.message
    assert "27 bytes" in report.first.message
    with pytest.raises(LedgerBroken, match="torn"):
        note(ws, 4)
    result = repair(ws)
    assert result.repaired and result.kept_records == 3 and result.moved_bytes == 27
    assert result.quarantine is not None
    assert result.quarantine.read_bytes() == b'{"details":{},"evidence":nu'
    assert ws.ledger_path.read_bytes() == complete
    assert verify(ws).ok
    assert note(ws, 4).seq == 4
    assert not repair(ws).repaired


def test_repair_refuses_an_edited_ledger(ws: Workspace) -> None:
    """A line that is not a record with records after it is an edit: a person's to look at
    (one after the last record is moved aside: tests/unit/ledger/test_repair.py)."""
    note(ws, 1)
    (record,) = ledger_lines(ws)
    ws.ledger_path.write_bytes(record + b"not json\n" + record)
    with pytest.raises(LedgerBroken, match="line 2"):
        repair(ws)


def test_verify_of_missing_ledger_is_usage_error(ws: Workspace) -> None:
    with pytest.raises(UsageError, match="no ledger"):
        verify(ws)


def test_cli_verify_repair_and_ledger_flag(ws: Workspace, tmp_path: Path) -> None:
    for n in range(3):
        note(ws, n)
    ok = run_cli(ws, "ledger", "verify", "--json")
    assert ok.returncode == 0
    assert json.loads(ok.stdout)["records"] == 3
    with ws.ledger_path.open("ab") as fh:
        fh.write(b'{"torn')
    broken = run_cli(ws, "ledger", "verify", "--json")
    assert broken.returncode == 1
    document = json.loads(broken.stdout)
    assert document["ok"] is False and document["first_problem"]["kind"] == "torn"
    human = run_cli(ws, "ledger", "verify")
    assert human.returncode == 1 and "line 4 is torn: 6 bytes" in human.stdout
    fixed = run_cli(ws, "ledger", "repair", "--json")
    assert fixed.returncode == 0 and json.loads(fixed.stdout)["kept_records"] == 3
    assert run_cli(ws, "ledger", "verify").returncode == 0
    # --ledger moves it: another file, here a copy with one record deleted.
    moved = tmp_path / "elsewhere.jsonl"
    lines = ledger_lines(ws)
    moved.write_bytes(lines[0] + lines[2])
    other = run_cli(ws, "ledger", "verify", "--ledger", str(moved), "--json")
    assert other.returncode == 1
    assert json.loads(other.stdout)["first_problem"]["kind"] == "deleted"
    missing = run_cli(ws, "ledger", "verify", "--ledger", str(tmp_path / "none.jsonl"))
    assert missing.returncode == 2


def test_cli_show_and_lock(ws: Workspace) -> None:
    note(ws, 1, plan="a")
    shown = run_cli(ws, "ledger", "show", "--plan", "a")
    assert shown.returncode == 0 and "note" in shown.stdout and "n1" in shown.stdout
    out = ws.root / "manifests" / "images.lock.json"
    locked = run_cli(ws, "ledger", "lock", "-o", str(out))
    assert locked.returncode == 0
    assert json.loads(out.read_text())["ledger"]["records"] == 1
    printed = run_cli(ws, "ledger", "lock")
    assert printed.stdout.encode() == out.read_bytes()


def test_details_are_typed_by_kind_and_a_misspelt_key_is_refused(ws: Workspace) -> None:
    """A push record whose manifest digest key is misspelt would leave the lock saying "not
    recorded"; the kind's model refuses it before anything is written."""
    with pytest.raises(UsageError, match="PushDetails"):
        append_record(
            ws, "push", plan="p", images={}, status="pushed", scope="", details={"manifest": "x"}
        )
    assert not ws.ledger_path.exists()
    rec = append_record(
        ws,
        "push",
        plan="p",
        images={},
        status="pushed",
        scope="",
        details=PushDetails(manifest_digest=DIGEST_B),
    )
    info: PushDetails = rec.info
    assert info.manifest_digest == DIGEST_B and info.config_digest is None
    # Only the fields set are written, so a field added later never changes old bytes.
    assert b'"details":{"manifest_digest"' in ws.ledger_path.read_bytes()
    with pytest.raises(UsageError, match="needs PushDetails"):
        append_record(
            ws, "push", plan="p", images={}, status="pushed", scope="", details=NoteDetails()
        )


def test_a_line_whose_details_do_not_fit_its_kind_is_malformed(ws: Workspace) -> None:
    append_record(ws, "note", plan=None, images={}, status="s", scope="")
    line = json.loads(ws.ledger_path.read_bytes())
    line.update(kind="push", details={"manifest": "x"}, seq=2)
    with ws.ledger_path.open("ab") as fh:
        fh.write(json.dumps(line, sort_keys=True, separators=(",", ":")).encode() + b"\n")
    report = verify(ws)
    assert [p.kind for p in report.problems] == ["malformed"] and report.records == 1


# ------------------------------------------------------------------ a tail that does not verify


def _rewrite_tail(ws: Workspace, how: str) -> None:
    lines = ledger_lines(ws)
    if how == "duplicated":
        lines.append(lines[-1])
    elif how == "edited":
        lines[-1] = lines[-1].replace(b'"scope":"n2"', b'"scope":"n2 (edited)"')
        record = json.loads(lines[-1])
        record["prev"] = "sha256:" + "e" * 64
        lines[-1] = json.dumps(record, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    elif how == "malformed":
        lines.append(b'{"not": "a record"}\n')
    elif how == "nested 1,000 deep":
        lines.append(b"[" * 1000 + b"]" * 1000 + b"\n")
    elif how == "hand-formatted":
        lines[-1] = json.dumps(json.loads(lines[-1]), indent=1).encode().replace(b"\n", b" ")
        lines[-1] += b"\n"
    elif how == "torn":
        lines.append(b'{"seq":4,"to')
    ws.ledger_path.write_bytes(b"".join(lines))


@pytest.mark.parametrize(
    ("how", "named"),
    [
        ("duplicated", "repeats seq 3"),
        ("edited", "does not chain"),
        ("malformed", "not a ledger record"),
        ("nested 1,000 deep", "not a ledger record"),
        ("hand-formatted", "not in the form imagekit writes"),
        ("torn", "torn line"),
    ],
)
def test_an_append_onto_a_tail_that_does_not_verify_is_refused(
    ws: Workspace, how: str, named: str
) -> None:
    for n in range(3):
        note(ws, n)
    _rewrite_tail(ws, how)
    before = ws.ledger_path.read_bytes()
    with pytest.raises(RecordRefused) as refused:
        note(ws, 9)
    assert named in refused.value.message
    assert refused.value.hint is not None and "imagekit ledger repair" in refused.value.hint
    assert refused.value.exit_code == 1
    assert ws.ledger_path.read_bytes() == before  # nothing written


@pytest.mark.parametrize(
    ("command", "said"),
    [
        (("ledger", "verify"), "line 4 is not a ledger record (2001 bytes)"),
        (("ledger", "show"), "3 record(s)"),
        (("ledger", "lock"), "line 4 is not a ledger record (2001 bytes)"),
        (("ledger", "sync", "--from", "PIECE"), "line 4 is not a ledger record (2001 bytes)"),
    ],
)
def test_a_line_nested_1000_deep_is_reported_by_every_command_not_a_crash(
    ws: Workspace, tmp_path: Path, command: tuple[str, ...], said: str
) -> None:
    """JSON nested 1,000 deep was a RecursionError (exit 70) in every ledger command; the
    line is now one that is not a record: reported, exit 1."""
    for n in range(3):
        note(ws, n)
    _rewrite_tail(ws, "nested 1,000 deep")
    piece = tmp_path / "piece.jsonl"
    piece.write_bytes(ws.ledger_path.read_bytes())
    done = run_cli(ws, *(str(piece) if part == "PIECE" else part for part in command))
    assert done.returncode == 1, done.stderr
    assert said in done.stdout + done.stderr
    assert "crashed" not in done.stderr


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_a_number_that_is_not_finite_is_never_written_into_a_line(
    ws: Workspace, value: float
) -> None:
    """A bare NaN made the line unreadable to strict readers; the append is refused before
    anything is written, naming where the number is."""
    note(ws, 1)
    before = ws.ledger_path.read_bytes()
    with pytest.raises(UsageError, match=r"not finite: .* at \$\.details\.busbw") as refused:
        append_record(
            ws, "note", plan="p", images={}, status="ok", scope="s", details={"busbw": value}
        )
    assert refused.value.exit_code == 2
    assert ws.ledger_path.read_bytes() == before
