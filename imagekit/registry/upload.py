"""The push side: copy an image (or a whole index) from one repository to another, digests kept.

Used by `imagekit mirror --copy`. Every blob goes the cheapest safe way
(https://github.com/opencontainers/distribution-spec/blob/main/spec.md#push):

1. already there (HEAD 200): nothing to do;
2. same registry, other repository: a cross-repository mount
   (``POST /v2/<dst>/blobs/uploads/?mount=<digest>&from=<src>``, 201), no bytes moved;
3. otherwise streamed from SRC (its digest verified as it arrives) in one monolithic
   ``PUT ?digest=`` whose Content-Length is the descriptor's size, the upload every registry
   takes (containerd pushes this way): GHCR refuses ``PATCH`` bodies over 4 MiB, other
   registries have limits of their own, and a PUT of known length meets none of them. A
   registry that refuses it as too large (413, 416) gets chunks instead.

   Chunks (``chunk_size`` given, or after such a refusal), their resumption and the
   cancelling of an unfinished session: imagekit.registry.blob_upload.

   A mount the registry refuses outright (401 or 403: Harbor and Nexus do, for a source
   repository the token may not read) is not the end of the copy: the blob is uploaded.

Manifests are PUT as the exact bytes SRC served, so every digest is preserved; an index is
copied with all its children (attestation manifests included), children first. Memory stays
bounded by one chunk per blob in flight.

``push_manifest`` is the same machinery for a manifest made here (``imagekit build
--builder registry``): each blob it names is a :class:`BlobSource`, either in a repository
(mounted or streamed as above) or in bytes this process holds (a fresh layer, a config);
the manifest is PUT only after every blob is in place, so an interrupted push never leaves a
manifest, let alone a tag, naming a missing blob, and running it again finds the blobs
already there. A non-distributable layer is never uploaded
(https://github.com/opencontainers/image-spec/blob/main/layer.md#non-distributable-layers):
it may be mounted within one registry (no byte moves), and otherwise the destination must
already hold it, or the registry decides whether it accepts the manifest without it.

One blob is never written to one registry by two threads of this process at once
(imagekit.registry.blob_write).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Any

from imagekit import progress
from imagekit.errors import RegistryProtocolError, RegistryUnauthorized
from imagekit.interrupt import Stop, wait_all
from imagekit.progress import human_bytes
from imagekit.refs import Digest, Reference
from imagekit.registry.blob_upload import (
    PUSH,
    BlobSource,
    BlobUpload,
    LostUpload,
    TooLarge,
    stated_max_size,
)
from imagekit.registry.blob_write import blob_write
from imagekit.registry.client import RegistryClient
from imagekit.registry.manifest import (
    INDEX_TYPES,
    Descriptor,
    ImageIndex,
    ImageManifest,
    parse_manifest,
)

MiB = 1 << 20


class _Moving:
    """A blob's progress item, which a send that starts over (a retry) counts again from 0."""

    def __init__(self, item: progress.Item) -> None:
        self._item = item
        self._moved = 0

    def advance(self, nbytes: int) -> None:
        self._moved += nbytes
        self._item.advance(nbytes)

    def restart(self) -> None:
        if self._moved:
            self._item.advance(-self._moved)
            self._moved = 0

    def done(self, how: str = "done") -> None:
        self._item.done(how)


