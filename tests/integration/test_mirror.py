"""The verdict table on real mirrors made by skopeo (a real peer tool) in real registries.

Each DST lives in a registry of its own: skopeo's blob-info cache would otherwise reuse SRC's
blobs in the same registry instead of recompressing, and the copy would be identical.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import zstandard

from imagekit.errors import ReferenceNotFound
from imagekit.kinds.mirror import MirrorVerdict as Verdict
from imagekit.layers.media import Compression, MediaTypePolicy
from imagekit.ledger import read_records
from imagekit.mirror import MirrorOptions, MirrorReport, mirror
from imagekit.refs import parse_platform, parse_reference
from imagekit.registry import RegistryClient
from imagekit.registry.upload import copy_image
from imagekit.runtime.engine import Engine
from imagekit.workspace import Workspace
from tests.support.base_image import BaseImage
from tests.support.faultproxy import Fault, FaultProxy
from tests.support.images import Blob, M, Pushed, Writer
from tests.support.media_types import OCI_GZIP, OCI_TAR, sha256
from tests.support.oci_layout import (
    Layer,
    LayoutWriter,
    config_for,
    make_tar,
    push_dir,
    push_layout,
    skopeo_copy,
)
from tests.support.registries import MakeRegistry, RunningRegistry

pytestmark = pytest.mark.integration
CONTENT_IDENTICAL = "same config, same {n} diffIDs, compressed blobs differ"
# Fields Docker writes and an OCI conversion drops (skopeo --dest-compress-format zstd)
DOCKER_FIELDS = {
    "container": "0123456789ab",
    "docker_version": "20.10.24",
    "container_config": {"Hostname": "0123456789ab", "Cmd": ["/bin/sh"]},
}


def _verify(src: str, dst: str, workspace: Workspace, **options: object) -> MirrorReport:
    return mirror(src, dst, options=MirrorOptions(**options), workspace=workspace)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def source(registry: RunningRegistry, tmp_path_factory: pytest.TempPathFactory) -> str:
    """SRC: three gzip layers, docker v2s2 format, a config with Docker's own fields."""
    tmp = tmp_path_factory.mktemp("mirror-src")
    layers = [Layer.gzip(make_tar(10 + i)) for i in range(3)]
    writer = LayoutWriter(tmp)
    writer.index([writer.image(layers, config_for(layers, extra=DOCKER_FIELDS))])
    ref = f"{registry.host}/imagekit-test/mirror-src:1"
    push_layout(tmp, ref, "--format", "v2s2")
    return ref


def test_same_manifest_is_identical_and_recorded(
    source: str, make_registry: MakeRegistry, workspace: Workspace
) -> None:
    dst = f"{make_registry().host}/copy/same:1"
    skopeo_copy(f"docker://{source}", f"docker://{dst}", "--preserve-digests")
    report = _verify(source, dst, workspace)
    assert report.verdict is Verdict.IDENTICAL and report.exit_code == 0
    assert all(layer.match and layer.actual_diff_id for layer in report.layers)
    assert report.evidence is not None
    saved = json.loads(report.evidence.read_text())
    assert saved["verdict"] == "identical"
    assert report.evidence.is_relative_to(workspace.evidence_dir / "mirror")
    records = read_records(workspace.ledger_path)
    assert records[-1].kind == "mirror-verify" and records[-1].status == "identical"


