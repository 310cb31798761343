"""The one error tree of imagekit, and the exit codes that come from it.

Library code raises; only the CLI turns an error into one line on stderr (plus its hint) and
an exit code. The exit code belongs to the class, following the command-line contract
(docs/ARCHITECTURE.md). Any other exception is a bug: the CLI reports it as a crash and
exits with CRASH_EXIT_CODE (70, sysexits' EX_SOFTWARE), never with a verdict's code. An
interrupt is not an error either: imagekit.interrupt.Interrupted (a KeyboardInterrupt, exit
130 for SIGINT, 143 for SIGTERM) passes every ``except ImagekitError``::

    ImagekitError                      base: message + hint, exit_code 3
    +-- UsageError                     exit 2: bad input or usage; nothing was attempted
    |   +-- ReferenceFormatError       a malformed image reference, digest or platform
    |   +-- PlanError                  a plan file that is missing, malformed or unsafe
    |   |   +-- BaseDigestTruncated    a plan whose base digest is cut short: builds need --base
    |   +-- ProfileError               an audit profile that is missing or malformed
    |   +-- VulnDatabaseError          an offline vulnerability database that is not an OSV export
    |   +-- KeyFileError               a key file that cannot be used (names the file)
    |   +-- PolicyError                a verification policy file that is missing or malformed
    |   +-- InputFileError             a file named as input: not a regular file, or too large
    +-- CheckFailed                    exit 1: a check ran and said no
    |   +-- DigestMismatch             bytes whose digest differs from the one asked for
    |   +-- ImageContentError          the registry answered; what it served is not a usable image
    |   |   +-- PlatformNotFound       an index without the platform asked for
    |   +-- LayerFormatError           a layer blob that cannot be decompressed and hashed
    |   +-- BuildRejected              a build whose step or assertion failed
    |   |   +-- BuildFailed            a build step that failed: the step, its last lines, the log
    |   +-- LedgerBroken               a ledger whose chain or evidence no longer verifies
    |       +-- RecordRefused          an append refused: the ledger's tail does not verify
    +-- CouldNotFinish                 exit 3: the work could not be finished
        +-- EngineUnavailable          the Docker engine did not answer or failed
        +-- AuditTimeout               an audit's probe run passed its wall-clock limit
        +-- ContainerdError            a call to containerd (through ctr) failed
        |   +-- ContainerdUnavailable  containerd did not answer, or has no working CRI plugin
        +-- RegistryError              a registry answered badly (carries registry/repo/digest)
        |   +-- RegistryUnauthorized   401/403 without usable credentials
        |   +-- RegistryNotFound       404 for a manifest or blob
        |   |   +-- ReferenceNotFound  exit 2: a tag, digest or repository that names nothing
        |   +-- RegistryProtocolError  HTML, garbage, oversize bodies, schema 1, bad headers
        |   +-- RetriesExhausted       bounded retries ran out on transient faults
        |   |   +-- RateLimited        the registry kept answering 429 (its words, its wait)
        |   +-- RegistryTLSError       TLS to the registry failed (CA, client certificate)
        +-- NotAttested                a stage finished but its attestation was not stored
        +-- ClusterError               a Kubernetes API server refused a request (its words)
            +-- ClusterUnavailable     no API server answered at the configured address

Messages never carry a credential, a token or an Authorization header: the registry layer
builds them from the registry, repository and digest alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

CRASH_EXIT_CODE = 70


@dataclass(eq=False, repr=False)
class ImagekitError(Exception):
    """Base of every error imagekit raises on purpose.

    Errors are dataclasses so that a subclass declares its structured fields once, as
    keyword-only attributes (``@dataclass(eq=False, repr=False, kw_only=True)``), and
    ``fields()`` lists them from that declaration. Identity comparison and Exception's repr
    stay: an error is an event, not a value.
    """

    exit_code: ClassVar[int] = 3

    message: str
    hint: str | None = dataclasses.field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def fields(self) -> dict[str, Any]:
        """Structured fields a subclass adds (for --json): those it declares, in their order.

        Every field the error is constructed with counts, past the message and the hint.
        """
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.init and f.name not in ("message", "hint")
        }

    def diagnostics(self) -> str:
        """The message a user reads: one line, then the hint if there is one."""
        if self.hint:
            return f"{self.message}\nhint: {self.hint}"
        return self.message

    def to_json(self) -> dict[str, Any]:
        return {
            "type": type(self).__name__,
            "message": self.message,
            "hint": self.hint,
            "exit_code": self.exit_code,
            **self.fields(),
        }


class UsageError(ImagekitError):
    exit_code = 2


class ReferenceFormatError(UsageError):
    """A reference, digest or platform string that does not parse."""


@dataclass(eq=False, repr=False, kw_only=True)
class PlanError(UsageError):
    """A plan that cannot be used; names the file and the key when known."""

    path: str | None = None
    key: str | None = None

    def __post_init__(self) -> None:
        if self.path:
            prefix = f"{self.path}: " if not self.key else f"{self.path}: {self.key}: "
            self.message = prefix + self.message
        super().__post_init__()


class BaseDigestTruncated(PlanError):
    """A plan whose base names a digest cut short (as reports print them): it cannot be pinned.

    The plan is otherwise whole; every build of it names its base with ``--base``.
    """


class ProfileError(UsageError):
    """An audit profile that is missing or malformed."""


@dataclass(eq=False, repr=False, kw_only=True)
class VulnDatabaseError(UsageError):
    """An offline vulnerability database (--vuln-db) that cannot be used; names the file."""

    path: str


@dataclass(eq=False, repr=False, kw_only=True)
class KeyFileError(UsageError):
    """A signing or verification key that cannot be used: unreadable, the wrong password,
    not ECDSA P-256, or a public key where a private one is needed. Names the file, never
    the password or the key's bytes."""

    path: str


