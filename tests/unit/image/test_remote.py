"""The registry's image on blobs built here: each codec inflated and its diffID checked, and
a hostile layer cut off at the limits `imagekit mirror` applies."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from imagekit.errors import DigestMismatch, LayerFormatError
from imagekit.layers.media import LayerLimits
from imagekit.refs import Digest
from tests.support.layer_tars import f, make_tar


def _registry_image(
    blobs: list[bytes], diff_ids: list[Digest], limits: LayerLimits | None = None
) -> Any:
    from types import SimpleNamespace

    from imagekit.image.remote import RegistryImage

    gzip_type = "application/vnd.oci.image.layer.v1.tar+gzip"  # the bytes decide (detect)
    layers = [
        SimpleNamespace(digest=f"sha256:{i:064d}", media_type=gzip_type) for i in range(len(blobs))
    ]

    class Client:
        def stream_blob(self, ref: object, desc: Any) -> Any:
            data = blobs[int(desc.digest.split(":")[1])]
            return iter([data[i : i + 7000] for i in range(0, len(data), 7000)])

    resolved = SimpleNamespace(reference="r", layers=layers, diff_ids=diff_ids)
    return RegistryImage(Client(), resolved, "reg", limits=limits or LayerLimits())  # type: ignore[arg-type]


@pytest.mark.parametrize("codec", ["gzip", "gzip-multimember", "zstd", "none"])
def test_registry_image_decompresses_and_checks_diff_ids(codec: str) -> None:
    import gzip

    import zstandard

    layer = make_tar([f("big", bytes(range(256)) * 4000), f("small", b"s")])
    if codec == "gzip":
        blob = gzip.compress(layer)
    elif codec == "gzip-multimember":
        blob = gzip.compress(layer[:5000]) + gzip.compress(layer[5000:])
    elif codec == "zstd":
        blob = zstandard.ZstdCompressor().compress(layer)
    else:
        blob = layer
    diff_id = Digest("sha256:" + hashlib.sha256(layer).hexdigest())
    image = _registry_image([blob], [diff_id])
    scans = image.scan([0])
    assert scans[0].diff_id == diff_id
    assert scans[0].entries["big"].size == 256 * 4000


def test_registry_image_refuses_a_layer_that_is_not_its_diff_id() -> None:
    import gzip

    layer = make_tar([f("a", b"1")])
    image = _registry_image([gzip.compress(layer)], [Digest("sha256:" + "1" * 64)])
    with pytest.raises(DigestMismatch):
        image.scan([0])


def test_registry_image_cuts_off_a_decompression_bomb_like_mirror_does() -> None:
    """Nightly compares layers through RegistryImage: a hostile layer must be cut off at the
    same limits `imagekit mirror` applies (imagekit.layers), not inflated without bound."""
    import gzip

    bomb = gzip.compress(b"\0" * (8 << 20))  # 8 MiB of zeros in a few KiB
    image = _registry_image(
        [bomb], [Digest("sha256:" + "1" * 64)], LayerLimits(max_uncompressed_bytes=1 << 20)
    )
    with pytest.raises(LayerFormatError, match="exceeds the limit"):
        image.scan([0])


def test_registry_image_refuses_a_zstd_window_over_the_limit() -> None:
    import zstandard

    # A 2 MiB frame declares a window of its content size, twice the limit set here.
    layer = make_tar([f("a", hashlib.sha256(b"seed").digest() * (1 << 16))])
    blob = zstandard.ZstdCompressor().compress(layer)
    image = _registry_image(
        [blob],
        [Digest("sha256:" + hashlib.sha256(layer).hexdigest())],
        LayerLimits(max_zstd_window=1 << 20),
    )
    with pytest.raises(LayerFormatError, match="zstd"):
        image.scan([0])
