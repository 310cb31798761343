"""The OCI registry client: read (and, through ``request``, write) registries safely.

Public API::

    from imagekit.registry import RegistryClient, ResolvedImage, Descriptor

    with RegistryClient(insecure=("myreg:5000",), docker_config=None) as client:
        image = client.resolve(ref, platform=None)      # -> ResolvedImage (index narrowed to
                                                        #    linux/amd64 unless told otherwise)
        body, media_type, digest = client.get_manifest(ref, "tag-or-digest")
        head = client.head_manifest(ref, "tag")         # -> ManifestHead (digest as served)
        for chunk in client.stream_blob(ref, image.layers[0]):   # verified as it arrives
            ...
        client.blob_exists(ref, digest); client.ping("host:port")
        response = client.request("PUT", ref, "manifests/v1", scope_actions=("pull", "push"),
                                  headers=..., content=...)      # auth, retries, errors

- Loopback hosts (127.0.0.0/8, ::1, localhost) use plain HTTP unless Docker's certs.d has a
  folder for them; hosts in ``insecure`` TLS without verification, else plain HTTP;
  everything else HTTPS verified against the system trust store, ``ca_file`` and certs.d
  (tls: one story for every command, set per process by the CLI).
- Credentials come from the docker config (``$DOCKER_CONFIG/config.json``: auths,
  credHelpers, credsStore); never logged, never in messages or reprs.
- Every manifest and blob is checked against its digest and size as it arrives; errors are
  the classes of imagekit.errors (DigestMismatch exits 1, registry errors exit 3).

Modules: tls (CAs, client certificates, insecure hosts), transport (httpx, redirects,
limits, environment proxies), retry (attempts, backoff, Retry-After, 429), wire (HTTP/1.1
through http.client under httpx: the fast path for blob bodies), auth (WWW-Authenticate,
tokens), credentials (docker config), manifest (media types, models, Descriptor), session
(one request: mirrors, auth, retries, a status as our error), documents (manifests and
indexes read and checked), blobs (probed, streamed and verified), resolve (a reference
narrowed to one platform's image), client (RegistryClient: the session and those reads),
upload (copying blobs and manifests), blob_upload (one blob's upload session: one PUT, or
chunks resumed), blob_write (one writer of a blob at a time).

The names above are listed once, in ``__init__.pyi`` beside this file, and handed out on first
use (imagekit.lazy): importing one module of the package (``tls``, the manifest models the
ledger's records use) does not load the HTTP client and httpx with it.
"""

from __future__ import annotations

from imagekit.lazy import lazy_face

__all__, __getattr__, __dir__ = lazy_face(globals())
