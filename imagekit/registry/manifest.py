"""Manifests, indexes and image configs: media types, models, and the checks before parsing.

Every document is kept as the exact bytes received (digests are computed over those bytes,
never over a re-serialisation) and parsed into frozen pydantic models. Manifests, indexes and
descriptors model every field of the OCI image spec v1.1 and Docker schema 2 and forbid the
rest, so a document we do not fully understand is refused rather than half-read. Image
configs ignore unknown fields instead: Docker's config is the legacy v1 image JSON, full of
fields (container_config, docker_version, ...) that we never read and must not choke on.

Refused before any model is built (each is a trick that confused some client once):
schema 1 manifests; a ``mediaType`` that disagrees with the Content-Type; a "manifest" with
``manifests`` or an "index" with ``layers``/``config``
(https://github.com/opencontainers/image-spec/security/advisories/GHSA-77vh-xpmg-72qh).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PlainSerializer,
    PlainValidator,
    ValidationError,
)

from imagekit import jsondoc
from imagekit.errors import ImageContentError, ReferenceFormatError, RegistryProtocolError
from imagekit.refs import Digest, Platform, Reference
from imagekit.registry.transport import MAX_MANIFEST_BYTES, excerpt

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_SCHEMA1 = (
    "application/vnd.docker.distribution.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v1+prettyjws",
)
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"

MANIFEST_TYPES = frozenset({OCI_MANIFEST, DOCKER_MANIFEST})
INDEX_TYPES = frozenset({OCI_INDEX, DOCKER_MANIFEST_LIST})
CONFIG_TYPES = frozenset({OCI_CONFIG, DOCKER_CONFIG})
#: What we send as Accept: every type we can read, nothing else (so a registry that still
#: holds schema 1 must convert, or we see it and refuse it with a clear message).
ACCEPT = (OCI_INDEX, DOCKER_MANIFEST_LIST, OCI_MANIFEST, DOCKER_MANIFEST)
_GENERIC_TYPES = frozenset({"", "application/json", "application/octet-stream", "text/plain"})
_Model = TypeVar("_Model", bound=BaseModel)


def _to_digest(value: Any) -> Digest:
    if not isinstance(value, str):
        raise ValueError("a digest must be a string")
    try:
        return Digest(value)
    except ReferenceFormatError as exc:
        raise ValueError(exc.message) from exc


DigestField = Annotated[Digest, PlainValidator(_to_digest), PlainSerializer(str)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class PlatformModel(_Strict):
    architecture: str
    os: str
    os_version: str | None = Field(default=None, alias="os.version")
    os_features: tuple[str, ...] | None = Field(default=None, alias="os.features")
    variant: str | None = None
    features: tuple[str, ...] | None = None

    def to_platform(self) -> Platform:
        return Platform(self.os, self.architecture, self.variant or None)


class DescriptorModel(_Strict):
    mediaType: str
    digest: DigestField
    size: NonNegativeInt
    urls: tuple[str, ...] | None = None
    annotations: dict[str, str] | None = None
    data: str | None = None
    artifactType: str | None = None
    platform: PlatformModel | None = None


class ImageManifest(_Strict):
    """An OCI image manifest or a Docker schema 2 manifest."""

    schemaVersion: Literal[2]
    mediaType: str | None = None
    artifactType: str | None = None
    config: DescriptorModel
    layers: tuple[DescriptorModel, ...]
    subject: DescriptorModel | None = None
    annotations: dict[str, str] | None = None


class ImageIndex(_Strict):
    """An OCI image index or a Docker manifest list."""

    schemaVersion: Literal[2]
    mediaType: str | None = None
    artifactType: str | None = None
    manifests: tuple[DescriptorModel, ...]
    subject: DescriptorModel | None = None
    annotations: dict[str, str] | None = None


class RootFS(_Lenient):
    type: Literal["layers"]
    diff_ids: tuple[DigestField, ...]


class ImageConfig(_Lenient):
    """The parts of an image config we read; the exact bytes are kept beside it."""

    architecture: str
    os: str
    variant: str | None = None
    os_version: str | None = Field(default=None, alias="os.version")
    created: str | None = None
    rootfs: RootFS
    config: dict[str, Any] | None = None
    history: tuple[dict[str, Any], ...] | None = None

    def platform(self) -> Platform:
        return Platform(self.os, self.architecture, self.variant or None)


@dataclass(frozen=True)
class Descriptor:
    """A content descriptor: what a manifest says about a blob or a child manifest."""

    media_type: str
    digest: Digest
    size: int
    urls: tuple[str, ...] = ()
    # Excluded from the hash (a dict is unhashable) so descriptors can sit in sets.
    annotations: dict[str, str] | None = field(default=None, hash=False)
    platform: Platform | None = None

    @classmethod
    def from_model(cls, model: DescriptorModel) -> Descriptor:
        return cls(
            media_type=model.mediaType,
            digest=model.digest,
            size=model.size,
            urls=tuple(model.urls or ()),
            annotations=dict(model.annotations) if model.annotations is not None else None,
            platform=model.platform.to_platform() if model.platform is not None else None,
        )

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "media_type": self.media_type,
            "digest": str(self.digest),
            "size": self.size,
        }
        if self.urls:
            document["urls"] = list(self.urls)
        if self.annotations:
            document["annotations"] = dict(self.annotations)
        if self.platform is not None:
            document["platform"] = str(self.platform)
        return document


def _base_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


@dataclass(frozen=True)
class _Origin:
    """Where a document came from; every refusal of it names that registry, repository and
    digest (never a credential)."""

    registry: str
    repository: str | None
    digest: str | None

    @property
    def where(self) -> str:
        return f"{self.registry}/{self.repository}" if self.repository else self.registry

    def refused(self, message: str, *, hint: str | None = None) -> RegistryProtocolError:
        return RegistryProtocolError(
            message,
            registry=self.registry,
            repository=self.repository,
            digest=self.digest,
            hint=hint,
        )

    def schema1(self) -> RegistryProtocolError:
        return self.refused(
            f"{self.where} serves a Docker schema 1 manifest, which imagekit refuses (it has no "
            "content-addressed config and is deprecated)",
            hint="re-push the image with a current docker or skopeo so it gets a schema 2 or OCI "
            "manifest",
        )

    def parsed(self, body: bytes, what: str) -> Any:
        """``body``'s JSON through the bounded reader (imagekit.jsondoc); what it refuses (too
        deep, a NaN, a key twice, not JSON) is this registry's answer refused."""
        try:
            return jsondoc.loads(body, limit=MAX_MANIFEST_BYTES)
        except jsondoc.JsonRefused as exc:
            raise self.refused(
                f"{self.where}: malformed {what}, not JSON imagekit accepts: {exc}"
            ) from None

    def validated(self, model: type[_Model], body: bytes, what: str) -> _Model:
        """``body`` as ``model``; a document it does not validate as is refused as malformed."""
        document = self.parsed(body, what)
        try:
            return model.model_validate(document)
        except ValidationError as exc:
            raise self.refused(
                f"{self.registry}/{self.repository or ''}: malformed {what}: {_first_error(exc)}"
            ) from exc


