"""An index at the gate is judged on every entry a runtime could select, as containerd
selects them: an entry without a platform (read from its config), one an annotation marks,
one spelled x86_64; only unknown/unknown is an attestation manifest. Whether a digest is an
index is read from the manifest's bytes, not from a Content-Type a proxy rewrites."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from imagekit.attest.keys import KeyPairFiles
from imagekit.refs import parse_reference
from tests.support.faultproxy import Fault, FaultProxy
from tests.support.gate import audit_predicate, failing, sign_onto, verify
from tests.support.images import Blob, M, Pushed, Writer
from tests.support.media_types import OCI_INDEX
from tests.support.registries import RunningRegistry

REPO = "gate/entries"
ANNOTATED = {"vnd.docker.reference.type": "attestation-manifest"}


def _image(writer: Writer, arch: str, note: str, variant: str | None = None) -> Pushed:
    layer = Blob.gzip([M(f"{arch}-{note}.txt", data=f"{arch} {note}".encode())])
    return writer.image(REPO, f"{arch}-{note}", [layer], arch=arch, variant=variant)


def _audited(writer: Writer, pair: KeyPairFiles, note: str) -> Pushed:
    amd64 = _image(writer, "amd64", note)
    sign_onto(parse_reference(amd64.reference), pair, audit_predicate())
    return amd64


@pytest.mark.parametrize(
    ("how", "entry"),
    [
        ("annotated", lambda arm64: arm64.entry("linux/arm64", ANNOTATED)),
        ("without a platform", lambda arm64: arm64.entry()),
    ],
)
def test_an_entry_a_runtime_could_run_is_judged_however_it_is_listed(
    registry: RunningRegistry, pair: KeyPairFiles, how: str, entry: object
) -> None:
    """The arm64 image was never audited: hidden by an annotation or listed without a
    platform (a node reads its config), it is still an image of the index, and the index is
    refused naming it; an unknown/unknown entry beside it is an attestation, not judged."""
    with Writer(registry.host) as writer:
        amd64 = _audited(writer, pair, how.replace(" ", "-"))
        arm64 = _image(writer, "arm64", how.replace(" ", "-"))
        attestation = _image(writer, "amd64", f"att-{how}".replace(" ", "-"))
        index = writer.raw_index(
            REPO,
            how.replace(" ", "-"),
            [
                amd64.entry("linux/amd64"),
                entry(arm64),  # type: ignore[operator]
                attestation.entry("unknown/unknown", ANNOTATED),
            ],
        )
    code, document = verify(index, "--key", str(pair.public))
    assert code == 1, document
    assert document["platforms"] == ["linux/amd64", "linux/arm64"]
    refused = failing(document)
    assert list(refused) == ["linux/arm64: audit status in {CPU_PASS, CPU_PASS_GPU_CLI_DEFERRED}"]
    assert "no audit attestation" in refused[next(iter(refused))]
    # audited too, the index holds: the attestation entry was never asked for one
    sign_onto(parse_reference(arm64.reference), pair, audit_predicate(platform="linux/arm64"))
    code, document = verify(index, "--key", str(pair.public))
    assert code == 0, document


def test_platforms_are_normalised_as_containerd_normalises_them(
    registry: RunningRegistry, pair: KeyPairFiles, tmp_path: Path
) -> None:
    """A policy for linux/amd64 holds an x86_64 entry too (a node of amd64 would run it),
    and a policy's linux/arm64 is the image's linux/arm64/v8."""
    with Writer(registry.host) as writer:
        amd64 = _audited(writer, pair, "normal")
        other = _image(writer, "amd64", "x86")
        arm64 = _image(writer, "arm64", "v8", variant="v8")
        index = writer.raw_index(
            REPO,
            "normalised",
            [
                amd64.entry("linux/amd64"),
                other.entry("linux/x86_64"),
                arm64.entry("linux/arm64/v8"),
            ],
        )
    policy = tmp_path / "amd64.yaml"
    policy.write_text("version: 1\naudit:\n  platform: linux/amd64\n")
    code, document = verify(index, "--key", str(pair.public), "--policy", str(policy))
    assert code == 1, document
    assert document["platforms"] == ["linux/amd64", "linux/x86_64"]
    assert list(failing(document)) == [
        "linux/x86_64: audit status in {CPU_PASS, CPU_PASS_GPU_CLI_DEFERRED} on linux/amd64"
    ]
    # an arm64 policy: the arm64/v8 image, audited as linux/arm64/v8, holds
    sign_onto(parse_reference(arm64.reference), pair, audit_predicate(platform="linux/arm64/v8"))
    policy.write_text("version: 1\naudit:\n  platform: linux/arm64\n")
    code, document = verify(index, "--key", str(pair.public), "--policy", str(policy))
    assert code == 0, document
    assert document["platforms"] == ["linux/arm64/v8"]


@pytest.fixture
def json_proxy(registry: RunningRegistry) -> Iterator[FaultProxy]:
    """A proxy in front of the registry that serves every manifest (HEAD and GET) as
    ``Content-Type: application/json``, as some proxies do."""
    with FaultProxy(registry.host) as proxy:
        proxy.set_faults(
            Fault(
                "replace_header",
                path=r"/manifests/",
                method="*",
                times=-1,
                headers={"Content-Type": "application/json"},
            )
        )
        yield proxy


def test_an_index_served_as_application_json_is_still_an_index(
    registry: RunningRegistry, pair: KeyPairFiles, json_proxy: FaultProxy
) -> None:
    """An audit of the amd64 image that names the index among its subjects (as `imagekit
    audit IDX --platform linux/amd64` signs it) must not pass the index because a proxy
    made the index look like one image: its bytes say it is an index."""
    with Writer(registry.host) as writer:
        amd64 = _image(writer, "amd64", "proxied")
        arm64 = _image(writer, "arm64", "proxied")
        index = parse_reference(
            writer.raw_index(
                REPO, "proxied", [amd64.entry("linux/amd64"), arm64.entry("linux/arm64")]
            )
        )
    assert index.digest is not None
    sign_onto(parse_reference(amd64.reference), pair, audit_predicate(), subjects=[index.digest])
    proxied = f"{json_proxy.host}/{REPO}@{index.digest}"
    code, document = verify(proxied, "--key", str(pair.public))
    assert json_proxy.fired("replace_header") > 0
    assert code == 1, document
    assert document["platforms"] == ["linux/amd64", "linux/arm64"]
    assert list(failing(document)) == [
        "linux/arm64: audit status in {CPU_PASS, CPU_PASS_GPU_CLI_DEFERRED}"
    ]


def test_an_index_of_an_index_or_of_an_image_it_cannot_tell_is_refused_naming_the_entry(
    registry: RunningRegistry, pair: KeyPairFiles
) -> None:
    """A nested index and an entry whose config names no platform are entries a runtime may
    walk into or match: not judged, so the index is refused, each named."""
    with Writer(registry.host) as writer:
        amd64 = _audited(writer, pair, "nested")
        inner = parse_reference(
            writer.raw_index(REPO, "inner", [_image(writer, "arm64", "inner").entry("linux/arm64")])
        )
        blank = writer.image(
            REPO, "blank", [Blob.gzip([M("x", data=b"x")])], config={"os": "", "architecture": ""}
        )
        assert inner.digest is not None
        size = len(writer.get_manifest(REPO, "inner").content)
        nested = {"mediaType": OCI_INDEX, "digest": str(inner.digest), "size": size,
                  "platform": {"os": "linux", "architecture": "arm64"}}  # fmt: skip
        index = writer.raw_index(REPO, "outer", [amd64.entry("linux/amd64"), nested, blank.entry()])
    code, document = verify(index, "--key", str(pair.public))
    assert code == 1, document
    refused = failing(document)
    assert refused == {
        f"{inner.digest}: an image to hold": "an index nested in the index: not judged",
        f"{blank.digest}: an image to hold": "lists no platform and its config names none: "
        "not judged",
    }
