"""The ledger: one append-only JSON-lines file recording every build, audit and pull.

Months later someone asks "which exact image did the cluster run, and what had been proved
about it?". The answer is this file (``manifests/ledger.jsonl`` by default; the environment
variable ``IMAGEKIT_LEDGER`` or ``--ledger`` moves it). A later success is a new record; a
failed build, a rejected fix, a "queued" copy job stay on record. Nothing ever rewrites a line.

Format
------
One JSON object a line, written compactly with sorted keys and UTF-8, ending in ``\\n``.
Fields (``LedgerRecord``): ``schema`` (1), ``seq`` (1, 2, ...), ``time`` (UTC, ISO 8601 with
``Z``), ``kind``, ``plan``, ``images`` (role -> reference or digest), ``status``, ``scope``
(the sentence saying what the status proves and what it does not), ``evidence`` (``path``
relative to the workspace root when inside it, and the ``sha256`` of its bytes), ``imagekit``
(version), ``host``, ``details`` (kind-specific, below) and ``prev``: the sha256 of the exact
bytes of the previous line including its newline (``null`` for the first record). That chain
is what ``verify`` recomputes; it hashes the bytes on disk, never a re-serialisation.

The chain finds an edited, deleted or reordered record anywhere but at the end: an edit of the
newest record is only visible against its hash recorded elsewhere, which is why ``verify``
prints the head hash, ``verify --head`` checks one, and the lock file carries it.

Appending
---------
Many processes append at once (nightly jobs in parallel). ``append_record`` takes an exclusive
``flock`` on the ledger, reads the last line to chain to it, writes the new line with one
``write`` on an ``O_APPEND`` descriptor and ``fsync``s before it lets go. A crash in the middle
leaves at most a torn last line (no newline); ``append_record`` then refuses to chain to it and
``repair`` moves it into a quarantine file beside the ledger without touching any complete
record.

Secrets
-------
A record must never carry a password, token, Authorization header or CA bundle. Nothing is
scrubbed silently: ``append_record`` refuses (UsageError) a record with a key named like a
credential or text that looks like one, so the caller's bug shows instead of being hidden.

Kinds and the ``details`` keys the lock rendering reads
------------------------------------------------------
``images`` roles: ``image`` (the image the record is about), ``base`` (its base), ``source``
and ``destination`` (mirror), ``pushed`` (the pinned reference a push produced).

build (status ``built``) / rejected-build (status ``rejected``, details.reason, details.step)
    images.image = the local tag or ID; images.base = base reference pinned by digest.
    details.image_id = engine image ID.
    details.base = {source_tag, index_digest, platform, manifest_digest, config_digest,
    compressed_layer_bytes, layer_digests} as ``imagekit inspect`` reports the base.
audit (status ``CPU_PASS`` | ``CPU_PASS_GPU_CLI_DEFERRED`` | ``CPU_CHECK_INCOMPLETE`` | ...)
    images.image = the audited reference or image ID.
    details.report = summary of the audit report (counts, failed checks); evidence = report.
vulnerability-scan (status ``clean`` | ``findings`` | ``unknown``)
    images.image; details.report = summary.
push (status ``pushed``)
    images.image = local image; images.pushed = ``repo@sha256:...`` (manifest digest).
    details.manifest_digest, details.config_digest.
mirror-verify (status = the verdict: ``identical`` | ``content-identical`` |
``config-differs`` | ``mismatch`` | ``error``)
    images.source, images.destination; details.message = the verdict sentence.
final-pull (status ``verified`` | ``mismatch`` | ``unknown``)
    images.image = ``repo@sha256:...``; details.image_id, details.repo_digests,
    details.engine_version, details.image_store (``classic`` | ``containerd``),
    details.expected_manifest_digest, details.expected_config_digest, details.where.
    details.image_id_means (what that store's image ID is).
    Records from ``pull --runtime containerd`` have details.source ``containerd``,
    details.image_store ``containerd-cri``, details.image_id = the CRI image ID (config
    digest), details.repository, details.target_digest (index or manifest pulled by),
    details.platform, details.platform_manifest_digest, details.chain_id,
    details.cri_references, details.kubelet_image_ref.
    Records from ``ledger record-pod`` are final-pull records with details.source ``pod``,
    details.pod, details.namespace, details.container, details.image_id_raw (and
    details.final_pull_seq when matched against a containerd final pull).
note (any status)
    free text in scope; details free.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from imagekit import __version__
from imagekit.errors import CouldNotFinish, LedgerBroken, UsageError
from imagekit.evidence import file_digest, utc_stamp
from imagekit.refs import Digest
from imagekit.workspace import Workspace

SCHEMA_VERSION = 1
Kind = Literal[
    "build",
    "rejected-build",
    "audit",
    "vulnerability-scan",
    "push",
    "mirror-verify",
    "final-pull",
    "note",
]
KINDS: tuple[str, ...] = get_args(Kind)

# Keys that name a credential; a record carrying one is refused whatever its value.
_SECRET_KEYS = re.compile(
    r"^(password|passwd|secret|token|access_token|refresh_token|identitytoken|"
    r"registrytoken|authorization|private_key|x-registry-auth)$",
    re.IGNORECASE,
)
# Text that looks like a credential wherever it sits (values, scope sentences, messages).
# Case matters for the token schemes so that prose ("a basic roundtrip") is not refused.
_SECRET_TEXT = re.compile(
    r"((?i:authorization\s*:\s*(basic|bearer)\b)"
    r"|\bBearer [A-Za-z0-9._~+/-]{16,}"
    r"|\bBasic (?=[A-Za-z0-9+/]*[A-Z0-9+/])(?=[A-Za-z0-9+/]*[a-z])[A-Za-z0-9+/]{12,}"
    r"|-----BEGIN [A-Z ]*(CERTIFICATE|PRIVATE KEY)-----"
    r"|\"auths\"\s*:)",
)
_READ_BACK = 64 * 1024


class EvidenceRef(BaseModel):
    """The main evidence file of a record: where it is and the sha256 of its bytes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    sha256: str


