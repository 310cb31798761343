"""`imagekit ledger sync --key PUB`: records proved on other machines, brought home.

A final pull recorded on a cluster node, an audit made by a CI runner: each signed its
attestation beside the image. Sync reads the attestations attached to the images this
ledger names (by digest), verifies each (signed by one of the keys, naming that digest:
imagekit.attest.collect), and appends a record for each one the ledger lacks (no record
carries its envelope digest yet), of the stage's own kind, marked as imported with the key
that signed it. Nothing is ever edited; running it twice appends nothing the second time.

Imported: every kind whose spec says how (imagekit.kinds: its predicate's ``imports``):
audits, vulnerability scans (cosign's vuln predicate), mirror verifications, final pulls and
GPU preflights. Build provenance is not imported (a build record needs the local build's
evidence); it stays verifiable in the registry.

``--from PIECE`` merges what other copies of this ledger appended (the nightly's matrix: one
CI job a plan, each appending to its own checkout's ledger, its ledger and evidence uploaded
as the job's piece). A piece must verify in this workspace (its chain, and every evidence
file it names, which the piece's evidence/ brought here); nothing is merged from any piece
unless all verify. Each record this ledger lacks (the same time, host, kind, plan, images,
status, details and evidence: a shared history is already here) is appended with its own
time and host, its scope saying it was merged from a piece, from which line, and that a
piece is not signed: what it proves is what the chain and the evidence hashes prove, where
an attestation, imported with ``--key``, proves who signed it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagekit.attest.collect import VerifiedAttestation, collect
from imagekit.attest.keys import PublicKey, load_public_key
from imagekit.errors import LedgerBroken, ReferenceFormatError, UsageError
from imagekit.files import open_regular
from imagekit.kinds import KINDS, by_predicate
from imagekit.kinds.spec import Imported as ImportedRecord
from imagekit.ledger.file import holding
from imagekit.ledger.readback import Entry, Line, iter_records, passes
from imagekit.ledger.record import LedgerRecord, encode_line
from imagekit.ledger.store import append_record, evidence_path, within_root
from imagekit.ledger.verify import verify_lines
from imagekit.refs import Digest, Reference, parse_reference
from imagekit.registry.client import RegistryClient
from imagekit.workspace import Workspace


@dataclass(frozen=True)
class Imported:
    seq: int
    kind: str
    image: str
    attestation: Digest
    key: str

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "kind": self.kind,
            "image": self.image,
            "attestation": str(self.attestation),
            "key": self.key,
        }


@dataclass(frozen=True)
class Merged:
    """A record merged from a ledger piece: its seq here, and where it came from."""

    seq: int
    kind: str
    plan: str | None
    status: str
    piece: str
    piece_seq: int
    line: str  # the chain hash of its line in the piece

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "kind": self.kind,
            "plan": self.plan,
            "status": self.status,
            "piece": self.piece,
            "piece_seq": self.piece_seq,
            "line": self.line,
        }


@dataclass(frozen=True)
class SyncResult:
    images: tuple[str, ...]
    imported: tuple[Imported, ...]
    already: int
    skipped: tuple[str, ...]  # attestations not imported, and why
    merged: tuple[Merged, ...] = ()
    already_merged: int = 0  # records of the pieces this ledger held already

    @property
    def ok(self) -> bool:
        return True

    def to_json(self) -> dict[str, Any]:
        return {
            "images": list(self.images),
            "imported": [i.to_json() for i in self.imported],
            "already_in_ledger": self.already,
            "skipped": list(self.skipped),
            "merged": [m.to_json() for m in self.merged],
            "already_merged": self.already_merged,
        }


def _pinned_images(workspace: Workspace, plans: Sequence[str]) -> dict[str, str | None]:
    """Every repo@digest the ledger names (of PLANS when given), with the plan it was for."""
    found: dict[str, str | None] = {}
    with iter_records(workspace.ledger_path) as records:
        for record in records:
            if plans and record.plan not in plans:
                continue
            for value in record.images.values():
                try:
                    ref = parse_reference(value)
                except ReferenceFormatError:
                    continue
                if ref.digest is not None:
                    found.setdefault(str(ref.pinned_only()), record.plan)
    return found


def _known(workspace: Workspace) -> set[str]:
    """Every attestation a record of the ledger names (the pipeline's push record names the
    audit's too, signed there once the image had a registry digest): each kind's
    ``*attestation`` detail keys."""
    keys = {spec.name: spec.attestation_keys() for spec in KINDS}
    with iter_records(workspace.ledger_path) as records:
        return {
            str(record.details[key])
            for record in records
            for key in keys[record.kind]
            if isinstance(record.details.get(key), str)
        }


def _record_of(attestation: VerifiedAttestation, marked: str) -> tuple[str, ImportedRecord] | None:
    """(kind, record) for an attestation its kind knows how to import, or None."""
    spec = by_predicate(attestation.predicate_type)
    if spec is None or spec.predicate is None or spec.predicate.imports is None:
        return None
    made = spec.predicate.imports(attestation, marked)
    return None if made is None else (spec.name, made)


def _identity(record: LedgerRecord) -> bytes:
    """What makes two records the same record, whichever ledger holds them and at which seq:
    the sha256 of those fields, so that what is held per record stays 32 bytes. Evidence
    counts by the hash of its bytes, not by its path, which differs between machines and
    with how a path is written (``evidence/x``, ``./evidence/x``)."""
    document = record.to_json()
    same = {key: document[key] for key in _SAME}
    same["evidence"] = record.evidence.sha256 if record.evidence else None
    return hashlib.sha256(encode_line(same)).digest()


_SAME = ("time", "host", "kind", "plan", "images", "status", "details")


def _outside(workspace: Workspace, lines: Iterator[Line], found: list[str]) -> Iterator[Line]:
    """The lines as they are, noting in ``found`` each record whose evidence lies outside
    the workspace (an absolute path, or one that climbs out with ``..``)."""
    for line in lines:
        if isinstance(line, Entry) and line.record.evidence is not None:
            named = line.record.evidence.path
            if not within_root(named):
                found.append(f"line {line.line_no} names evidence outside this workspace: {named}")
        yield line


def _check_piece(workspace: Workspace, piece: Path, lines: Iterator[Line]) -> None:
    """A piece whose chain or evidence does not verify here is exit 1, naming the first
    problem; so is a piece whose record names evidence outside the workspace (a piece could
    otherwise anchor a record to any file of this host, ``../../etc/hostname``)."""
    outside: list[str] = []
    report = verify_lines(workspace, piece, _outside(workspace, lines, outside))
    if outside:
        raise LedgerBroken(
            f"the ledger piece {piece} does not verify here: {outside[0]}",
            hint="nothing was merged from any piece; a piece's evidence is merged from its "
            "evidence/ unpacked into this workspace",
        )
    if not report.ok:
        first = report.first
        raise LedgerBroken(
            f"the ledger piece {piece} does not verify here ({report.status}): "
            + (first.message if first else "it holds no record"),
            hint="nothing was merged from any piece; unpack the piece's evidence/ into this "
            "workspace, or leave the piece out",
        )


def _label(workspace: Workspace, piece: Path) -> str:
    """How the records name their piece: its path in the workspace, else its last three
    parts (``nightly-piece-demo-1-1/manifests/ledger.jsonl``), never a machine's path."""
    resolved = piece.resolve()
    try:
        return resolved.relative_to(workspace.root.resolve()).as_posix()
    except ValueError:
        return "/".join(resolved.parts[-3:])


def merge_pieces(workspace: Workspace, pieces: Sequence[Path]) -> tuple[list[Merged], int]:
    """Append what each piece holds and this ledger lacks; (merged, already held).

    Every piece is read under a shared lock held to the end, streamed twice (verified, then
    merged), so what is merged is exactly what verified, and memory stays bounded by the
    records merged, not by the pieces' length.
    """
    for piece in pieces:
        try:  # a FIFO, a device or a folder is named as such, before any read (exit 2)
            os.close(open_regular(piece, "ledger piece"))
        except FileNotFoundError:
            raise UsageError(
                f"--from {piece}: no such ledger piece",
                hint="give the ledger.jsonl a job uploaded, its evidence/ unpacked into this "
                "workspace",
            ) from None
        except OSError as exc:
            raise UsageError(
                f"--from {piece}: cannot read the ledger piece ({exc.strerror})"
            ) from None
        if workspace.ledger_path.exists() and piece.samefile(workspace.ledger_path):
            raise UsageError(f"--from {piece} is this ledger itself", hint="name a job's piece")
    with ExitStack() as stack:
        readers = [(piece, stack.enter_context(passes(piece))) for piece in pieces]
        for piece, again in readers:
            _check_piece(workspace, piece, again())
        # Which records the ledger lacks, and their appends, under one exclusive lock: a
        # second sync of the same piece waits, then finds them here.
        stack.enter_context(holding(workspace.ledger_path))
        with iter_records(workspace.ledger_path) as records:
            held = {_identity(record) for record in records}
        merged: list[Merged] = []
        already = 0
        for piece, again in readers:
            label = _label(workspace, piece)
            for entry in again():
                if not isinstance(entry, Entry):
                    continue  # verified above: there is none
                record = entry.record
                identity = _identity(record)
                if identity in held:
                    already += 1
                    continue
                evidence = evidence_path(workspace, record.evidence) if record.evidence else None
                made = append_record(
                    workspace,
                    record.kind,
                    plan=record.plan,
                    images=record.images,
                    status=record.status,
                    scope=(
                        f"{record.scope} [merged from the ledger piece {label}, seq "
                        f"{record.seq}, line {entry.digest}; its chain and evidence verified, "
                        "a piece is not signed]"
                    ),
                    evidence=evidence,
                    details=record.details,
                    made=(record.time, record.host),
                )
                held.add(identity)
                merged.append(
                    Merged(
                        made.seq, record.kind, record.plan, record.status, label, record.seq,
                        entry.digest,
                    )
                )  # fmt: skip
    return merged, already


def sync_ledger(
    workspace: Workspace,
    key_paths: Sequence[Path],
    plans: Sequence[str] = (),
    *,
    insecure: Sequence[str] = (),
    pieces: Sequence[Path] = (),
) -> SyncResult:
    if not key_paths and not pieces:
        raise UsageError(
            "give at least one --key PUB or --from PIECE",
            hint="imagekit ledger sync --key ci.pub, or --from job/manifests/ledger.jsonl",
        )
    merged, already_merged = merge_pieces(workspace, pieces) if pieces else ([], 0)
    if not key_paths:
        return SyncResult((), (), 0, (), tuple(merged), already_merged)
    keys: tuple[PublicKey, ...] = tuple(load_public_key(path) for path in key_paths)
    images = _pinned_images(workspace, plans)
    known = _known(workspace)
    imported: list[Imported] = []
    skipped: list[str] = []
    already = 0
    with RegistryClient(insecure=insecure) as client:
        for image, plan in images.items():
            ref = parse_reference(image)
            assert ref.digest is not None  # noqa: S101 - _pinned_images keeps pinned ones
            collected = collect(client, Reference(ref.registry, ref.repository), ref.digest, keys)
            for attestation in collected.verified:
                digest = str(attestation.envelope_digest)
                if digest in known:
                    already += 1
                    continue
                marked = f"imported: signed by {attestation.key.key_id} ({attestation.key.source})"
                made = _record_of(attestation, marked)
                if made is None:
                    skipped.append(f"{digest} ({attestation.predicate_type}): not imported")
                    continue
                kind, found = made
                record = append_record(
                    workspace,
                    kind,
                    plan=plan,
                    images={"image": image, **found.images},
                    status=found.status,
                    scope=f"{found.scope} [{marked}; attestation {digest}]",
                    details=found.details,
                )
                known.add(digest)
                imported.append(
                    Imported(record.seq, kind, image, attestation.envelope_digest, marked)
                )
    return SyncResult(
        tuple(images), tuple(imported), already, tuple(skipped), tuple(merged), already_merged
    )
