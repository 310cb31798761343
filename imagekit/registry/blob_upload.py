"""One blob into a registry's upload session: one PUT of known length, or PATCH chunks that
resume where the registry says it stopped, and a session that will not finish cancelled.

Apart from the copy (imagekit.registry.upload), which decides per blob whether it is there
already, mounted or uploaded, and calls this to upload it: how the bytes go is its own
concern, with its own limits and refusals
(https://github.com/opencontainers/distribution-spec/blob/main/spec.md#push).

Chunks (``chunk_size`` given, or after such a refusal) are ``PATCH``es followed by the
closing ``PUT ?digest=``: never smaller than the registry's ``OCI-Chunk-Min-Length``
(distribution-spec, "Pushing a blob in chunks"). A refusal that states the largest body
taken (GHCR's 416 "request body is too large, max size is 4.00MiB") sets the chunk size to
that at once; one that does not, or whose size is refused too, halves it, down to that
minimum (or 64 KiB), before the copy gives up naming what the registry said. A chunk whose PATCH
fails is resumed where the registry's upload status (``GET`` on the upload URL,
``Range: 0-N``) says it stopped, so a dropped connection costs at most one chunk.
distribution/distribution refuses the status of a session whose answer was lost (its
upload URL signs the offset); there the blob starts over in a new session, at most twice.

An upload that does not finish, because the copy failed or was interrupted (SIGINT,
SIGTERM), is cancelled (``DELETE`` on its upload URL, distribution-spec "Canceling an
upload") so no session is left open on the registry; the blob workers stop between pieces
of work when the command is interrupted.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass

import httpx

from imagekit.errors import RegistryError, RegistryProtocolError
from imagekit.refs import Digest, Reference
from imagekit.registry.client import RegistryClient
from imagekit.registry.manifest import Descriptor

MiB = 1 << 20
PUSH = ("pull", "push")
_RANGE = re.compile(r"(?:bytes=)?0-(\d+)")
#: Blobs up to this size are read into memory and PUT as bytes (a re-send costs no
#: download); larger ones are streamed from their source.
SMALL_BLOB = 4 * MiB
#: The chunk size after a registry refused a monolithic PUT as too large.
DEFAULT_CHUNK = 16 * MiB
#: Chunks are never halved below this (nor below the registry's OCI-Chunk-Min-Length).
MIN_CHUNK = 64 * 1024
_TOO_LARGE = (413, 416)
# The largest body a refusal says the registry takes: GHCR's "max size is 4.00MiB"; the
# other spellings seen from proxies in front of registries ("maximum size 8 MB").
_STATED_MAX = re.compile(
    r"max(?:imum)?(?:[ _-](?:body|request|chunk|upload))?(?:[ _-]size)?(?:\s+is|:|=)?\s*"
    r"([0-9]+(?:\.[0-9]+)?)\s*([KMGT]i?B|B|bytes)\b",
    re.IGNORECASE,
)
_UNITS = {"b": 1, "bytes": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}  # fmt: skip


def stated_max_size(message: str) -> int | None:
    """The largest request body a registry's refusal says it takes, in bytes (rounded down:
    "4.00MiB" is 4194304), or None when it says none."""
    match = _STATED_MAX.search(message)
    if match is None:
        return None
    size = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    return size if size > 0 else None


@dataclass(frozen=True)
class BlobSource:
    """A blob the destination must hold, and where its bytes are when it does not.

    ``repository``: a repository holding it (a mount when on the destination's registry,
    else streamed from there); ``data``: a callable giving its bytes afresh each time (so a
    lost upload can be sent again); ``distributable`` false: mounted at most, never
    uploaded.
    """

    descriptor: Descriptor
    repository: Reference | None = None
    data: Callable[[], Iterable[bytes]] | None = None
    distributable: bool = True


class TooLarge(Exception):
    """The registry refused a request body as too large (413, 416)."""

    def __init__(self, cause: RegistryError) -> None:
        super().__init__(cause.message)
        self.cause = cause


class LostUpload(Exception):
    """An upload session that cannot be continued; the blob is sent again in a new one."""

    def __init__(self, cause: RegistryError) -> None:
        super().__init__(cause.message)
        self.cause = cause


class BlobUpload:
    """The upload of one blob at a time to ``dst``, in sessions this opens, resumes and
    cancels; ``pieces`` gives a blob's bytes afresh for each send, ``say`` and ``count``
    are the copy's log and counters."""

    def __init__(
        self,
        client: RegistryClient,
        dst: Reference,
        *,
        chunk_size: int | None,
        pieces: Callable[[BlobSource], Generator[bytes, None, None]],
        say: Callable[[str], None],
        count: Callable[[str], None],
    ) -> None:
        self.client, self.dst, self.chunk_size = client, dst, chunk_size
        self._pieces, self.say, self.count = pieces, say, count

    def cancel(self, location: str, digest: Digest) -> None:
        """Cancel an upload session that will not be completed; a failure is only said."""
        try:
            self.client.request(
                "DELETE", self.dst, location, scope_actions=PUSH, allow_status=(404,)
            )
        except RegistryError as exc:
            self.say(f"could not cancel the upload session of {digest.short}: {exc.message}")
        else:
            self.say(f"cancelled the upload session of {digest.short}")

    def start_upload(self) -> tuple[str, int]:
        """A new upload session: its URL, and the registry's OCI-Chunk-Min-Length (or 0)."""
        response = self.client.request(
            "POST", self.dst, "blobs/uploads/", scope_actions=PUSH, content=b""
        )
        minimum = response.headers.get("OCI-Chunk-Min-Length", "").strip()
        return self._location(response), int(minimum) if minimum.isdigit() else 0

    def monolithic(self, location: str, source: BlobSource) -> None:
        """The whole blob in one PUT of known length: bytes when small, else streamed."""
        desc = source.descriptor
        url = httpx.URL(location).copy_merge_params({"digest": str(desc.digest)})
        content: bytes | Callable[[], Iterable[bytes]]
        if desc.size <= SMALL_BLOB:
            content = b"".join(self._pieces(source))  # verified as it arrives
        else:

            def content() -> Iterable[bytes]:
                return self._pieces(source)  # afresh for each send (a retry, a 401)

        try:
            self.client.request(
                "PUT",
                self.dst,
                str(url),
                scope_actions=PUSH,
                headers={
                    "Content-Type": "application/octet-stream",
                    "Content-Length": str(desc.size),
                },
                content=content,
            )
        except RegistryProtocolError:
            raise
        except RegistryError as exc:
            if exc.status in _TOO_LARGE:
                raise TooLarge(exc) from exc
            raise LostUpload(exc) from exc

    def _location(self, response: httpx.Response) -> str:
        location = response.headers.get("Location")
        if not location:
            raise RegistryProtocolError(
                f"{self.dst.name}: the upload answer has no Location header",
                registry=self.dst.registry,
                repository=self.dst.repository,
            )
        return str(location)

    def _put(self, location: str, digest: Digest, data: bytes) -> None:
        url = httpx.URL(location).copy_merge_params({"digest": str(digest)})
        self.client.request(
            "PUT",
            self.dst,
            str(url),
            scope_actions=PUSH,
            headers={"Content-Type": "application/octet-stream"},
            content=data,
        )

    def chunked(
        self, session: list[str], source: BlobSource, min_length: int, first: int | None = None
    ) -> None:
        """PATCH every chunk, then the closing PUT; ``session[-1]`` follows the upload URL.

        Chunks are at least the registry's minimum length (the last one excepted). After a
        416 they are as large as the registry says it takes (GHCR: "request body is too
        large, max size is 4.00MiB"), or, when it says nothing usable, half as large, down
        to that minimum (or MIN_CHUNK). ``first``: the size a refused PUT stated. One chunk
        is in memory.
        """
        size = max(first or self.chunk_size or DEFAULT_CHUNK, min_length)
        floor = max(min_length, MIN_CHUNK)
        offset = 0
        buffer = bytearray()
        pieces = self._pieces(source)
        exhausted = False
        try:
            while True:
                while not exhausted and len(buffer) < size:
                    piece = next(pieces, None)
                    if piece is None:
                        exhausted = True
                    else:
                        buffer += piece
                if not buffer:
                    break
                chunk = bytes(buffer[:size])
                try:
                    session.append(self._patch(session[-1], offset, chunk))
                except TooLarge as exc:
                    if size <= floor:
                        raise self._no_chunk_fits(floor, exc.cause) from exc
                    stated = stated_max_size(exc.cause.message)
                    if stated is not None and floor <= stated < len(chunk):
                        size, why = stated, "the most it says it takes"
                    else:  # nothing said, or that size refused too: halve
                        size, why = max(floor, size // 2), "halved"
                    self.say(
                        f"{self.dst.registry} refused a chunk of {len(chunk)} bytes "
                        f"({exc.cause.message}); sending {size}-byte chunks ({why})"
                    )
                    continue
                offset += len(chunk)
                del buffer[: len(chunk)]
        finally:
            # A failed chunk leaves SRC's download open; close it now, not at some later
            # garbage collection (the traceback keeps the generator alive).
            pieces.close()
        self._put(session[-1], source.descriptor.digest, b"")

    def _no_chunk_fits(self, floor: int, cause: RegistryError) -> RegistryError:
        return RegistryError(
            f"{self.dst.registry} refused upload chunks down to {floor} bytes "
            f"(HTTP {cause.status}): {cause.message}",
            registry=self.dst.registry,
            repository=self.dst.repository,
            status=cause.status,
            url=cause.url,
            hint="no chunk size this registry takes is left to try; check the request body "
            "limits of the registry and of any proxy in front of it",
        )

    def _patch(self, location: str, offset: int, chunk: bytes) -> str:
        """PATCH one chunk; after a failure, resume it where the registry says it stopped."""
        sent = 0
        for attempt in range(3):
            part = chunk[sent:]
            start = offset + sent
            try:
                response = self.client.request(
                    "PATCH",
                    self.dst,
                    location,
                    scope_actions=PUSH,
                    headers={
                        "Content-Type": "application/octet-stream",
                        "Content-Range": f"{start}-{start + len(part) - 1}",
                    },
                    content=part,
                )
                return self._location(response)
            except RegistryError as exc:
                if exc.status in _TOO_LARGE:
                    raise TooLarge(exc) from exc
                if attempt == 2 or isinstance(exc, RegistryProtocolError):
                    raise LostUpload(exc) from exc
                self.count("chunk_resumes")
                location, received = self._status(location, exc)
                if received < offset or received > offset + len(chunk):
                    raise RegistryProtocolError(
                        f"{self.dst.name}: the upload is at byte {received}, expected a "
                        f"position inside the chunk at {offset}",
                        registry=self.dst.registry,
                        repository=self.dst.repository,
                    ) from exc
                sent = received - offset
                if sent == len(chunk):
                    return location
        raise AssertionError("unreachable")  # pragma: no cover

    def _status(self, location: str, cause: RegistryError) -> tuple[str, int]:
        """(upload URL, bytes the registry holds) from GET on the upload URL (204).

        distribution/distribution signs the offset into the upload URL's ``_state``; once
        the registry took a chunk whose answer was lost, that URL is refused (404
        BLOB_UPLOAD_INVALID) and the session cannot be resumed: the blob starts over in a
        new session (:class:`LostUpload`).
        """
        try:
            response = self.client.request("GET", self.dst, location, scope_actions=PUSH)
        except RegistryError as exc:
            raise LostUpload(cause) from exc
        match = _RANGE.fullmatch(response.headers.get("Range", "").strip())
        received = int(match.group(1)) + 1 if match else 0
        return response.headers.get("Location") or location, received

    # ------------------------------------------------------------------ manifests