class LedgerRecord(BaseModel):
    """One line of the ledger, as read back (every field is required to be present)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_: int = Field(alias="schema")
    seq: int
    time: str
    kind: Kind
    plan: str | None
    images: dict[str, str]
    status: str
    scope: str
    evidence: EvidenceRef | None
    imagekit: str
    host: str
    details: dict[str, Any]
    prev: str | None

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    @classmethod
    def from_json(cls, data: Any) -> LedgerRecord:
        return cls.model_validate(data)


@dataclass(frozen=True)
class Entry:
    """A complete line read back: its position, its exact bytes and the parsed record."""

    line_no: int
    offset: int
    raw: bytes
    record: LedgerRecord

    @property
    def digest(self) -> str:
        return line_hash(self.raw)


def line_hash(raw: bytes) -> str:
    """The chain hash of a line: sha256 of its exact bytes, newline included."""
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def encode_line(document: dict[str, Any]) -> bytes:
    """The one serialisation the ledger writes: compact, sorted keys, UTF-8, newline."""
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return (text + "\n").encode("utf-8")


def _check_no_secrets(value: Any, where: str = "record") -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            if isinstance(key, str) and _SECRET_KEYS.match(key):
                raise UsageError(
                    f"refusing to write a ledger record with a credential-like key {key!r} "
                    f"in {where}",
                    hint="records must never carry credentials; drop that key",
                )
            _check_no_secrets(inner, f"{where}.{key}")
    elif isinstance(value, list | tuple):
        for index, inner in enumerate(value):
            _check_no_secrets(inner, f"{where}[{index}]")
    elif isinstance(value, str) and _SECRET_TEXT.search(value):
        raise UsageError(
            f"refusing to write a ledger record: {where} looks like it carries a credential "
            "(an Authorization header, a bearer/basic token, a key or a certificate)",
            hint="records must never carry credentials; pass only references and digests",
        )


def _evidence_ref(workspace: Workspace, evidence: Path) -> EvidenceRef:
    if not evidence.is_file():
        raise UsageError(
            f"evidence file {evidence} does not exist",
            hint="write the evidence before recording it",
        )
    resolved = evidence.resolve()
    root = workspace.root.resolve()
    try:
        shown = resolved.relative_to(root).as_posix()
    except ValueError:
        shown = resolved.as_posix()
    return EvidenceRef(path=shown, sha256=str(file_digest(resolved)))


def evidence_path(workspace: Workspace, ref: EvidenceRef) -> Path:
    path = Path(ref.path)
    return path if path.is_absolute() else workspace.root / path


@contextmanager
def _locked(path: Path, flags: int) -> Iterator[int]:
    """An fd on the ledger holding an exclusive flock until the block ends."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, flags | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise CouldNotFinish(
            f"cannot open the ledger {path}: {exc.strerror}",
            hint="check the path (IMAGEKIT_LEDGER / --ledger) and its permissions",
        ) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)  # closing releases the flock