def detect_media_type(
    body: bytes,
    content_type: str | None,
    *,
    registry: str,
    repository: str | None = None,
    digest: str | None = None,
) -> str:
    """The media type of a manifest or index, after refusing every ambiguous document.

    The type in the body (``mediaType``) and in the Content-Type header must agree when both
    name a manifest type; a generic Content-Type (application/json) defers to the body; a
    document naming no type at all is classified by its shape, as containerd does.
    """
    origin = _Origin(registry, repository, digest)
    where = origin.where
    header_type = _base_type(content_type)
    if header_type in ("text/html", "application/xhtml+xml") or body.lstrip()[:1] == b"<":
        raise origin.refused(
            f"{where} answered HTML instead of a manifest: {excerpt(body)}",
            hint="check the registry host and port; a web page or proxy answered",
        )
    if header_type in DOCKER_SCHEMA1:
        raise origin.schema1()
    document = origin.parsed(body, "manifest")
    if not isinstance(document, dict):
        raise origin.refused(f"{where} answered JSON that is not an object: {excerpt(body)}")
    if document.get("schemaVersion") == 1 or document.get("mediaType") in DOCKER_SCHEMA1:
        raise origin.schema1()
    body_type = document.get("mediaType")
    if body_type is not None and not isinstance(body_type, str):
        raise origin.refused(f"{where}: mediaType is not a string")
    known = MANIFEST_TYPES | INDEX_TYPES
    if body_type is not None and body_type not in known:
        raise origin.refused(f"{where}: unsupported manifest media type {body_type!r}")
    if header_type and header_type not in _GENERIC_TYPES and header_type not in known:
        raise origin.refused(
            f"{where} answered Content-Type {header_type!r}, not a manifest: {excerpt(body)}"
        )
    if body_type and header_type in known and body_type != header_type:
        raise origin.refused(
            f"{where}: the document says mediaType {body_type} but was served as {header_type}",
            hint="a manifest's declared type and Content-Type must agree; refused as ambiguous",
        )
    media_type = body_type or (header_type if header_type in known else None)
    if media_type is None:
        if "manifests" in document and "layers" not in document:
            media_type = OCI_INDEX
        elif "layers" in document and "manifests" not in document:
            media_type = OCI_MANIFEST
        else:
            raise origin.refused(
                f"{where}: cannot tell whether the document is a manifest or an index"
            )
    if media_type in MANIFEST_TYPES and "manifests" in document:
        raise origin.refused(
            f"{where}: a manifest ({media_type}) that also carries `manifests`; refused"
        )
    if media_type in INDEX_TYPES and ("layers" in document or "config" in document):
        raise origin.refused(
            f"{where}: an index ({media_type}) that also carries `layers` or `config`; refused"
        )
    return media_type


