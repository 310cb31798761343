"""imagekit/ledger/sync.py's ``--from PIECE``: the records a CI matrix's jobs appended, each to
its own copy of the ledger, merged into one that verifies.

The attestation side of sync needs a registry and is tested in
tests/integration/attest/test_ledger_sync.py; a piece is a file, so these use real ledgers in
temporary workspaces, appended by append_record as a job appends them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from imagekit.errors import LedgerBroken, UsageError
from imagekit.ledger import read_records, verify
from imagekit.ledger.record import SCHEMA_VERSION, encode_line
from imagekit.ledger.sync import sync_ledger
from imagekit.workspace import Workspace
from tests.support.cli import MAIN
from tests.support.ledger_chain import write_chain
from tests.unit.ledger.support import DIGEST_A, Rec, run_cli


def _evidence(ws: Workspace, name: str, text: str) -> Path:
    path = ws.root / "evidence" / name / "night.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _checkout(committed: Workspace, root: Path) -> Workspace:
    """A job's checkout: the committed ledger (and its evidence) copied."""
    shutil.copytree(committed.root, root)
    return Workspace.at(root)


def _unpack(job: Workspace, into: Workspace) -> Path:
    """What the combining job downloads: the job's evidence/ into the workspace, its
    ledger beside it as the piece."""
    shutil.copytree(job.root / "evidence", into.root / "evidence", dirs_exist_ok=True)
    piece = into.root / "pieces" / job.root.name / "ledger.jsonl"
    piece.parent.mkdir(parents=True)
    shutil.copy2(job.ledger_path, piece)
    return piece


@pytest.fixture
def matrix(tmp_path: Path) -> tuple[Workspace, Path, Path]:
    """The committed ledger, two jobs (one plan each) that appended to their copies, and the
    combining job's checkout with both pieces unpacked: (combined, piece a, piece b)."""
    committed = Workspace.at(tmp_path / "committed")
    Rec("push", "a", {"image": "a:1", "pushed": f"r/a@{DIGEST_A}"}, "pushed").append(committed)
    Rec("push", "b", {"image": "b:1", "pushed": f"r/b@{DIGEST_A}"}, "pushed").append(committed)
    jobs = []
    for plan in ("a", "b"):
        job = _checkout(committed, tmp_path / f"job-{plan}")
        image = {"image": f"r/{plan}@{DIGEST_A}"}
        Rec("build", plan, image, "built", f"rebuild of {plan}").append(job)
        Rec(
            "note", plan, {"image": f"r/{plan}@{DIGEST_A}"}, "ok", f"night of {plan}",
            evidence=_evidence(job, f"{plan}-night", f'{{"plan": "{plan}"}}'),
        ).append(job)  # fmt: skip
        jobs.append(job)
    combined = _checkout(committed, tmp_path / "combined")
    return combined, _unpack(jobs[0], combined), _unpack(jobs[1], combined)


def test_two_jobs_pieces_merge_into_one_ledger_that_verifies(
    matrix: tuple[Workspace, Path, Path],
) -> None:
    combined, piece_a, piece_b = matrix
    made = {r.scope: (r.time, r.host) for p in (piece_a, piece_b) for r in read_records(p)}
    result = sync_ledger(combined, (), pieces=(piece_a, piece_b))
    records = read_records(combined.ledger_path)
    assert [(r.seq, r.kind, r.plan) for r in records] == [
        (1, "push", "a"), (2, "push", "b"),
        (3, "build", "a"), (4, "note", "a"), (5, "build", "b"), (6, "note", "b"),
    ]  # fmt: skip
    assert [(m.seq, m.piece_seq) for m in result.merged] == [(3, 3), (4, 4), (5, 3), (6, 4)]
    assert result.already_merged == 4  # the committed history each piece shares
    report = verify(combined)
    assert report.ok and report.evidence_checked == 2, report.to_json()
    for record in records[2:]:
        original, _, marker = record.scope.partition(" [merged from the ledger piece ")
        assert (record.time, record.host) == made[original]  # when and where it was made
        assert marker.startswith("pieces/job-") and "a piece is not signed" in marker
    # A second sync of the same pieces finds everything there and appends nothing.
    before = combined.ledger_path.read_bytes()
    again = sync_ledger(combined, (), pieces=(piece_a, piece_b))
    assert again.merged == () and again.already_merged == 8
    assert combined.ledger_path.read_bytes() == before


def test_a_piece_whose_evidence_is_not_here_merges_nothing_from_any_piece(
    matrix: tuple[Workspace, Path, Path],
) -> None:
    combined, piece_a, piece_b = matrix
    (combined.root / "evidence" / "b-night" / "night.json").unlink()
    before = combined.ledger_path.read_bytes()
    with pytest.raises(LedgerBroken, match=r"does not verify here \(broken\)") as info:
        sync_ledger(combined, (), pieces=(piece_a, piece_b))
    assert info.value.exit_code == 1 and str(piece_b) in info.value.message
    assert combined.ledger_path.read_bytes() == before


def test_an_edited_piece_is_refused(matrix: tuple[Workspace, Path, Path]) -> None:
    combined, piece_a, _ = matrix
    lines = piece_a.read_bytes().splitlines(keepends=True)
    lines[2] = lines[2].replace(b'"built"', b'"BUILT"')
    piece_a.write_bytes(b"".join(lines))
    before = combined.ledger_path.read_bytes()
    with pytest.raises(LedgerBroken) as info:
        sync_ledger(combined, (), pieces=(piece_a,))
    assert info.value.exit_code == 1
    assert combined.ledger_path.read_bytes() == before


def test_neither_a_key_nor_a_piece_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--key PUB or --from PIECE"):
        sync_ledger(Workspace.at(tmp_path), ())