def _tail(fd: int) -> tuple[bytes, int]:
    """The last line of the file (newline included) and the file size.

    Reads backwards in blocks so appending stays O(1) however long the ledger grows.
    """
    size = os.fstat(fd).st_size
    if size == 0:
        return b"", 0
    chunks: list[bytes] = []
    end = size
    while end > 0:
        start = max(0, end - _READ_BACK)
        chunk = os.pread(fd, end - start, start)
        # The last line starts after the last newline that is not the file's final byte.
        search_end = len(chunk) - 1 if end == size else len(chunk)
        cut = chunk.rfind(b"\n", 0, search_end)
        if cut >= 0:
            chunks.append(chunk[cut + 1 :])
            break
        chunks.append(chunk)
        end = start
    return b"".join(reversed(chunks)), size


def append_record(
    workspace: Workspace,
    kind: str,
    *,
    plan: str | None,
    images: dict[str, str],
    status: str,
    scope: str,
    evidence: Path | None = None,
    details: dict[str, Any] | None = None,
) -> LedgerRecord:
    """Append one record to the workspace's ledger, chained to the line before it.

    Safe against concurrent appenders (exclusive flock held from reading the tail to fsync)
    and refuses to chain to a torn last line: that needs ``imagekit ledger repair`` first.
    """
    if kind not in KINDS:
        raise UsageError(
            f"unknown ledger record kind {kind!r}",
            hint="one of: " + ", ".join(KINDS),
        )
    if not status:
        raise UsageError("a ledger record needs a status")
    evidence_ref = _evidence_ref(workspace, evidence) if evidence is not None else None
    body: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "time": datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z"),
        "kind": kind,
        "plan": plan,
        "images": dict(images),
        "status": status,
        "scope": scope,
        "evidence": evidence_ref.model_dump() if evidence_ref else None,
        "imagekit": __version__,
        "host": socket.gethostname(),
        "details": dict(details or {}),
    }
    _check_no_secrets(body)
    try:
        encode_line(body)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"ledger record details are not JSON: {exc}") from exc
    path = workspace.ledger_path
    with _locked(path, os.O_RDWR | os.O_APPEND | os.O_CREAT) as fd:
        last, size = _tail(fd)
        if last and not last.endswith(b"\n"):
            raise LedgerBroken(
                f"the ledger {path} ends in a torn line ({len(last)} bytes at offset "
                f"{size - len(last)} without a newline); refusing to chain to it",
                hint="run `imagekit ledger verify`, then `imagekit ledger repair`",
            )
        if last:
            try:
                previous = json.loads(last)
                seq = int(previous["seq"]) + 1
            except (ValueError, KeyError, TypeError) as exc:
                raise LedgerBroken(
                    f"the last line of the ledger {path} is not a record; refusing to chain",
                    hint="run `imagekit ledger verify` to see what changed",
                ) from exc
            prev: str | None = line_hash(last)
        else:
            seq, prev = 1, None
        document = {**body, "seq": seq, "prev": prev}
        raw = encode_line(document)
        record = LedgerRecord.from_json(json.loads(raw))
        _write_all(fd, raw, path)
    return record


