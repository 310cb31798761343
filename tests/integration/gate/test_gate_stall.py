"""Whoever may push to a repository may add layers to an image's .att tag: no such layer can
stall the gate. A layer over the envelope limit (a 100 MB envelope), or one whose size is
negative, huge or wrong, is skipped with its reason like an envelope that does not parse,
and the decision is made on the rest; 10,000 layers naming one blob fetch it once and say
so once."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from imagekit.attest.cosign_tags import att_tag
from imagekit.attest.dsse import DSSE_MEDIA_TYPE
from imagekit.attest.keys import KeyPairFiles
from imagekit.kinds.audit import AUDIT_V1
from imagekit.refs import Reference, parse_reference
from tests.support.faultproxy import FaultProxy
from tests.support.gate import audit_predicate, sign_onto, verify
from tests.support.images import Pushed, Writer
from tests.support.media_types import OCI_MANIFEST
from tests.support.registries import RunningRegistry

MB = 1_000_000


@pytest.fixture(scope="module")
def big_envelope(registry: RunningRegistry) -> tuple[str, int]:
    """A 100 MB "envelope" (JSON whitespace around one object), pushed once: digest, size."""
    data = b"{" + b" " * (100 * MB - 2) + b"}"
    with Writer(registry.host) as writer:
        return writer.blob("gate/stall", data), len(data)


def _add_layers(
    registry: RunningRegistry, image: Reference, layers: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """LAYERS appended to IMAGE's .att manifest, as anyone with push rights may."""
    assert image.digest is not None
    with Writer(registry.host) as writer:
        tag = att_tag(image.digest)
        manifest = json.loads(writer.get_manifest(image.repository, tag).content)
        manifest["layers"] += layers
        writer.manifest(image.repository, tag, json.dumps(manifest).encode(), OCI_MANIFEST)
        return list(manifest["layers"])


def _layer(digest: str, size: object) -> dict[str, Any]:
    return {"mediaType": DSSE_MEDIA_TYPE, "digest": digest, "size": size,
            "annotations": {"predicateType": AUDIT_V1}}  # fmt: skip


@pytest.mark.parametrize(
    ("size", "reason"),
    [
        ("true", "bytes, over the 4194304-byte limit for an envelope: not read"),
        (-1, "layer 1: size -1: not a size"),
        (2**62, "bytes, over the 4194304-byte limit for an envelope: not read"),
        (1000, "its blob cannot be read:"),  # the 100 MB blob, declared as 1000 bytes
    ],
)
def test_a_layer_that_cannot_be_read_is_skipped_and_the_rest_decide(
    make_image: Callable[[str], Pushed], registry: RunningRegistry, pair: KeyPairFiles,
    big_envelope: tuple[str, int], size: object, reason: str,
) -> None:  # fmt: skip
    image = parse_reference(make_image("gate/stall").reference)
    sign_onto(image, pair, audit_predicate())
    digest, true_size = big_envelope  # in this image's repository
    _add_layers(registry, image, [_layer(digest, true_size if size == "true" else size)])
    code, document = verify(str(image), "--key", str(pair.public))
    assert code == 0, document
    [skipped] = document["skipped"]
    assert skipped["layer"] == digest and reason in skipped["reason"], skipped


@pytest.fixture
def proxy(registry: RunningRegistry) -> Iterator[FaultProxy]:
    with FaultProxy(registry.host) as running:
        yield running


def test_ten_thousand_layers_naming_one_blob_fetch_it_once(
    make_image: Callable[[str], Pushed], registry: RunningRegistry, pair: KeyPairFiles,
    proxy: FaultProxy,
) -> None:  # fmt: skip
    image = parse_reference(make_image("gate/repeat").reference)
    envelope = str(sign_onto(image, pair, audit_predicate()))
    [signed] = _add_layers(registry, image, [])
    _add_layers(registry, image, [signed] * 9_999)
    assert image.digest is not None
    code, document = verify(f"{proxy.host}/{image.repository}@{image.digest}", "--key",
                            str(pair.public))  # fmt: skip
    assert code == 0, document
    assert document["skipped"] == [
        {
            "layer": envelope,
            "reason": "named by 9999 more layer(s) of the tag: the blob was read once",
        }
    ]
    fetched = [e for e in proxy.log if e.method == "GET" and e.path.endswith(f"/blobs/{envelope}")]
    assert len(fetched) == 1