def test_the_command_merges_pieces_and_says_what(matrix: tuple[Workspace, Path, Path]) -> None:
    combined, piece_a, piece_b = matrix
    done = run_cli(
        combined, "ledger", "sync", "--from", str(piece_a), "--from", str(piece_b), "--json"
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert [(m["kind"], m["plan"]) for m in document["merged"]] == [
        ("build", "a"), ("note", "a"), ("build", "b"), ("note", "b"),
    ]  # fmt: skip
    assert document["already_merged"] == 4 and document["imported"] == []
    missing = run_cli(combined, "ledger", "sync", "--from", str(combined.root / "nope.jsonl"))
    assert missing.returncode == 2 and "no such ledger piece" in missing.stderr
    neither = run_cli(combined, "ledger", "sync")
    assert neither.returncode == 2 and "--key PUB or --from PIECE" in neither.stderr


def test_the_ledger_itself_is_no_piece(matrix: tuple[Workspace, Path, Path]) -> None:
    """Merging a ledger into itself would wait on its own lock; it is bad input instead."""
    combined, _, _ = matrix
    with pytest.raises(UsageError, match="is this ledger itself"):
        sync_ledger(combined, (), pieces=(combined.ledger_path,))


def test_a_piece_that_is_no_file_is_named_as_what_it_is(tmp_path: Path) -> None:
    """A FIFO or a link to a device was "no such ledger piece"; each is said as what it is,
    before anything is read (a FIFO is never waited on)."""
    ws = Workspace.at(tmp_path)
    fifo, zero = tmp_path / "piece.jsonl", tmp_path / "zero.jsonl"
    os.mkfifo(fifo)
    zero.symlink_to("/dev/zero")
    for piece, kind in (
        (fifo, "a FIFO"),
        (zero, "a character device (a symbolic link to /dev/zero)"),
    ):
        done = run_cli(ws, "ledger", "sync", "--from", str(piece), timeout=30)
        assert done.returncode == 2, done.stderr
        assert f"{piece}: the ledger piece is {kind}, not a regular file" in done.stderr
        assert not ws.ledger_path.exists()


def test_a_piece_naming_evidence_outside_the_workspace_is_refused(tmp_path: Path) -> None:
    """`../../etc/hostname` in a piece anchored a record to a file of this host, merged as
    its absolute path; now the piece does not verify (exit 1) and nothing is merged."""
    combined = Workspace.at(tmp_path / "combined")
    host_file = Path("/etc/hostname")
    record = json.loads(encode_line(json.loads(_one_record())))
    record["evidence"] = {
        "path": "../" * 30 + "etc/hostname",
        "sha256": "sha256:" + hashlib.sha256(host_file.read_bytes()).hexdigest(),
    }
    piece = tmp_path / "piece" / "ledger.jsonl"
    piece.parent.mkdir()
    piece.write_bytes(encode_line(record))
    with pytest.raises(LedgerBroken) as info:
        sync_ledger(combined, (), pieces=(piece,))
    assert info.value.exit_code == 1
    assert "line 1 names evidence outside this workspace: ../" in info.value.message
    assert not combined.ledger_path.exists()
    record["evidence"]["path"] = str(host_file)
    piece.write_bytes(encode_line(record))
    with pytest.raises(LedgerBroken, match="outside this workspace: /etc/hostname"):
        sync_ledger(combined, (), pieces=(piece,))


def _one_record() -> bytes:
    return json.dumps(
        {
            "schema": SCHEMA_VERSION, "seq": 1, "prev": None, "time": "2026-12-07T12:00:00Z",
            "kind": "note", "plan": "p", "images": {}, "status": "ok", "scope": "n",
            "evidence": None, "imagekit": "0", "host": "job", "details": {},
        }
    ).encode()  # fmt: skip


def test_sync_is_idempotent_when_evidence_is_a_link_to_another_disk(
    matrix: tuple[Workspace, Path, Path], tmp_path: Path
) -> None:
    """The evidence/ folder a link to another disk: records merged named it by its resolved,
    absolute path, so each sync appended them again; now by their path in the workspace."""
    combined, piece_a, piece_b = matrix
    elsewhere = tmp_path / "other-disk" / "evidence"
    shutil.move(combined.root / "evidence", elsewhere)
    (combined.root / "evidence").symlink_to(elsewhere)
    first = sync_ledger(combined, (), pieces=(piece_a, piece_b))
    assert len(first.merged) == 4
    again = sync_ledger(combined, (), pieces=(piece_a, piece_b))
    assert again.merged == () and again.already_merged == 8
    named = [r.evidence.path for r in read_records(combined.ledger_path) if r.evidence]
    assert named and all(path.startswith("evidence/") for path in named), named
    assert verify(combined).ok


def test_two_syncs_of_one_piece_at_once_merge_its_records_once(tmp_path: Path) -> None:
    """Two concurrent syncs of a 60-record piece gave 89 records; the read-compare-append
    now happens under one lock, so each record is merged once, whichever sync merges it."""
    piece = tmp_path / "job" / "ledger.jsonl"
    piece.parent.mkdir()
    write_chain(piece, records=300)
    combined = Workspace.at(tmp_path / "combined")
    children = [
        subprocess.Popen(
            [*MAIN, "ledger", "sync", "--from", str(piece)],
            env={**_clean_env(), "IMAGEKIT_ROOT": str(combined.root)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    for child in children:
        _, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
    merged = sorted(r.time for r in read_records(combined.ledger_path))
    assert merged == sorted(r.time for r in read_records(piece))
    assert verify(combined).ok


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("IMAGEKIT_")}
