"""Blobs as a registry serves them: probed, checked for, and streamed with every byte verified.

``stream_blob`` yields a blob's bytes as they arrive and raises unless their size and digest
are the descriptor's; a dropped connection is resumed with a Range request. Layers are
gigabytes: nothing here holds one in memory (``fetch_blob`` reads a small document, a config,
and refuses anything over its limit).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx

from imagekit.errors import DigestMismatch, RegistryError, RegistryProtocolError, RetriesExhausted
from imagekit.refs import Digest, Reference
from imagekit.registry.manifest import Descriptor
from imagekit.registry.session import Session, fault
from imagekit.registry.transport import MAX_MANIFEST_BYTES, content_length

_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


@dataclass(frozen=True)
class BlobProbe:
    """A blob as the registry serves it, without reading it: its size and first bytes."""

    digest: Digest
    size: int
    head: bytes


def probe_blob(session: Session, ref: Reference, digest: Digest | str, head: int = 16) -> BlobProbe:
    """The blob's size and first bytes as the registry serves them, with one ranged GET.

    ``Range: bytes=0-N`` is asked for; a 206 names the whole size in its Content-Range,
    a registry that ignores Range answers 200 with the size in Content-Length, and only
    the first ``head`` bytes are read either way. A size the answer does not state is a
    RegistryProtocolError: nothing is assumed.
    """
    checked = Digest(str(digest))
    response = session.request(
        "GET",
        ref,
        f"blobs/{checked}",
        headers={"Range": f"bytes=0-{head - 1}", "Accept-Encoding": "identity"},
        stream=True,
    )
    try:
        size: int | None
        if response.status_code == 206:
            match = _CONTENT_RANGE.fullmatch((response.headers.get("Content-Range") or "").strip())
            total = match.group(3) if match and match.group(1) == "0" else "*"
            size = None if total == "*" else int(total)
        else:
            size = content_length(response)
        if size is None:
            raise fault(
                RegistryProtocolError,
                ref,
                f"{ref.name}: blob {checked}: the answer to a ranged GET states no size "
                f"(HTTP {response.status_code}, Content-Range "
                f"{response.headers.get('Content-Range')!r})",
                digest=str(checked),
            )
        first = b""
        for chunk in response.iter_raw():
            first += chunk
            if len(first) >= head:
                break
    finally:
        response.close()
    return BlobProbe(checked, size, first[:head])


def blob_exists(session: Session, ref: Reference, digest: Digest | str) -> bool:
    """HEAD the blob: True on 200, False on 404; other answers raise."""
    checked = Digest(str(digest))
    response = session.request("HEAD", ref, f"blobs/{checked}", allow_status=(404,))
    return response.status_code != 404


def fetch_blob(
    session: Session, ref: Reference, desc: Descriptor, *, limit: int = MAX_MANIFEST_BYTES
) -> bytes:
    """A small blob (a config) in memory, verified; refused when over ``limit``."""
    if desc.size > limit:
        raise fault(
            RegistryProtocolError,
            ref,
            f"{ref.name}: blob {desc.digest} is {desc.size} bytes, over the {limit}-byte "
            "limit for documents",
            digest=str(desc.digest),
        )
    return b"".join(stream_blob(session, ref, desc))


def stream_blob(
    session: Session,
    ref: Reference,
    desc: Descriptor,
    chunk_size: int = 1 << 20,
    *,
    on_restart: Callable[[], None] | None = None,
) -> Iterator[bytes]:
    """Yield a blob's raw bytes as they arrive, verifying size and digest on the way.

    The bytes hashed are the bytes on the wire (``iter_raw``; ``Accept-Encoding:
    identity`` is asked for), so a Content-Encoding can never change them. More bytes
    than ``desc.size`` stop the download at once; fewer, or a wrong digest at the end,
    raise after the last chunk (DigestMismatch for the digest). A dropped connection is
    resumed with ``Range: bytes=N-``, accepted only as a 206 whose Content-Range starts
    at N. When the digest is wrong after a resume, or the registry ignores the Range, the
    blob is restarted once from byte 0, if ``on_restart`` is given: it is called first so
    the consumer can throw away what it got (bytes already yielded cannot be taken back;
    without it those cases raise instead).
    """
    digest = Digest(str(desc.digest))
    where = f"{ref.name}@{digest}"

    def refused(problem: str) -> RegistryError:
        return fault(RegistryProtocolError, ref, f"{where}: {problem}", digest=str(digest))

    hasher = digest.new_hasher()
    received = 0
    drops = 0
    resumed = False
    restarted = False

    def restart() -> None:
        nonlocal hasher, received, resumed, restarted
        assert on_restart is not None  # noqa: S101 - guarded by callers
        restarted, resumed, received = True, False, 0
        hasher = digest.new_hasher()
        on_restart()

    while True:
        headers = {"Accept-Encoding": "identity"}
        if received:
            headers["Range"] = f"bytes={received}-"
        response = session.request("GET", ref, f"blobs/{digest}", headers=headers, stream=True)
        try:
            if received:
                start = _range_start(response.headers.get("Content-Range"), desc.size)
                if response.status_code == 206 and start == received:
                    resumed = True
                elif response.status_code == 200 and on_restart is not None and not restarted:
                    restart()  # the registry ignored Range: this answer is the whole blob
                else:
                    raise refused(
                        f"resuming at byte {received} got HTTP {response.status_code} with "
                        f"Content-Range {response.headers.get('Content-Range')!r}; refused"
                    )
            elif response.status_code != 200:
                raise refused(f"expected HTTP 200 for the blob, got {response.status_code}")
            declared = content_length(response)
            if declared is not None and received + declared > desc.size:
                raise refused(
                    f"the registry announces {received + declared} bytes, the descriptor "
                    f"says {desc.size}"
                )
            try:
                # No chunk_size here: httpx would buffer up to it, and bytes still in
                # its buffer when the connection drops would be lost to the resume.
                for chunk in _split(response.iter_raw(), chunk_size):
                    if received + len(chunk) > desc.size:
                        raise refused(
                            f"the blob is longer than its descriptor's {desc.size} bytes; refused"
                        )
                    hasher.update(chunk)
                    received += len(chunk)
                    yield chunk
            except httpx.TransportError as exc:
                drops += 1
                if drops >= session.policy.max_attempts:
                    raise fault(
                        RetriesExhausted,
                        ref,
                        f"{where}: the download broke off {drops} times; last at byte "
                        f"{received}: {type(exc).__name__}",
                        digest=str(digest),
                    ) from exc
                continue
        finally:
            response.close()
        if received < desc.size:
            raise refused(f"the blob ended after {received} of {desc.size} bytes")
        actual = Digest.from_hasher(hasher)
        if actual == digest:
            return
        if resumed and not restarted and on_restart is not None:
            restart()
            continue
        raise fault(
            DigestMismatch,
            ref,
            f"{where}: the blob's bytes hash to {actual}"
            + (" (after a resumed download)" if resumed else ""),
            expected=str(digest),
            actual=str(actual),
            hint="the registry served other bytes than the digest names; do not use it",
        )


def _split(pieces: Iterator[bytes], size: int) -> Iterator[bytes]:
    """Pass pieces through as they arrive, cutting any larger than ``size``."""
    for piece in pieces:
        if len(piece) <= size:
            yield piece
            continue
        for start in range(0, len(piece), size):
            yield piece[start : start + size]


def _range_start(header: str | None, size: int) -> int | None:
    """The first byte of a ``Content-Range: bytes START-END/TOTAL``; None when malformed."""
    if not header:
        return None
    match = _CONTENT_RANGE.fullmatch(header.strip())
    if not match:
        return None
    start, end, total = int(match.group(1)), int(match.group(2)), match.group(3)
    if end < start or end >= size or (total != "*" and int(total) != size):
        return None
    return start
