"""The ledger: one append-only JSON-lines file recording every build, audit and pull.

The package, by concept: ``record`` (the fields, each kind's typed details, the bytes a line
is written as), ``store`` (appending a record), ``file`` (the file held under its lock),
``readback`` (reading it back byte for byte), ``listing`` (finding records), ``verify``
(the hash chain and the evidence hashes), ``repair`` (moving a torn tail aside),
``lockfile`` (the current state rendered from the records), ``accepted`` (which image of a
plan the records stand behind, for the lock and a night alike) and ``pods`` (what a cluster
reports it runs, recorded as final pulls).

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
leaves at most a torn last line (no newline). ``append_record`` refuses (RecordRefused,
nothing written) to chain onto a last line that does not verify: torn, not a record, not in
the form imagekit writes, duplicated, or not chained to the line before it; the stage that
asked keeps its own result and evidence (``RecordRefused.keeping``). ``repair`` completes a
torn line that is a whole chained record missing only its newline, and moves anything else
torn into a quarantine file beside the ledger, without touching any complete record.

The ledger is a regular file: a FIFO, a directory or a device at its path is bad input
before a byte is read. An empty ledger verifies nothing (status ``empty``); a lock is only
written from a ledger that verifies.

Secrets
-------
A record must never carry a password, token, Authorization header or CA bundle. Nothing is
scrubbed silently: ``append_record`` refuses (UsageError) a record with a key named like a
credential or text that looks like one, so the caller's bug shows instead of being hidden.

Kinds and their ``details`` (typed in imagekit.ledger.record)
-------------------------------------------------------------
``images`` roles: ``image`` (the image the record is about), ``base`` (its base), ``source``
and ``destination`` (mirror), ``pushed`` (the pinned reference a push produced).

build (status ``built``) / rejected-build (status ``rejected``, details.reason, details.step)
    images.image = the local tag or ID; images.base = base reference pinned by digest.
    details.image_id = engine image ID.
    details.base = {source_tag, index_digest, platform, manifest_digest, config_digest,
    compressed_layer_bytes, layer_digests} as ``imagekit inspect`` reports the base.
    A registry build (details.builder ``registry``, imagekit.builders.assemble) also has
    details.manifest_digest, details.layer (the overlay layer written), details.epoch,
    details.guard (each overlay's check and how each base layer was used) and
    details.assertions; its rejected-build records carry the guard or the assertions too.
audit (status ``CPU_PASS`` | ``CPU_PASS_GPU_CLI_DEFERRED`` | ``CPU_CHECK_INCOMPLETE`` | ...)
    images.image = the audited reference or image ID; images.tag = the tag asked for, when
    a registry tag was resolved (details.tag_resolution: tag, digest, at, sentence).
    details.report = summary of the audit report (counts, failed checks); evidence = report.
vulnerability-scan (status ``clean`` | ``findings`` | ``unknown``)
    images.image; details.report = summary.
push (status ``pushed``)
    images.image = local image; images.pushed = ``repo@sha256:...`` (manifest digest).
    details.manifest_digest, details.config_digest; after a registry build also
    details.index_digest (``--index``) and details.transfer (blobs mounted, uploaded, kept).
mirror-verify (status = the verdict: ``identical`` | ``content-identical`` |
``config-differs`` | ``mismatch`` | ``error``)
    images.source, images.destination; details.message = the verdict sentence.
final-pull (status ``verified`` | ``mismatch`` | ``unknown``)
    images.image = ``repo@sha256:...``; details.image_id, details.repo_digests,
    details.engine_version, details.image_store (``classic`` | ``containerd``),
    details.expected_manifest_digest, details.expected_config_digest, details.where,
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
    free text in scope; details free, except a night's note (status nightly-<verdict>), whose
    details are NightlyDetails (the verdict, the audits, the changes, and for a watched base
    tag: upstream, candidate, builder, guard, base_changes, plan_diff).
"""

from imagekit.ledger.listing import ShowResult, ShowSummary, show, show_each
from imagekit.ledger.readback import Entry, Scan, TornLine, iter_records, parse, read_records, scan
from imagekit.ledger.record import (
    KINDS,
    SCHEMA_VERSION,
    AuditDetails,
    AuditedImageDetails,
    AuditSummary,
    BaseImageDetails,
    BuildDetails,
    ContainerdStore,
    EvidenceRef,
    FinalPullDetails,
    Kind,
    LedgerRecord,
    MirrorDetails,
    NightlyDetails,
    NoteDetails,
    PullCheck,
    PushDetails,
    RecordDetails,
    RejectedBuildDetails,
    TagResolution,
    VulnerabilityDatabase,
    VulnerabilityScanDetails,
    VulnerabilitySummary,
    encode_line,
    line_hash,
)
from imagekit.ledger.repair import RepairReport, repair
from imagekit.ledger.store import append_record, evidence_path
from imagekit.ledger.verify import Problem, VerifyReport, verify

__all__ = [
    "KINDS",
    "SCHEMA_VERSION",
    "AuditDetails",
    "AuditedImageDetails",
    "AuditSummary",
    "BaseImageDetails",
    "BuildDetails",
    "ContainerdStore",
    "Entry",
    "EvidenceRef",
    "FinalPullDetails",
    "Kind",
    "LedgerRecord",
    "MirrorDetails",
    "NightlyDetails",
    "NoteDetails",
    "Problem",
    "PullCheck",
    "PushDetails",
    "RecordDetails",
    "RejectedBuildDetails",
    "RepairReport",
    "Scan",
    "ShowResult",
    "ShowSummary",
    "TagResolution",
    "TornLine",
    "VerifyReport",
    "VulnerabilityDatabase",
    "VulnerabilityScanDetails",
    "VulnerabilitySummary",
    "append_record",
    "encode_line",
    "evidence_path",
    "line_hash",
    "parse",
    "iter_records",
    "read_records",
    "repair",
    "scan",
    "show",
    "show_each",
    "verify",
]
