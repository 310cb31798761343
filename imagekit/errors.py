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
    |   +-- ProfileError               an audit profile that is missing or malformed
    |   +-- VulnDatabaseError          an offline vulnerability database that is not an OSV export
    +-- CheckFailed                    exit 1: a check ran and said no
    |   +-- DigestMismatch             bytes whose digest differs from the one asked for
    |   +-- BuildRejected              a build whose step or assertion failed
    |   +-- LedgerBroken               a ledger whose chain or evidence no longer verifies
    |       +-- RecordRefused          an append refused: the ledger's tail does not verify
    +-- CouldNotFinish                 exit 3: the work could not be finished
        +-- EngineUnavailable          the Docker engine did not answer or failed
        +-- ContainerdError            a call to containerd (through ctr) failed
        |   +-- ContainerdUnavailable  containerd did not answer, or has no working CRI plugin
        +-- RegistryError              a registry answered badly (carries registry/repo/digest)
            +-- RegistryUnauthorized   401/403 without usable credentials
            +-- RegistryNotFound       404 for a manifest or blob
            +-- RegistryProtocolError  HTML, garbage, oversize bodies, schema 1, bad headers
            +-- RetriesExhausted       bounded retries ran out on transient faults
        +-- LayerFormatError           a layer blob that cannot be decompressed and hashed

Messages never carry a credential, a token or an Authorization header: the registry layer
builds them from the registry, repository and digest alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

CRASH_EXIT_CODE = 70


class ImagekitError(Exception):
    """Base of every error imagekit raises on purpose."""

    exit_code: ClassVar[int] = 3

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def fields(self) -> dict[str, Any]:
        """Structured fields a subclass adds (for --json); empty by default."""
        return {}

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


class PlanError(UsageError):
    """A plan that cannot be used; names the file and the key when known."""

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        key: str | None = None,
        hint: str | None = None,
    ) -> None:
        prefix = ""
        if path:
            prefix = f"{path}: " if not key else f"{path}: {key}: "
        super().__init__(prefix + message, hint=hint)
        self.path = path
        self.key = key

    def fields(self) -> dict[str, Any]:
        return {"path": self.path, "key": self.key}


class ProfileError(UsageError):
    """An audit profile that is missing or malformed."""


class VulnDatabaseError(UsageError):
    """An offline vulnerability database (--vuln-db) that cannot be used; names the file."""

    def __init__(self, message: str, *, path: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.path = path

    def fields(self) -> dict[str, Any]:
        return {"path": self.path}


class CheckFailed(ImagekitError):
    exit_code = 1


class DigestMismatch(CheckFailed):
    """Bytes whose sha256 is not the digest they were asked for or announced with."""

    def __init__(
        self,
        message: str,
        *,
        expected: str,
        actual: str,
        registry: str | None = None,
        repository: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.expected = expected
        self.actual = actual
        self.registry = registry
        self.repository = repository

    def fields(self) -> dict[str, Any]:
        return {
            "expected": self.expected,
            "actual": self.actual,
            "registry": self.registry,
            "repository": self.repository,
        }


class BuildRejected(CheckFailed):
    """A build that failed or whose post-build assertions rejected it."""


class LedgerBroken(CheckFailed):
    """A ledger whose hash chain or evidence hashes no longer verify."""


class RecordRefused(LedgerBroken):
    """An append refused because the ledger's last lines do not verify; nothing was written.

    The stage that asked had usually finished its own work (a verdict reached, its evidence
    written). It says so with ``with RecordRefused.keeping(result):`` around its record step,
    and the refusal then carries that result: the command still reports the verdict and
    its evidence, and adds that it was not recorded. One mechanism for every stage, instead
    of a refusal that swallows what the stage proved.
    """

    def __init__(self, message: str, *, ledger: str, problem: str, hint: str) -> None:
        super().__init__(message, hint=hint)
        self.ledger = ledger
        self.problem = problem
        self.result: object | None = None

    def fields(self) -> dict[str, Any]:
        return {"ledger": self.ledger, "problem": self.problem, "recorded": False}

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


class EngineUnavailable(CouldNotFinish):
    """The Docker engine did not answer, or a call to it failed."""


class ContainerdError(CouldNotFinish):
    """containerd answered, but a call to it (a pull, a read of its store) failed."""


class ContainerdUnavailable(ContainerdError):
    """No containerd answered at the address, or it cannot serve a kubelet (no CRI plugin)."""


class RegistryError(CouldNotFinish):
    """A registry call failed; names the registry, repository and digest, never a secret."""

    def __init__(
        self,
        message: str,
        *,
        registry: str,
        repository: str | None = None,
        digest: str | None = None,
        status: int | None = None,
        url: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.registry = registry
        self.repository = repository
        self.digest = digest
        self.status = status
        self.url = url

    def fields(self) -> dict[str, Any]:
        return {
            "registry": self.registry,
            "repository": self.repository,
            "digest": self.digest,
            "status": self.status,
            "url": self.url,
        }


class RegistryUnauthorized(RegistryError):
    pass


class RegistryNotFound(RegistryError):
    pass


class RegistryProtocolError(RegistryError):
    pass


class RetriesExhausted(RegistryError):
    pass


class LayerFormatError(CouldNotFinish):
    """A layer whose bytes cannot be turned into its uncompressed tar: unknown or lying
    compression, a truncated or corrupt stream, a zstd window or a size over the limit."""

    def __init__(self, message: str, *, digest: str | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.digest = digest

    def fields(self) -> dict[str, Any]:
        return {"digest": self.digest}