def test_gzip_recompressed_docker_format_is_content_identical(
    source: str, make_registry: MakeRegistry, workspace: Workspace, tmp_path: Path
) -> None:
    skopeo_copy(f"docker://{source}", f"dir:{tmp_path / 'plain'}", "--dest-decompress")
    dst = f"{make_registry().host}/copy/gzip9:1"
    skopeo_copy(
        f"dir:{tmp_path / 'plain'}",
        f"docker://{dst}",
        "--dest-compress",
        "--dest-compress-level",
        "9",
    )
    report = _verify(source, dst, workspace)
    assert report.verdict is Verdict.CONTENT_IDENTICAL, report.message
    assert report.message == CONTENT_IDENTICAL.format(n=3)
    assert report.config_digest_equal and not report.compressed_digests_equal
    assert report.destination is not None
    assert report.destination["manifest_media_type"].startswith("application/vnd.docker")
    for layer in report.layers:
        assert layer.source_digest != layer.destination_digest
        assert layer.actual_diff_id == layer.expected_diff_id
    assert report.exit_code == 0


def test_zstd_oci_conversion_is_config_differs_naming_fields(
    source: str, make_registry: MakeRegistry, workspace: Workspace
) -> None:
    dst = f"{make_registry().host}/copy/zstd:1"
    skopeo_copy(f"docker://{source}", f"docker://{dst}", "--dest-compress-format", "zstd")
    report = _verify(source, dst, workspace)
    assert report.verdict is Verdict.CONFIG_DIFFERS, report.message
    assert report.exit_code == 1
    assert all(layer.match and layer.compression == Compression.ZSTD for layer in report.layers)
    dropped = [d for d in report.config_differences if d.endswith("(only in SRC)")]
    assert any(d.startswith("container_config") for d in dropped), report.config_differences
    assert "container_config" in report.message
    assert any("before 23.0" in note for note in report.notes)
    allowed = _verify(source, dst, workspace, allow_config_differences=True)
    assert allowed.verdict is Verdict.CONFIG_DIFFERS and allowed.exit_code == 0


def test_uncompressed_layer_copy_is_content_identical(
    source: str, registry: RunningRegistry, workspace: Workspace, tmp_path: Path
) -> None:
    skopeo_copy(f"docker://{source}", f"dir:{tmp_path / 'plain'}", "--dest-decompress")
    dst = f"{registry.host}/imagekit-test/copy-plain:1"
    push_dir(tmp_path / "plain", dst)
    report = _verify(source, dst, workspace)
    assert report.verdict is Verdict.CONTENT_IDENTICAL, report.message
    assert {layer.compression for layer in report.layers} == {Compression.NONE}
    assert {layer.destination_media_type for layer in report.layers} == {
        "application/vnd.docker.image.rootfs.diff.tar"
    }


def test_replaced_layer_with_self_consistent_config_is_mismatch_naming_it(
    registry: RunningRegistry, make_registry: MakeRegistry, workspace: Workspace, tmp_path: Path
) -> None:
    layers = [Layer.gzip(make_tar(20 + i)) for i in range(3)]
    writer = LayoutWriter(tmp_path / "src")
    writer.index([writer.image(layers)])
    src = f"{registry.host}/imagekit-test/mirror-replace:1"
    push_layout(tmp_path / "src", src)
    # DST: layer 1 replaced, the config's diff_ids and the manifest re-made to match it
    forged = [layers[0], Layer.gzip(make_tar(99)), layers[2]]
    writer = LayoutWriter(tmp_path / "dst")
    writer.index([writer.image(forged)])
    dst = f"{make_registry().host}/copy/replaced:1"
    push_layout(tmp_path / "dst", dst)
    report = _verify(src, dst, workspace)
    assert report.verdict is Verdict.MISMATCH and report.exit_code == 1
    assert [layer.match for layer in report.layers] == [True, False, True]
    bad = report.layers[1]
    assert bad.expected_diff_id == layers[1].diff_id
    assert bad.actual_diff_id == forged[1].diff_id == bad.destination_config_diff_id
    assert f"layer 1 ({bad.destination_digest})" in report.message
    assert layers[1].diff_id in report.message and forged[1].diff_id in report.message