def parse_manifest(
    body: bytes,
    media_type: str,
    *,
    registry: str,
    repository: str | None = None,
    digest: str | None = None,
) -> ImageManifest | ImageIndex:
    """Parse bytes already vetted by :func:`detect_media_type` into the right model."""
    origin = _Origin(registry, repository, digest)
    if media_type in INDEX_TYPES:
        return origin.validated(ImageIndex, body, media_type)
    return origin.validated(ImageManifest, body, media_type)


def parse_index(
    body: bytes, media_type: str, ref: Reference, digest: str | None = None
) -> ImageIndex:
    """Parse the bytes of an index read from ``ref``'s repository (``media_type`` one of
    INDEX_TYPES, as its caller checked)."""
    parsed = parse_manifest(
        body, media_type, registry=ref.registry, repository=ref.repository, digest=digest
    )
    assert isinstance(parsed, ImageIndex)  # noqa: S101 - parse_manifest's contract
    return parsed


def parse_config(
    body: bytes, *, registry: str, repository: str | None = None, digest: str | None = None
) -> ImageConfig:
    """The image config; one that does not validate is the image's own fault (a config is
    fetched by its digest, so these are the bytes the manifest names): ImageContentError."""
    try:
        return _Origin(registry, repository, digest).validated(ImageConfig, body, "image config")
    except RegistryProtocolError as exc:
        raise ImageContentError(
            exc.message, registry=registry, repository=repository, digest=digest, hint=exc.hint
        ) from exc


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False, include_input=False)
    if not errors:
        return "invalid"
    first = errors[0]
    location = ".".join(str(p) for p in first.get("loc", ()))
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{location}: {first.get('msg', 'invalid')}{more}"