def _write_all(fd: int, data: bytes, path: Path) -> None:
    view = memoryview(data)
    try:
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    except OSError as exc:
        raise CouldNotFinish(
            f"writing the ledger {path} failed: {exc.strerror}",
            hint="free disk space or fix permissions, then `imagekit ledger verify`",
        ) from exc


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class Problem:
    """One thing verify found; ``line`` is 1-based, ``seq`` the record's number if known."""

    kind: Literal[
        "torn",
        "malformed",
        "edited",
        "deleted",
        "reordered",
        "duplicated",
        "head-mismatch",
        "evidence-missing",
        "evidence-changed",
    ]
    line: int | None
    seq: int | None
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "line": self.line, "seq": self.seq, "message": self.message}


@dataclass(frozen=True)
class TornLine:
    line: int
    offset: int
    length: int


@dataclass(frozen=True)
class Scan:
    """The ledger as read: complete entries, lines that did not parse, and a torn tail."""

    path: Path
    entries: tuple[Entry, ...]
    malformed: tuple[tuple[int, int, bytes], ...]  # (line, offset, raw)
    torn: TornLine | None
    size: int


def scan(path: Path) -> Scan:
    """Read every line under a shared lock; keep exact bytes beside each parsed record.

    The shared flock waits for an append in progress, so a reader never mistakes a line being
    written for a torn one.
    """
    if not path.exists():
        raise UsageError(
            f"no ledger at {path}",
            hint="set IMAGEKIT_LEDGER or --ledger, or record something first",
        )
    try:
        with path.open("rb") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_SH)
            data = fh.read()
    except OSError as exc:
        raise CouldNotFinish(f"cannot read the ledger {path}: {exc.strerror}") from exc
    return parse(path, data)


def parse(path: Path, data: bytes) -> Scan:
    """Split ledger bytes into complete entries, malformed lines and a torn tail."""
    entries: list[Entry] = []
    malformed: list[tuple[int, int, bytes]] = []
    torn: TornLine | None = None
    offset = 0
    line_no = 0
    while offset < len(data):
        line_no += 1
        end = data.find(b"\n", offset)
        if end < 0:
            torn = TornLine(line=line_no, offset=offset, length=len(data) - offset)
            break
        raw = data[offset : end + 1]
        try:
            record = LedgerRecord.from_json(json.loads(raw))
        except (ValueError, ValidationError):
            malformed.append((line_no, offset, raw))
        else:
            entries.append(Entry(line_no=line_no, offset=offset, raw=raw, record=record))
        offset = end + 1
    return Scan(
        path=path,
        entries=tuple(entries),
        malformed=tuple(malformed),
        torn=torn,
        size=len(data),
    )


def read_records(path: Path) -> list[LedgerRecord]:
    return [entry.record for entry in scan(path).entries]


@dataclass(frozen=True)
class VerifyReport:
    path: Path
    records: int
    head: str | None
    head_seq: int | None
    problems: tuple[Problem, ...] = field(default_factory=tuple)
    evidence_checked: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def first(self) -> Problem | None:
        return self.problems[0] if self.problems else None

    def to_json(self) -> dict[str, Any]:
        return {
            "ledger": str(self.path),
            "ok": self.ok,
            "records": self.records,
            "head": self.head,
            "head_seq": self.head_seq,
            "evidence_checked": self.evidence_checked,
            "first_problem": self.first.to_json() if self.first else None,
            "problems": [p.to_json() for p in self.problems],
        }


