"""RegistryClient: the OCI distribution API, read side, with every byte checked.

A thin face over the registry's concerns, one module each: the session (TLS, mirrors, auth,
retries, an HTTP status turned into our error: imagekit.registry.session), manifests and
indexes (documents), blobs (blobs) and a reference resolved to one platform's image
(resolve). Reads go ``resolve`` -> ``get_manifest`` -> ``stream_blob``; each returns only
bytes whose digest and size were verified against what was asked for. ``request`` is the
documented low-level entry that the push side (imagekit.registry.upload) builds on.
"""

from __future__ import annotations

from imagekit.registry import blobs, documents
from imagekit.registry import resolve as resolving
from imagekit.registry.session import Session


class RegistryClient(Session):
    """A client for OCI distribution registries: a session, and the reads made through it.

    Each read is the function of its module with this client as its session, so a caller
    holding a client calls ``client.resolve(ref)`` and one holding a session may call
    ``resolve.resolve(session, ref)`` alike.
    """

    get_manifest = documents.get_manifest
    head_manifest = documents.head_manifest
    probe_blob = blobs.probe_blob
    blob_exists = blobs.blob_exists
    fetch_blob = blobs.fetch_blob
    stream_blob = blobs.stream_blob
    resolve = resolving.resolve