def test_layer_count_differs_is_mismatch(
    registry: RunningRegistry, workspace: Workspace, tmp_path: Path
) -> None:
    layers = [Layer.gzip(make_tar(30 + i)) for i in range(3)]
    writer = LayoutWriter(tmp_path)
    writer.index([writer.image(layers)])
    push_layout(tmp_path, f"{registry.host}/imagekit-test/count-src:1")
    writer.index([writer.image(layers[:2])])
    push_layout(tmp_path, f"{registry.host}/imagekit-test/count-dst:1")
    report = _verify(
        f"{registry.host}/imagekit-test/count-src:1",
        f"{registry.host}/imagekit-test/count-dst:1",
        workspace,
    )
    assert report.verdict is Verdict.MISMATCH
    assert "layer counts differ: SRC has 3, DST has 2; layer 2" in report.message
    assert layers[2].diff_id in report.message


def test_index_with_two_platforms_and_attestation_compares_only_the_platform(
    registry: RunningRegistry, make_registry: MakeRegistry, workspace: Workspace, tmp_path: Path
) -> None:
    amd = [Layer.gzip(make_tar(40 + i)) for i in range(2)]
    arm = [Layer.gzip(make_tar(50 + i)) for i in range(3)]
    writer = LayoutWriter(tmp_path)
    amd_desc = writer.image(amd, config_for(amd, arch="amd64"))
    arm_desc = writer.image(arm, config_for(arm, arch="arm64"))
    entries = [
        {**amd_desc, "platform": {"os": "linux", "architecture": "amd64"}},
        {**arm_desc, "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}},
        writer.attestation(amd_desc),
    ]
    writer.index(entries)
    src = f"{registry.host}/imagekit-test/multi:1"
    push_layout(tmp_path, src, "--all")
    dst = f"{make_registry().host}/copy/multi:1"
    skopeo_copy(f"docker://{src}", f"docker://{dst}", "--all", "--dest-compress-format", "zstd")
    report = _verify(src, dst, workspace, platform=parse_platform("linux/arm64"))
    assert report.destination is not None and report.destination["platform"] == "linux/arm64/v8"
    assert report.destination["index_digest"] is not None
    assert len(report.layers) == 3
    assert [layer.expected_diff_id for layer in report.layers] == [x.diff_id for x in arm]
    assert all(layer.match for layer in report.layers)
    # zstd recompression rewrote the index and the manifests: diffIDs carry the proof
    assert report.verdict in (Verdict.CONTENT_IDENTICAL, Verdict.CONFIG_DIFFERS)
    # Without --platform every platform of the index is verified, never the attestation.
    default = _verify(src, dst, workspace)
    assert [p.destination["platform"] for p in default.platforms if p.destination] == [
        "linux/amd64",
        "linux/arm64/v8",
    ]
    assert [layer.expected_diff_id for layer in default.platforms[0].layers] == [
        x.diff_id for x in amd
    ]
    assert [layer.expected_diff_id for layer in default.layers] == [x.diff_id for x in amd + arm]
    assert all(layer.match for layer in default.layers)
    assert default.verdict in (Verdict.CONTENT_IDENTICAL, Verdict.CONFIG_DIFFERS)
    index = default.destination["index_digest"] if default.destination else None
    record = read_records(workspace.ledger_path)[-1]
    assert record.images["destination"] == f"{dst.split(':1')[0]}@{index}"
    assert "each platform of the index" in record.scope and "linux/arm64/v8" in record.scope


def test_an_index_whose_second_platform_differs_is_a_mismatch(
    registry: RunningRegistry, make_registry: MakeRegistry, workspace: Workspace, tmp_path: Path
) -> None:
    # DST holds the same amd64 image but another arm64 one: checking the default platform
    # alone would call the copy identical in content.
    amd = [Layer.gzip(make_tar(60 + i)) for i in range(2)]
    arm = [Layer.gzip(make_tar(70 + i)) for i in range(2)]
    other = [arm[0], Layer.gzip(make_tar(79))]
    refs = []
    for name, arm_layers, host in (
        ("src", arm, registry.host),
        ("dst", other, make_registry().host),
    ):
        folder = tmp_path / name
        writer = LayoutWriter(folder)
        writer.index(
            [
                {
                    **writer.image(amd, config_for(amd, arch="amd64")),
                    "platform": {"os": "linux", "architecture": "amd64"},
                },
                {
                    **writer.image(arm_layers, config_for(arm_layers, arch="arm64")),
                    "platform": {"os": "linux", "architecture": "arm64"},
                },
            ]
        )
        refs.append(f"{host}/imagekit-test/index-{name}:1")
        push_layout(folder, refs[-1], "--all")
    report = _verify(refs[0], refs[1], workspace)
    assert report.verdict is Verdict.MISMATCH and report.exit_code == 1
    assert [p.verdict for p in report.platforms] == [Verdict.IDENTICAL, Verdict.MISMATCH]
    assert "linux/arm64: layer 1" in report.message
    assert arm[1].diff_id in report.message
    narrowed = _verify(refs[0], refs[1], workspace, platform=parse_platform("linux/amd64"))
    assert narrowed.verdict is Verdict.IDENTICAL and not narrowed.platforms


def test_media_type_gzip_but_bytes_zstd_is_detected_and_policy_applies(
    registry: RunningRegistry, workspace: Workspace, tmp_path: Path
) -> None:
    tars = [make_tar(60), make_tar(61)]
    src_layers = [Layer.gzip(t) for t in tars]
    writer = LayoutWriter(tmp_path / "src")
    writer.index([writer.image(src_layers)])
    src = f"{registry.host}/imagekit-test/liar-src:1"
    push_layout(tmp_path / "src", src)
    lying = [src_layers[0], Layer(tars[1], zstandard.ZstdCompressor().compress(tars[1]), OCI_GZIP)]
    writer = LayoutWriter(tmp_path / "dst")
    writer.index([writer.image(lying)])
    dst = f"{registry.host}/imagekit-test/liar-dst:1"
    push_layout(tmp_path / "dst", dst)
    report = _verify(src, dst, workspace)
    assert report.verdict is Verdict.CONTENT_IDENTICAL, report.message
    assert report.layers[1].compression == Compression.ZSTD
    assert "says gzip but the bytes are zstd" in report.layers[1].notes[0]
    strict = _verify(src, dst, workspace, policy=MediaTypePolicy.STRICT)
    # The registry served the layer; under the strict policy its bytes are wrong for its
    # media type: a check said no (1, the layer named), not "could not finish" (3).
    assert strict.verdict is Verdict.MISMATCH and strict.exit_code == 1, strict.message
    assert "says gzip but the bytes are zstd" in strict.message


def test_multi_member_gzip_layer_matches_the_engine(
    engine: Engine, registry: RunningRegistry, workspace: Workspace, tmp_path: Path
) -> None:
    """The engine pulls it (it checks diffIDs) and reports the same diffID we compute."""
    tar = make_tar(70, files=6)
    blob = gzip.compress(tar[:300_000], mtime=0) + gzip.compress(tar[300_000:], mtime=0)
    plain = make_tar(71)
    layers = [Layer(tar, blob, OCI_GZIP), Layer(plain, plain, OCI_TAR)]
    writer = LayoutWriter(tmp_path)
    writer.index([writer.image(layers)])
    ref = f"{registry.host}/imagekit-test/multimember:1"
    push_layout(tmp_path, ref, "--format", "v2s2")
    report = _verify(ref, ref, workspace)
    assert report.verdict is Verdict.IDENTICAL, report.message
    assert report.layers[0].actual_diff_id == sha256(tar)
    try:
        engine.client.pull(ref, quiet=True)
        inspected = engine.client.image.inspect(ref)
        assert [str(d) for d in inspected.root_fs.layers or []] == [
            layer.actual_diff_id for layer in report.layers
        ]
    finally:
        subprocess.run([engine.client_path, "rmi", "-f", ref], capture_output=True, check=False)


def test_copy_mounts_within_a_registry_and_uploads_across(
    source: str,
    registry: RunningRegistry,
    make_registry: MakeRegistry,
    workspace: Workspace,
) -> None:
    within = f"{registry.host}/imagekit-test/copied:1"
    report = mirror(source, within, options=MirrorOptions(copy=True), workspace=workspace)
    assert report.verdict is Verdict.IDENTICAL, report.message
    assert report.copy is not None and report.copy["blobs_mounted"] == 4  # config + 3 layers
    assert report.copy["bytes_uploaded"] == 0

    other = f"{make_registry().host}/copy/uploaded:1"
    with RegistryClient() as client:
        result = copy_image(
            client, parse_reference(source), parse_reference(other), chunk_size=64 * 1024
        )
    assert result.blobs_uploaded == 4 and result.manifests == 1
    assert _verify(source, other, workspace).verdict is Verdict.IDENTICAL


def test_copy_of_an_index_keeps_every_digest_and_resumes_dropped_chunks(
    registry: RunningRegistry, make_registry: MakeRegistry, workspace: Workspace, tmp_path: Path
) -> None:
    amd = [Layer.gzip(make_tar(80 + i, size=400_000)) for i in range(2)]
    arm = [Layer.gzip(make_tar(90 + i)) for i in range(2)]
    writer = LayoutWriter(tmp_path)
    amd_desc = writer.image(amd, config_for(amd, arch="amd64"))
    entries = [
        {**amd_desc, "platform": {"os": "linux", "architecture": "amd64"}},
        {
            **writer.image(arm, config_for(arm, arch="arm64")),
            "platform": {"os": "linux", "architecture": "arm64"},
        },
        writer.attestation(amd_desc),
    ]
    writer.index(entries)
    src = f"{registry.host}/imagekit-test/index-copy:1"
    push_layout(tmp_path, src, "--all")
    target = make_registry()
    proxy = FaultProxy(target.host).start()
    try:
        # The registry takes the chunk, then the answer never comes back.
        proxy.set_faults(Fault("reset", method="PATCH", path=r"/blobs/uploads/", times=2))
        dst = parse_reference(f"{proxy.host}/copy/index:1")
        with RegistryClient() as client:
            result = copy_image(client, parse_reference(src), dst, chunk_size=128 * 1024)
            assert proxy.fired("reset") == 2
            copied = client.get_manifest(dst, "1")
            original = client.get_manifest(parse_reference(src), "1")
    finally:
        proxy.stop()
    assert copied == original  # same bytes, media type and digest
    assert result.manifests == 4  # the index, two images and the attestation
    # the real registry refuses a session whose answer was lost: the blob starts over
    assert result.chunk_resumes + result.upload_restarts >= 1
    report = _verify(src, f"{target.host}/copy/index:1", workspace)
    assert report.verdict is Verdict.IDENTICAL, report.message
    assert report.source is not None and report.source["index_digest"] == str(result.digest)


def test_base_image_zstd_and_gzip_level_mirrors(
    base_image: BaseImage, make_registry: MakeRegistry, workspace: Workspace, tmp_path: Path
) -> None:
    """The real base image (an engine-made config, ~750 MB): both skopeo conversions."""
    target = make_registry()
    zstd_dst = f"{target.host}/copy/base-zstd:1"
    skopeo_copy(f"docker://{base_image.reference}", f"docker://{zstd_dst}",
                "--dest-compress-format", "zstd")  # fmt: skip
    report = _verify(base_image.reference, zstd_dst, workspace)
    assert report.verdict is Verdict.CONFIG_DIFFERS, report.message
    assert report.config_differences and all(layer.match for layer in report.layers)
    assert report.config_differences[0] in report.message
    subprocess.run(["rm", "-rf", str(target.storage)], check=False)

    plain = tmp_path / "plain"
    skopeo_copy(f"docker://{base_image.reference}", f"dir:{plain}", "--dest-decompress")
    gz_dst = f"{make_registry().host}/copy/base-gzip1:1"
    skopeo_copy(f"dir:{plain}", f"docker://{gz_dst}", "--dest-compress",
                "--dest-compress-level", "1")  # fmt: skip
    subprocess.run(["rm", "-rf", str(plain)], check=False)
    report = _verify(base_image.reference, gz_dst, workspace)
    assert report.verdict is Verdict.CONTENT_IDENTICAL, report.message
    assert report.message == CONTENT_IDENTICAL.format(n=len(report.layers))


def test_cli_json_prints_one_document_and_the_evidence_path(
    source: str, make_registry: MakeRegistry, workspace: Workspace, tmp_path: Path
) -> None:
    skopeo_copy(f"docker://{source}", f"dir:{tmp_path / 'plain'}", "--dest-decompress")
    dst = f"{make_registry().host}/copy/cli:1"
    skopeo_copy(f"dir:{tmp_path / 'plain'}", f"docker://{dst}", "--dest-compress",
                "--dest-compress-level", "1")  # fmt: skip
    imagekit = str(Path(sys.executable).parent / "imagekit")
    argv = [imagekit, "mirror", source, dst, "--verify-diffids", "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)  # exactly one JSON document, nothing else
    assert document["verdict"] == "content-identical"
    assert document["message"] == CONTENT_IDENTICAL.format(n=3)
    assert f"evidence: {document['evidence']}" in done.stderr
    assert Path(document["evidence"]).is_relative_to(workspace.evidence_dir)
    human = subprocess.run(argv[:-1], capture_output=True, text=True, timeout=300, check=False)
    assert human.returncode == 0
    assert "content-identical: same config, same 3 diffIDs, compressed blobs differ" in human.stdout


def test_copy_with_token_auth_mounts_with_a_pull_scope_on_the_source(
    token_registry: RunningRegistry, docker_config: Path, workspace: Workspace, tmp_path: Path
) -> None:
    """A cross-repository mount needs push on DST and pull on SRC in one bearer token."""
    (docker_config / "config.json").write_text(
        json.dumps({"auths": token_registry.docker_auth_entry()})
    )
    layers = [Layer.gzip(make_tar(110 + i)) for i in range(2)]
    writer = LayoutWriter(tmp_path)
    writer.index([writer.image(layers)])
    src = f"{token_registry.host}/team-a/app:1"
    creds = f"{token_registry.username}:{token_registry.password}"
    push_layout(tmp_path, src, "--dest-creds", creds)
    dst = f"{token_registry.host}/team-b/app:1"
    options = MirrorOptions(copy=True, docker_config=docker_config)
    report = mirror(src, dst, options=options, workspace=workspace)
    assert report.verdict is Verdict.IDENTICAL, report.message
    assert report.copy is not None and report.copy["blobs_mounted"] == 3
    assert report.copy["bytes_uploaded"] == 0
    assert token_registry.password not in report.evidence.read_text()  # type: ignore[union-attr]


@pytest.mark.parametrize("missing", ["SRC", "DST"])
def test_a_side_that_names_nothing_is_bad_input_naming_it(
    missing: str, source: str, registry: RunningRegistry, workspace: Workspace
) -> None:
    # SRC and DST are resolved at the same time; the error must still say which one it was.
    # A reference the registry answers 404 for is the input's mistake: exit 2, no record.
    absent = f"{registry.host}/imagekit-test/never-pushed:1"
    src, dst = (absent, source) if missing == "SRC" else (source, absent)
    with pytest.raises(ReferenceNotFound) as caught:
        _verify(src, dst, workspace)
    assert caught.value.exit_code == 2
    assert caught.value.message.startswith(
        f"resolving {missing}: {absent}: the reference names nothing here (HTTP 404"
    )
    assert not workspace.ledger_path.exists()


def test_a_verdict_onto_a_ledger_that_does_not_verify_is_kept_and_not_recorded(
    source: str, make_registry: MakeRegistry, workspace: Workspace
) -> None:
    """The mirror's own verdict and evidence survive a refused record; the refusal is said."""
    dst = f"{make_registry().host}/copy/torn-ledger:1"
    skopeo_copy(f"docker://{source}", f"docker://{dst}", "--preserve-digests")
    _verify(source, dst, workspace)  # one good record first
    torn = b'{"details":{},"evidence":nu'
    with workspace.ledger_path.open("ab") as fh:
        fh.write(torn)
    before = workspace.ledger_path.read_bytes()
    imagekit = str(Path(sys.executable).parent / "imagekit")
    done = subprocess.run(
        [imagekit, "mirror", "--verify-diffids", source, dst, "--json"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    document = json.loads(done.stdout)
    assert document["verdict"] == "identical"
    assert Path(document["evidence"]).is_file()
    assert json.loads(Path(document["evidence"]).read_text())["verdict"] == "identical"
    refused = document["ledger_refused"]
    assert refused["recorded"] is False and "torn line" in refused["message"]
    assert "imagekit ledger repair" in refused["hint"]
    assert "torn line" in done.stderr and "imagekit ledger repair" in done.stderr
    assert workspace.ledger_path.read_bytes() == before
    human = subprocess.run(
        [imagekit, "mirror", source, dst], capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip
    assert human.returncode == 1
    assert "identical: same manifest" in human.stdout and "torn line" in human.stderr


@pytest.mark.parametrize("listed", ["annotated", "without a platform"])
def test_two_indexes_whose_hidden_arm64_entries_differ_are_not_identical(
    registry: RunningRegistry, workspace: Workspace, listed: str
) -> None:
    """The amd64 entries are the same image, the arm64 ones are not: hidden from the
    comparison by an annotation or by listing no platform, an arm64 node would still run
    them, so every runtime-selectable entry is compared; an entry only one side has, and
    the attestation manifests left out, are named."""
    repo = f"imagekit-test/hidden-{listed.replace(' ', '-')}"
    with Writer(registry.host) as writer:
        amd64 = writer.image(repo, "amd64", [Blob.gzip([M("a.txt", data=b"same")])])
        arm64 = {
            side: writer.image(
                repo, f"arm64-{side}", [Blob.gzip([M("b.txt", data=side.encode())])], arch="arm64"
            )
            for side in ("src", "dst")
        }
        extra = writer.image(repo, "riscv", [Blob.gzip([M("c.txt", data=b"c")])], arch="riscv64")
        attestation = {"vnd.docker.reference.type": "attestation-manifest"}

        def listing(image: Pushed) -> dict[str, Any]:
            return (
                image.entry("linux/arm64", attestation) if listed == "annotated" else image.entry()
            )

        src = writer.raw_index(repo, "src", [amd64.entry("linux/amd64"), listing(arm64["src"])])
        dst = writer.raw_index(
            repo,
            "dst",
            [amd64.entry("linux/amd64"), listing(arm64["dst"]), extra.entry("linux/riscv64"),
             amd64.entry("unknown/unknown", attestation)],
        )  # fmt: skip
    report = _verify(src, dst, workspace)
    assert report.verdict is Verdict.MISMATCH, report.message
    assert [p.verdict for p in report.platforms] == [
        Verdict.IDENTICAL,
        Verdict.MISMATCH,
        Verdict.MISMATCH,
    ]
    assert "linux/arm64: layer 0" in report.message
    assert f"linux/riscv64: only in DST: linux/riscv64 {extra.digest}" in report.message
    assert "DST's index lists 1 attestation manifest(s) (unknown/unknown), not compared" in (
        report.notes
    )