@dataclass
class CopyResult:
    source: str
    destination: str
    digest: Digest
    media_type: str
    manifests: int = 0
    blobs_existing: int = 0
    blobs_mounted: int = 0
    blobs_uploaded: int = 0
    blobs_skipped: int = 0
    bytes_uploaded: int = 0
    chunk_resumes: int = 0
    upload_restarts: int = 0
    log: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The names and every counter, in their declared order; the log stays out of it."""
        document = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "log"}
        return {**document, "digest": str(self.digest)}


class _Copier:
    def __init__(
        self,
        client: RegistryClient,
        src: Reference,
        dst: Reference,
        result: CopyResult,
        *,
        chunk_size: int | None,
        workers: int,
        log: Callable[[str], None] | None,
    ) -> None:
        self.client, self.src, self.dst, self.result = client, src, dst, result
        self.chunk_size, self.workers, self._log = chunk_size, workers, log
        self._lock = threading.Lock()
        self.stop = Stop()
        self._work: progress.Work | None = None
        self._items: dict[Digest, _Moving] = {}
        self.uploads = BlobUpload(
            client, dst, chunk_size=chunk_size, pieces=self._pieces, say=self.say, count=self.count
        )

    @contextmanager
    def working(self, blobs: Sequence[BlobSource]) -> Iterator[None]:
        """Report the blobs' bytes as one piece of work (a bar each and one overall)."""
        total = sum(blob.descriptor.size for blob in blobs)
        label = f"copying to {self.dst.name}"
        with progress.work(label, total=total, items=len(blobs)) as work:
            self._work = work
            try:
                yield
            finally:
                self._work = None

    def _item(self, desc: Descriptor) -> _Moving:
        work = self._work or progress.NullReporter().work("", total=None, items=0)
        item = _Moving(work.item(desc.digest.short, desc.size))
        with self._lock:
            self._items[desc.digest] = item
        return item

    def count(self, name: str, amount: int = 1) -> None:
        """Add to a counter of the result; blobs are copied on several threads."""
        with self._lock:
            setattr(self.result, name, getattr(self.result, name) + amount)

    def say(self, text: str) -> None:
        with self._lock:
            self.result.log.append(text)
        if self._log is not None:
            self._log(text)

    # ------------------------------------------------------------------ blobs

    def blob(self, desc: Descriptor) -> None:
        self.push(BlobSource(desc, repository=self.src))

    def push(self, source: BlobSource) -> None:
        """Make sure DST holds the blob: there already, mounted, or uploaded; never while
        another thread of this process writes the same blob to the same registry
        (:func:`blob_write`)."""
        with blob_write(self.dst.registry, source.descriptor.digest):
            self.stop.check()  # interrupted while it waited: write nothing more
            self._push(source)

    def _push(self, source: BlobSource) -> None:
        desc = source.descriptor
        digest = desc.digest
        item = self._item(desc)
        if self.client.blob_exists(self.dst, digest):
            self.count("blobs_existing")
            item.done("already there")
            return
        location: str | None = None
        origin = source.repository
        if (
            origin is not None
            and origin.registry == self.dst.registry
            and origin.repository != self.dst.repository
        ):
            try:
                response = self.client.request(
                    "POST",
                    self.dst,
                    f"blobs/uploads/?mount={digest}&from={origin.repository}",
                    scope_actions=PUSH,
                    extra_scopes=(f"repository:{origin.repository}:pull",),
                    content=b"",
                    allow_status=(201, 202),
                )
            except RegistryUnauthorized as exc:
                # Harbor and Nexus refuse a mount from a repository the token may not read
                # with 401 or 403; an upload may still be allowed (ggcr and containers/image
                # fall back the same way).
                self.say(
                    f"{self.dst.registry} refused to mount {digest.short} from "
                    f"{origin.repository} (HTTP {exc.status}); uploading it"
                )
            else:
                if response.status_code == 201:
                    self.count("blobs_mounted")
                    item.done("mounted")
                    self.say(f"mounted {digest.short} from {origin.repository}")
                    return
                location = response.headers.get("Location")  # 202: an upload session instead
                self.say(f"{self.dst.registry} did not mount {digest.short}; uploading it")
        if not source.distributable:
            if location is not None:
                self.uploads.cancel(location, digest)
            self.count("blobs_skipped")
            item.done("not uploaded (non-distributable)")
            self.say(f"not uploaded: {digest.short} is a non-distributable layer")
            return
        session: list[str] = [location] if location else []  # the session's newest URL
        min_length = 0
        chunked = self.chunk_size is not None and desc.size > self.chunk_size
        try:
            for attempt in range(3):
                if not session:
                    started, min_length = self.uploads.start_upload()
                    session.append(started)
                try:
                    if chunked:
                        self.uploads.chunked(session, source, min_length)
                    else:
                        try:
                            self.uploads.monolithic(session[-1], source)
                        except TooLarge as exc:
                            self.say(
                                f"{self.dst.registry} refused {digest.short} in one PUT "
                                f"({exc.cause.message}); sending it in chunks"
                            )
                            self.uploads.cancel(session.pop(), digest)
                            chunked = True
                            started, min_length = self.uploads.start_upload()
                            session.append(started)
                            stated = stated_max_size(exc.cause.message)
                            self.uploads.chunked(session, source, min_length, first=stated)
                    session.clear()  # complete: nothing to cancel
                    break
                except LostUpload as exc:
                    if attempt == 2:
                        raise exc.cause from exc
                    self.count("upload_restarts")
                    self.say(f"restarting the upload of {digest.short}: {exc.cause.message}")
                    session.clear()  # the registry refused it already
        finally:
            if session:
                self.uploads.cancel(session[-1], digest)
        self.count("blobs_uploaded")
        self.count("bytes_uploaded", desc.size)
        item.done()
        self.say(f"uploaded {digest.short} ({human_bytes(desc.size)})")

    def _pieces(self, source: BlobSource) -> Generator[bytes, None, None]:
        """The blob's bytes as they come (SRC's download, or bytes held here), stopping
        between pieces once interrupted; the download is closed when the caller stops."""
        if source.data is not None:
            pieces: Iterable[bytes] = source.data()
        elif source.repository is None:  # pragma: no cover - a wiring bug
            raise ValueError(f"no bytes and no repository for {source.descriptor.digest}")
        else:
            pieces = self.client.stream_blob(source.repository, source.descriptor)
        iterator = iter(pieces)
        with self._lock:
            item = self._items.get(source.descriptor.digest)
        if item is not None:
            item.restart()  # a send again (a retry, a 401) moves its bytes again
        try:
            for piece in iterator:
                self.stop.check()
                if item is not None:
                    item.advance(len(piece))
                yield piece
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()

    def manifest(self, digest: Digest | str, size: int | None, *, tag: str | None) -> Digest:
        body, media_type, actual = self.client.get_manifest(self.src, digest, expected_size=size)
        parsed = parse_manifest(
            body,
            media_type,
            registry=self.src.registry,
            repository=self.src.repository,
            digest=str(actual),
        )
        if media_type in INDEX_TYPES:
            assert isinstance(parsed, ImageIndex)  # noqa: S101 - parse_manifest's contract
            for child in parsed.manifests:
                self.manifest(child.digest, child.size, tag=None)
        else:
            assert isinstance(parsed, ImageManifest)  # noqa: S101 - parse_manifest's contract
            blobs = [Descriptor.from_model(parsed.config)]
            blobs += [Descriptor.from_model(layer) for layer in parsed.layers]
            sources = [BlobSource(blob, repository=self.src) for blob in blobs]
            with self.working(sources), ThreadPoolExecutor(max_workers=self.workers) as pool:
                futures = [pool.submit(self.blob, blob) for blob in blobs]
                wait_all(futures, self.stop)
                for future in futures:
                    future.result()
        self.put_manifest(body, media_type, actual, tag)
        return actual

    def put_manifest(self, body: bytes, media_type: str, digest: Digest, tag: str | None) -> None:
        response = self.client.request(
            "PUT",
            self.dst,
            f"manifests/{tag or digest}",
            scope_actions=PUSH,
            headers={"Content-Type": media_type},
            content=body,
        )
        announced = response.headers.get("Docker-Content-Digest")
        if announced and announced.strip() != str(digest):
            raise RegistryProtocolError(
                f"{self.dst.name}: stored the manifest as {announced.strip()}, not {digest}",
                registry=self.dst.registry,
                repository=self.dst.repository,
                digest=str(digest),
            )
        self.count("manifests")
        self.say(f"put manifest {digest.short} ({media_type})" + (f" as :{tag}" if tag else ""))


