"""What every builder returns: an image made from a plan, its evidence and its records.

The engine builder's ``BuildResult`` (imagekit.builders.buildkit), a BuildKit daemon's
``RemoteResult`` (imagekit.builders.remote), the index of several platforms' ``PlatformsResult``
(imagekit.builders.platforms) and the registry builder's ``AssembleResult``
(imagekit.builders.assemble) say more than this, each about its own way of building; a caller
that only needs the image, where it was pushed and what was recorded reads them through
:class:`BuiltImage` and never asks which builder ran. What they hold alike (the plan, its
base, the builder, the evidence, the attestation) is declared once, in :class:`PlanBuild`,
and written to JSON the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from imagekit.attest.attach import AttestOutcome, Prepared


@runtime_checkable
class BuiltImage(Protocol):
    """An image built from a plan and recorded (a build that fails raises instead)."""

    @property
    def plan(self) -> str: ...

    @property
    def plan_sha256(self) -> str: ...

    @property
    def base(self) -> str: ...

    @property
    def builder(self) -> str:
        """``registry`` or the engine's way into BuildKit (``buildx``, ``docker build ...``)."""

    @property
    def tag(self) -> str: ...

    @property
    def image_id(self) -> str:
        """The engine's image ID; for a registry build, the config digest an engine uses."""

    @property
    def runnable(self) -> str:
        """How an engine names the image to run it: the engine build's local tag, the
        registry build's pushed digest (which running it pulls)."""

    @property
    def pushed(self) -> str | None:
        """``repo@sha256:...`` once pushed (always, for a registry build)."""

    @property
    def manifest_digest(self) -> str | None: ...

    @property
    def evidence_dir(self) -> Path: ...

    @property
    def log(self) -> Path: ...

    @property
    def ledger(self) -> Sequence[int]:
        """The seqs of the records this build appended (build, then push)."""

    @property
    def ok(self) -> bool: ...

    @property
    def exit_code(self) -> int: ...

    def to_json(self) -> dict[str, Any]: ...


class Succeeded:
    """What every builder's result says the same way, whichever builder made it: a build
    that returns succeeded (a failed one raises BuildFailed, RecordRefused ...), its evidence
    is its log (the rendered files and reports lie beside it), and its records are the seqs
    it appended. A base of the frozen result dataclasses; it holds no fields of its own."""

    ok: ClassVar[bool] = True
    exit_code: ClassVar[int] = 0
    log: Path
    ledger: Sequence[int]

    @property
    def evidence(self) -> Path:
        """The build's log; the rendered files and reports lie beside it."""
        return self.log

    @property
    def ledger_seqs(self) -> tuple[int, ...]:
        return tuple(self.ledger)


@dataclass(frozen=True, kw_only=True)
class PlanBuild(Succeeded):
    """The fields every builder's result has, named by keyword (each builder's own follow).

    ``ledger`` stays each result's own (a list or a tuple of seqs, as it always was).
    """

    plan: str
    plan_sha256: str
    base: str
    builder: str
    evidence_dir: Path
    log: Path
    attestation: AttestOutcome | None = None  # with --sign-key: stored, or why not
    # with --sign-key: the provenance signed, which the records name; attached after them
    signed: Prepared | None = None

    @property
    def attestation_value(self) -> str | None:
        """What the records say of the provenance: the digest of the envelope signed for it
        (attached only once they are written; ``attestation`` says whether the registry
        stored it), "not attested: WHY", or None without --sign-key."""
        return self.signed.ledger_value if self.signed is not None else None

    def plan_json(self) -> dict[str, Any]:
        """The plan, its base and the builder, as every result's JSON opens."""
        return {
            "plan": self.plan,
            "plan_sha256": self.plan_sha256,
            "base": self.base,
            "builder": self.builder,
        }

    def records_json(self) -> dict[str, Any]:
        """The records appended and the attestation, as every result's JSON ends."""
        return {
            "ledger_seq": list(self.ledger),
            **({"attestation": self.attestation.to_json()} if self.attestation else {}),
        }


@dataclass(frozen=True, kw_only=True)
class RenderedBuild(PlanBuild):
    """A build of the plan's rendered Dockerfile (the engine, a BuildKit daemon, several
    platforms): its evidence is the build log beside the rendered files."""

    dockerfile_sha256: str

    def evidence_json(self) -> dict[str, Any]:
        return {
            "evidence_dir": str(self.evidence_dir),
            "log": str(self.log),
            "dockerfile_sha256": self.dockerfile_sha256,
        }


class InRegistry:
    """A result whose image exists only in the registry it was pushed to until an engine
    pulls it: the name an engine runs is the pushed digest (which running it pulls)."""

    pushed: str

    @property
    def runnable(self) -> str:
        return self.pushed


class PushedByDigest(InRegistry):
    """A result whose image BuildKit pushed by digest and put no tag on: its tag is the
    pushed digest too."""

    @property
    def tag(self) -> str:
        return self.pushed


class ConfigNamed:
    """A result of one image that no engine here holds (BuildKit pushed it, or the registry
    builder assembled it): its image ID is what a classic engine calls it once it pulls it,
    the config digest."""

    config_digest: str

    @property
    def image_id(self) -> str:
        return self.config_digest