def verify(workspace: Workspace, *, head: str | None = None) -> VerifyReport:
    """Recompute the chain over the exact bytes and every evidence hash; list what broke.

    Problems come in file order, so the first one names the first record that breaks. After a
    break the chain is followed from the actual bytes, so one edit is reported once.
    """
    path = workspace.ledger_path
    result = scan(path)
    problems: list[tuple[int, Problem]] = []  # (line for ordering, problem)
    for line_no, _offset, raw in result.malformed:
        problems.append(
            (
                line_no,
                Problem(
                    "malformed",
                    line_no,
                    None,
                    f"line {line_no} is not a ledger record ({len(raw)} bytes): it was edited "
                    "by hand or written by something else",
                ),
            )
        )
    previous: Entry | None = None
    seen: set[int] = set()
    all_seqs = {entry.record.seq for entry in result.entries}
    for entry in result.entries:
        rec = entry.record
        expected_seq = previous.record.seq + 1 if previous else 1
        expected_prev = previous.digest if previous else None
        where = f"record seq {rec.seq} (line {entry.line_no})"
        if rec.seq in seen:
            problems.append(
                (
                    entry.line_no,
                    Problem(
                        "duplicated",
                        entry.line_no,
                        rec.seq,
                        f"{where} repeats a sequence number already seen",
                    ),
                )
            )
        elif rec.seq > expected_seq and expected_seq in all_seqs:
            problems.append(
                (
                    entry.line_no,
                    Problem(
                        "reordered",
                        entry.line_no,
                        rec.seq,
                        f"{where} stands where seq {expected_seq} belongs (seq {expected_seq} "
                        "comes later in the file): records were reordered",
                    ),
                )
            )
        elif rec.seq > expected_seq:
            missing = (
                f"seq {expected_seq}"
                if rec.seq == expected_seq + 1
                else f"seq {expected_seq}..{rec.seq - 1}"
            )
            problems.append(
                (
                    entry.line_no,
                    Problem(
                        "deleted",
                        entry.line_no,
                        rec.seq,
                        f"{missing} missing before {where}: deleted"
                        + ("" if previous is None else f" after seq {previous.record.seq}"),
                    ),
                )
            )
        elif rec.seq < expected_seq:
            problems.append(
                (
                    entry.line_no,
                    Problem(
                        "reordered",
                        entry.line_no,
                        rec.seq,
                        f"{where} comes after seq {previous.record.seq if previous else 0}: "
                        "records were reordered",
                    ),
                )
            )
        elif rec.prev != expected_prev:
            if previous is None:
                message = f"{where} is the first record but names a previous one"
                line, seq = entry.line_no, rec.seq
            else:
                message = (
                    f"record seq {previous.record.seq} (line {previous.line_no}) was edited: "
                    f"its bytes hash to {previous.digest}, but seq {rec.seq} recorded {rec.prev}"
                )
                line, seq = previous.line_no, previous.record.seq
            problems.append((entry.line_no, Problem("edited", line, seq, message)))
        elif entry.raw != encode_line(json.loads(entry.raw)):
            problems.append(
                (
                    entry.line_no,
                    Problem(
                        "edited",
                        entry.line_no,
                        rec.seq,
                        f"{where} is not in the form imagekit writes: it was edited by hand",
                    ),
                )
            )
        seen.add(rec.seq)
        previous = entry
    evidence_checked = 0
    for entry in result.entries:
        ref = entry.record.evidence
        if ref is None:
            continue
        evidence_checked += 1
        target = evidence_path(workspace, ref)
        where = f"record seq {entry.record.seq} (line {entry.line_no})"
        if not target.is_file():
            problems.append(
                (
                    entry.line_no,
                    Problem(
                        "evidence-missing",
                        entry.line_no,
                        entry.record.seq,
                        f"evidence {ref.path} of {where} is missing",
                    ),
                )
            )
            continue
        actual = str(file_digest(target))
        if actual != ref.sha256:
            problems.append(
                (
                    entry.line_no,
                    Problem(
                        "evidence-changed",
                        entry.line_no,
                        entry.record.seq,
                        f"evidence {ref.path} of {where} changed: recorded {ref.sha256}, "
                        f"now {actual}",
                    ),
                )
            )
    last = result.entries[-1] if result.entries else None
    if result.torn is not None:
        torn = result.torn
        problems.append(
            (
                torn.line,
                Problem(
                    "torn",
                    torn.line,
                    None,
                    f"line {torn.line} is torn: {torn.length} bytes at offset {torn.offset} "
                    "without a newline, left by an append that did not finish; "
                    "`imagekit ledger repair` moves it aside",
                ),
            )
        )
    if head is not None:
        if last is None or last.digest != head:
            problems.append(
                (
                    last.line_no if last else 0,
                    Problem(
                        "head-mismatch",
                        last.line_no if last else None,
                        last.record.seq if last else None,
                        f"the newest record hashes to {last.digest if last else None}, "
                        f"not the expected head {head}: it was edited, or records were "
                        "removed from the end",
                    ),
                )
            )
    problems.sort(key=lambda item: item[0])
    return VerifyReport(
        path=path,
        records=len(result.entries),
        head=last.digest if last else None,
        head_seq=last.record.seq if last else None,
        problems=tuple(p for _, p in problems),
        evidence_checked=evidence_checked,
    )