def copy_image(
    client: RegistryClient,
    src: Reference,
    dst: Reference,
    *,
    chunk_size: int | None = None,
    workers: int = 4,
    log: Callable[[str], None] | None = None,
) -> CopyResult:
    """Copy SRC (a manifest or an index with all its children) to DST, digests preserved.

    DST's tag receives the top-level document; with DST by digest only, the digest must be
    SRC's. Returns what was done (mounted, uploaded, already there).
    """
    body, media_type, digest = client.get_manifest(src, src.identifier)
    if dst.digest is not None and dst.digest != digest:
        raise RegistryProtocolError(
            f"DST names {dst.digest} but SRC is {digest}: a copy keeps digests",
            registry=dst.registry,
            repository=dst.repository,
        )
    result = CopyResult(source=str(src), destination=str(dst), digest=digest, media_type=media_type)
    copier = _Copier(client, src, dst, result, chunk_size=chunk_size, workers=workers, log=log)
    copier.manifest(digest, len(body), tag=dst.tag)
    return result


def push_blobs(
    client: RegistryClient,
    dst: Reference,
    blobs: Sequence[BlobSource],
    *,
    workers: int = 4,
    log: Callable[[str], None] | None = None,
) -> CopyResult:
    """Make sure DST's repository holds these blobs (there already, mounted or uploaded).

    For writers that must put their blobs in place well before a manifest (a tag that other
    writers update too: the window between reading the tag and writing it stays short).
    """
    result = CopyResult(
        source="(held here)", destination=str(dst), digest=Digest.of_bytes(b""), media_type=""
    )
    pusher = _Copier(client, dst, dst, result, chunk_size=16 * MiB, workers=workers, log=log)
    with (
        pusher.working(blobs),
        ThreadPoolExecutor(max_workers=max(1, min(workers, len(blobs)))) as pool,
    ):
        futures = [pool.submit(pusher.push, blob) for blob in blobs]
        wait_all(futures, pusher.stop)
        for future in futures:
            future.result()
    return result


def push_manifest(
    client: RegistryClient,
    dst: Reference,
    body: bytes,
    media_type: str,
    blobs: Sequence[BlobSource],
    *,
    tag: str | None = None,
    result: CopyResult | None = None,
    chunk_size: int | None = None,
    workers: int = 4,
    log: Callable[[str], None] | None = None,
) -> CopyResult:
    """Push the blobs a manifest names, then the manifest (by ``tag``, else by digest).

    The manifest goes last, once every blob is in DST; with ``result`` the counts add up
    over several calls (an image, then the index holding it).
    """
    digest = Digest.of_bytes(body)
    result = result or CopyResult(
        source="(assembled here)", destination=str(dst), digest=digest, media_type=media_type
    )
    pusher = _Copier(client, dst, dst, result, chunk_size=chunk_size, workers=workers, log=log)
    if blobs:
        with (
            pusher.working(blobs),
            ThreadPoolExecutor(max_workers=min(workers, len(blobs))) as pool,
        ):
            futures = [pool.submit(pusher.push, blob) for blob in blobs]
            wait_all(futures, pusher.stop)
            for future in futures:
                future.result()
    pusher.put_manifest(body, media_type, digest, tag)
    result.digest, result.media_type = digest, media_type
    return result
