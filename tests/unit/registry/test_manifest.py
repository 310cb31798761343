"""Media type detection and the models: every ambiguous document is refused."""

from __future__ import annotations

import pytest

from imagekit.errors import ImageContentError, RegistryProtocolError
from imagekit.registry.manifest import (
    DOCKER_MANIFEST,
    DOCKER_MANIFEST_LIST,
    OCI_INDEX,
    OCI_MANIFEST,
    ImageIndex,
    ImageManifest,
    detect_media_type,
    parse_config,
    parse_manifest,
)
from tests.unit.registry.fakes import dumps, entry, make_image

IMAGE = make_image()
INDEX = dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [entry(IMAGE)]})


def detect(body: bytes, content_type: str | None) -> str:
    return detect_media_type(body, content_type, registry="r.example", repository="a/b")


def test_agreeing_types() -> None:
    assert detect(IMAGE.manifest, OCI_MANIFEST) == OCI_MANIFEST
    assert detect(IMAGE.manifest, "application/json") == OCI_MANIFEST
    assert detect(INDEX, OCI_INDEX + "; charset=utf-8") == OCI_INDEX


def test_type_from_shape_when_nothing_names_it() -> None:
    bare = dumps({"schemaVersion": 2, "config": {}, "layers": []})
    assert detect(bare, None) == OCI_MANIFEST
    assert detect(dumps({"schemaVersion": 2, "manifests": []}), "") == OCI_INDEX
    assert detect(bare, DOCKER_MANIFEST) == DOCKER_MANIFEST


def test_media_type_disagreeing_with_content_type() -> None:
    with pytest.raises(RegistryProtocolError, match="served as"):
        detect(IMAGE.manifest, DOCKER_MANIFEST)
    with pytest.raises(RegistryProtocolError, match="served as"):
        detect(INDEX, OCI_MANIFEST)


def test_manifest_carrying_manifests_refused() -> None:
    doc = dumps(
        {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": {}, "layers": [], "manifests": []}
    )
    with pytest.raises(RegistryProtocolError, match="also carries `manifests`"):
        detect(doc, OCI_MANIFEST)


@pytest.mark.parametrize("extra", ["layers", "config"])
def test_index_carrying_layers_refused(extra: str) -> None:
    doc = dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST_LIST, "manifests": [], extra: []})
    with pytest.raises(RegistryProtocolError, match="also carries `layers` or `config`"):
        detect(doc, DOCKER_MANIFEST_LIST)


def test_ambiguous_shape_refused() -> None:
    with pytest.raises(RegistryProtocolError, match="cannot tell"):
        detect(dumps({"schemaVersion": 2, "manifests": [], "layers": []}), None)


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (dumps({"schemaVersion": 1, "name": "a/b", "fsLayers": []}), "application/json"),
        (b"{}", "application/vnd.docker.distribution.manifest.v1+prettyjws"),
        (dumps({"mediaType": "application/vnd.docker.distribution.manifest.v1+json"}), None),
    ],
)
def test_schema1_refused(body: bytes, content_type: str | None) -> None:
    with pytest.raises(RegistryProtocolError, match="schema 1") as info:
        detect(body, content_type)
    assert info.value.hint is not None and "re-push" in info.value.hint


@pytest.mark.parametrize(
    ("body", "content_type", "quote"),
    [
        (b"<html><h1>502 Bad Gateway</h1></html>", "text/html", "502 Bad Gateway"),
        (b"\x1f\x8b\x08garbage", "application/octet-stream", "not JSON"),
        (b"[1, 2]", OCI_MANIFEST, "not an object"),
        (b'{"a": 1}', "text/csv", "text/csv"),
    ],
)
def test_garbage_refused_with_an_excerpt(body: bytes, content_type: str, quote: str) -> None:
    with pytest.raises(RegistryProtocolError, match=quote):
        detect(body, content_type)


def test_unknown_media_type_in_body_refused() -> None:
    with pytest.raises(RegistryProtocolError, match="unsupported manifest media type"):
        detect(dumps({"schemaVersion": 2, "mediaType": "application/x-other"}), None)


def _oci_manifest(config: dict[str, object], **extra: object) -> bytes:
    """An OCI image manifest with this config descriptor, no layers, and any extra keys."""
    document = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": config, "layers": []}
    return dumps({**document, **extra})


def test_models_parse_and_forbid_unknown_fields() -> None:
    manifest = parse_manifest(IMAGE.manifest, OCI_MANIFEST, registry="r")
    assert isinstance(manifest, ImageManifest)
    assert manifest.layers[0].size > 0
    index = parse_manifest(INDEX, OCI_INDEX, registry="r")
    assert isinstance(index, ImageIndex)
    odd = _oci_manifest({}, surprise=True)
    with pytest.raises(RegistryProtocolError, match="malformed"):
        parse_manifest(odd, OCI_MANIFEST, registry="r")


def test_descriptor_digest_validated_in_models() -> None:
    doc = _oci_manifest({"mediaType": "x", "digest": "sha256:../../etc/passwd", "size": 1})
    with pytest.raises(RegistryProtocolError, match="config.digest"):
        parse_manifest(doc, OCI_MANIFEST, registry="r")


def test_negative_size_refused() -> None:
    doc = _oci_manifest({"mediaType": "x", "digest": "sha256:" + "a" * 64, "size": -1})
    with pytest.raises(RegistryProtocolError):
        parse_manifest(doc, OCI_MANIFEST, registry="r")


def test_config_keeps_diff_ids_and_ignores_legacy_fields() -> None:
    config = parse_config(
        dumps(
            {
                "architecture": "amd64",
                "os": "linux",
                "docker_version": "20.10",
                "container_config": {},
                "rootfs": {"type": "layers", "diff_ids": [IMAGE.diff_id]},
            }
        ),
        registry="r",
    )
    assert config.rootfs.diff_ids == (IMAGE.diff_id,)
    with pytest.raises(ImageContentError):
        parse_config(
            dumps(
                {
                    "architecture": "amd64",
                    "os": "linux",
                    "rootfs": {"type": "layers", "diff_ids": ["sha256:XYZ"]},
                }
            ),
            registry="r",
        )