@dataclass(eq=False, repr=False, kw_only=True)
class PolicyError(UsageError):
    """A verification policy file (imagekit verify --policy) that cannot be used."""

    path: str


@dataclass(eq=False, repr=False, kw_only=True)
class InputFileError(UsageError):
    """A file a user named (a key, a policy, a plan, a ledger piece, a TLS file) that is no
    regular file (a FIFO, a device, a folder) or larger than imagekit reads of one; names
    the path and what it is (imagekit.files)."""

    path: str


class CheckFailed(ImagekitError):
    exit_code = 1


@dataclass(eq=False, repr=False, kw_only=True)
class DigestMismatch(CheckFailed):
    """Bytes whose sha256 is not the digest they were asked for or announced with."""

    expected: str
    actual: str
    registry: str | None = None
    repository: str | None = None


@dataclass(eq=False, repr=False, kw_only=True)
class ImageContentError(CheckFailed):
    """The registry answered, and what it served is not a usable image: an index without the
    platform asked for, an artifact where an image belongs, a manifest and config that
    disagree, a config that is not an image config. Exit 1 (a check said no, as a wrong
    diffID is), never 3, which says something could not be reached or finished."""

    registry: str
    repository: str | None = None
    digest: str | None = None


class PlatformNotFound(ImageContentError):
    """An index (or a single-platform image) that has no manifest for the platform asked."""


@dataclass(eq=False, repr=False, kw_only=True)
class LayerFormatError(CheckFailed):
    """A layer whose bytes cannot be turned into its uncompressed tar: unknown or lying
    compression, a truncated or corrupt stream, a zstd window or a size over the limit.
    What the registry stores is wrong (its digest held): a check said no."""

    digest: str | None = None


class BuildRejected(CheckFailed):
    """A build that failed or whose post-build assertions rejected it."""


@dataclass(eq=False, repr=False, kw_only=True)
class BuildFailed(BuildRejected):
    """A build step failed; carries the step, its last lines and where the log is."""

    step: str | None
    last_lines: list[str]
    log: Path
    reason: str

    def __post_init__(self) -> None:
        shown = "\n".join(f"  | {line}" for line in self.last_lines)
        self.message = (
            f"{self.message}\n  step: {self.step or '(unknown)'}\n{shown}\n  log: {self.log}"
        )
        super().__post_init__()

    def fields(self) -> dict[str, Any]:
        return {**super().fields(), "log": str(self.log)}