@dataclass(frozen=True)
class RepairReport:
    path: Path
    repaired: bool
    quarantine: Path | None
    moved_bytes: int
    kept_records: int
    message: str

    def to_json(self) -> dict[str, Any]:
        return {
            "ledger": str(self.path),
            "repaired": self.repaired,
            "quarantine": str(self.quarantine) if self.quarantine else None,
            "moved_bytes": self.moved_bytes,
            "kept_records": self.kept_records,
            "message": self.message,
        }


def repair(workspace: Workspace) -> RepairReport:
    """Move a torn last line into a quarantine file; never touch a complete record.

    Only the torn tail a crashed append leaves is repaired. An edited, deleted or reordered
    record is evidence of something a person must look at: repair refuses (LedgerBroken).
    """
    path = workspace.ledger_path
    if not path.exists():
        raise UsageError(f"no ledger at {path}", hint="set IMAGEKIT_LEDGER or --ledger")
    with _locked(path, os.O_RDWR) as fd:
        size = os.fstat(fd).st_size
        result = parse(path, os.pread(fd, size, 0))
        if result.malformed:
            line_no = result.malformed[0][0]
            raise LedgerBroken(
                f"line {line_no} of {path} is a complete line that is not a record; repair only "
                "moves aside a torn last line",
                hint="look at it with `imagekit ledger verify`; an edit needs a person",
            )
        if result.torn is None:
            return RepairReport(
                path, False, None, 0, len(result.entries), "no torn line; nothing to repair"
            )
        torn = result.torn
        tail = os.pread(fd, torn.length, torn.offset)
        quarantine = path.with_name(f"{path.name}.torn-{utc_stamp()}-{torn.offset}")
        try:
            with quarantine.open("xb") as out:
                out.write(tail)
                out.flush()
                os.fsync(out.fileno())
            os.ftruncate(fd, torn.offset)
            os.fsync(fd)
        except OSError as exc:
            if exc.errno == errno.EEXIST:
                raise CouldNotFinish(f"quarantine file {quarantine} already exists") from exc
            raise CouldNotFinish(f"repairing {path} failed: {exc.strerror}") from exc
    return RepairReport(
        path,
        True,
        quarantine,
        torn.length,
        len(result.entries),
        f"moved the torn line {torn.line} ({torn.length} bytes) to {quarantine.name}; "
        f"{len(result.entries)} complete records kept",
    )


# --------------------------------------------------------------------------- show


@dataclass(frozen=True)
class ShowResult:
    path: Path
    records: tuple[LedgerRecord, ...]


def _mentions(record: LedgerRecord, digest: str) -> bool:
    texts = list(record.images.values())
    for key in ("image_id", "manifest_digest", "config_digest", "image_id_raw"):
        value = record.details.get(key)
        if isinstance(value, str):
            texts.append(value)
    repo_digests = record.details.get("repo_digests")
    if isinstance(repo_digests, list):
        texts.extend(str(v) for v in repo_digests)
    return any(digest in text for text in texts)


def show(
    workspace: Workspace,
    *,
    plan: str | None = None,
    image: str | None = None,
    kind: str | None = None,
) -> ShowResult:
    """The records that match every filter given, in ledger order."""
    if kind is not None and kind not in KINDS:
        raise UsageError(f"unknown record kind {kind!r}", hint="one of: " + ", ".join(KINDS))
    if image is not None and image.startswith("sha256:"):
        Digest(image)  # a malformed digest is bad input, not "no match"
    records = [
        r
        for r in read_records(workspace.ledger_path)
        if (plan is None or r.plan == plan)
        and (kind is None or r.kind == kind)
        and (image is None or _mentions(r, image))
    ]
    return ShowResult(workspace.ledger_path, tuple(records))