class LedgerBroken(CheckFailed):
    """A ledger whose hash chain or evidence hashes no longer verify."""


@dataclass(eq=False, repr=False, kw_only=True)
class RecordRefused(LedgerBroken):
    """An append refused because the ledger's last lines do not verify; nothing was written.

    The stage that asked had usually finished its own work (a verdict reached, its evidence
    written). It says so with ``with RecordRefused.keeping(result):`` around its record step,
    and the refusal then carries that result: the command still reports the verdict and
    its evidence, and adds that it was not recorded. One mechanism for every stage, instead
    of a refusal that swallows what the stage proved.
    """

    hint: str  # a refusal always says what to do
    ledger: str
    problem: str
    result: object | None = dataclasses.field(default=None, init=False)

    def fields(self) -> dict[str, Any]:
        return {**super().fields(), "recorded": False}

    @classmethod
    @contextmanager
    def keeping(cls, result: object) -> Iterator[None]:
        """Within the block, a refusal carries ``result`` (the outermost stage's wins)."""
        try:
            yield
        except cls as exc:
            exc.result = result
            raise


class CouldNotFinish(ImagekitError):
    exit_code = 3


@dataclass(eq=False, repr=False, kw_only=True)
class AuditTimeout(CouldNotFinish):
    """The whole probe run passed its wall-clock limit; it was killed, nothing decided."""

    timeout_s: float
    evidence: Path

    def fields(self) -> dict[str, Any]:
        return {"status": "TIMEOUT", "timeout_s": self.timeout_s, "evidence": str(self.evidence)}


class EngineUnavailable(CouldNotFinish):
    """The Docker engine did not answer, or a call to it failed."""


class ContainerdError(CouldNotFinish):
    """containerd answered, but a call to it (a pull, a read of its store) failed."""


class ContainerdUnavailable(ContainerdError):
    """No containerd answered at the address, or it cannot serve a kubelet (no CRI plugin)."""


@dataclass(eq=False, repr=False, kw_only=True)
class RegistryError(CouldNotFinish):
    """A registry call failed; names the registry, repository and digest, never a secret."""

    registry: str
    repository: str | None = None
    digest: str | None = None
    status: int | None = None
    url: str | None = None


class RegistryUnauthorized(RegistryError):
    pass


class RegistryNotFound(RegistryError):
    pass


class ReferenceNotFound(RegistryNotFound, UsageError):
    """The registry answered, and the reference as given (its tag, digest or repository)
    names nothing there: a mistake in the input, exit 2, never "try again later" (3).

    Still a RegistryNotFound, so code that asks whether a manifest exists (a cosign tag, an
    upstream tag) catches it as before; and a UsageError, so a stage does not record it."""

    exit_code = 2


class RegistryProtocolError(RegistryError):
    pass


class RetriesExhausted(RegistryError):
    pass


class RateLimited(RetriesExhausted):
    """429 Too Many Requests outlasted the retries, or asked for a longer pause than they
    allow: the message carries what the registry said and the pause it asked for."""


class RegistryTLSError(RegistryError):
    """A TLS handshake with a registry failed: an unknown CA, a refused client certificate.

    Never retried: the same handshake fails the same way. The hint names the ways to trust
    the registry (--ca-file, Docker's certs.d, --insecure)."""


@dataclass(eq=False, repr=False, kw_only=True)
class NotAttested(CouldNotFinish):
    """A stage reached its verdict and kept its evidence and record, but its attestation
    could not be stored in the registry (a refused or failed push). Carries the stage's
    result, as RecordRefused does, so the command still reports the verdict."""

    cause: str
    result: object | None = dataclasses.field(default=None, init=False)

    def fields(self) -> dict[str, Any]:
        return {**super().fields(), "attested": False}


@dataclass(eq=False, repr=False, kw_only=True)
class ClusterError(CouldNotFinish):
    """A Kubernetes API server refused a request; ``status`` its HTTP status (None when it
    did not answer), the message its own words (an admission plugin's refusal, say)."""

    status: int | None = None


class ClusterUnavailable(ClusterError):
    """No Kubernetes API server answered at the address the configuration names."""
