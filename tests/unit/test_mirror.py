"""Verdict logic, config differences and the CLI contract, against an in-memory registry.

The in-memory registry (httpx.MockTransport) serves exact bytes; the real-registry cases,
including every verdict on skopeo mirrors, are in tests/integration/test_mirror.py.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from imagekit.kinds.mirror import MirrorVerdict as Verdict
from imagekit.mirror import MirrorOptions, config_differences, mirror
from imagekit.registry import RegistryClient
from imagekit.workspace import Workspace
from tests.support.oci_layout import config_for, make_tar
from tests.unit.registry.fakes import StreamingMock

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
GZ = "application/vnd.docker.image.rootfs.diff.tar.gzip"


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Memory:
    """Repositories of blobs and tagged manifests behind a MockTransport."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.manifests: dict[tuple[str, str], bytes] = {}

    def push(
        self, repo: str, tars: list[bytes], *, level: int = 6, config: bytes | None = None
    ) -> None:
        blobs = [gzip.compress(t, compresslevel=level, mtime=0) for t in tars]
        config = (
            config
            or json.dumps(
                {
                    "architecture": "amd64",
                    "os": "linux",
                    "rootfs": {"type": "layers", "diff_ids": [sha(t) for t in tars]},
                }
            ).encode()
        )
        for blob in [config, *blobs]:
            self.blobs[sha(blob)] = blob
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": DOCKER_MANIFEST,
                "config": {
                    "mediaType": "application/vnd.docker.container.image.v1+json",
                    "digest": sha(config),
                    "size": len(config),
                },
                "layers": [{"mediaType": GZ, "digest": sha(b), "size": len(b)} for b in blobs],
            }
        ).encode()
        self.manifests[(repo, "1")] = manifest
        self.manifests[(repo, sha(manifest))] = manifest

    def handler(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/v2/":
            return httpx.Response(200, json={})
        _, _, rest = path.partition("/v2/")
        if "/manifests/" in rest:
            repo, _, ref = rest.partition("/manifests/")
            body = self.manifests.get((repo, ref))
            if body is None:
                return httpx.Response(404, json={"errors": [{"code": "MANIFEST_UNKNOWN"}]})
            headers = {"Content-Type": DOCKER_MANIFEST, "Docker-Content-Digest": sha(body)}
            return httpx.Response(200, content=body, headers=headers)
        repo, _, digest = rest.partition("/blobs/")
        blob = self.blobs.get(digest)
        if blob is None:
            return httpx.Response(404, json={"errors": [{"code": "BLOB_UNKNOWN"}]})
        return httpx.Response(200, content=blob)


TARS = [make_tar(1), make_tar(2)]


def _run(memory: Memory, tmp_path: Path, **options: Any) -> Any:
    client = RegistryClient(transport=StreamingMock(memory.handler))
    return mirror(
        "registry.example/src:1",
        "registry.example/dst:1",
        options=MirrorOptions(record=False, **options),
        workspace=Workspace.from_env(tmp_path),
        client=client,
    )


def test_recompressed_copy_is_content_identical_with_the_exact_message(tmp_path: Path) -> None:
    memory = Memory()
    memory.push("src", TARS, level=6)
    memory.push("dst", TARS, level=1)
    report = _run(memory, tmp_path)
    assert report.verdict is Verdict.CONTENT_IDENTICAL
    assert report.message == "same config, same 2 diffIDs, compressed blobs differ"
    assert report.exit_code == 0 and report.compressed_digests_equal is False
    saved = json.loads(Path(report.evidence).read_text())
    assert saved["verdict"] == "content-identical"
    assert [layer["match"] for layer in saved["layers"]] == [True, True]
    assert {"source", "destination", "config_digest_equal", "compressed_digests_equal"} <= set(
        saved
    )


def test_same_manifest_is_identical(tmp_path: Path) -> None:
    memory = Memory()
    memory.push("src", TARS)
    memory.push("dst", TARS)
    report = _run(memory, tmp_path)
    assert report.verdict is Verdict.IDENTICAL and report.exit_code == 0


def _dst_without_layer_1() -> tuple[Memory, str]:
    """A copy whose second layer's blob the registry no longer serves, and its digest."""
    memory = Memory()
    memory.push("src", TARS)
    memory.push("dst", TARS, level=1)
    dst_layer = json.loads(memory.manifests[("dst", "1")])["layers"][1]["digest"]
    del memory.blobs[dst_layer]
    return memory, str(dst_layer)


def test_missing_blob_is_error_never_positive(tmp_path: Path) -> None:
    memory, dst_layer = _dst_without_layer_1()
    report = _run(memory, tmp_path)
    assert report.verdict is Verdict.ERROR and report.exit_code == 3
    assert dst_layer in report.message and "layer 1" in report.message


def test_config_differs_names_fields(tmp_path: Path) -> None:
    memory = Memory()
    memory.push("src", TARS, config=config_for_tars(extra={"docker_version": "20.10"}))
    memory.push("dst", TARS, config=config_for_tars(extra={"author": "relay"}))
    report = _run(memory, tmp_path)
    assert report.verdict is Verdict.CONFIG_DIFFERS and report.exit_code == 1
    assert "author (only in DST)" in report.message
    assert "docker_version (only in SRC)" in report.message
    assert _run(memory, tmp_path, allow_config_differences=True).exit_code == 0


def config_for_tars(extra: dict[str, Any]) -> bytes:
    document = json.loads(config_for([], extra=extra))
    document["rootfs"]["diff_ids"] = [sha(t) for t in TARS]
    return json.dumps(document).encode()


def test_mismatch_and_layer_count(tmp_path: Path) -> None:
    memory = Memory()
    memory.push("src", TARS)
    memory.push("dst", [TARS[0], make_tar(3)])
    report = _run(memory, tmp_path)
    assert report.verdict is Verdict.MISMATCH and report.exit_code == 1
    assert f"expected diffID {sha(TARS[1])}, actual {sha(make_tar(3))}" in report.message
    memory.push("dst", TARS[:1])
    report = _run(memory, tmp_path)
    assert report.verdict is Verdict.MISMATCH
    assert "layer counts differ: SRC has 2, DST has 1; layer 1" in report.message


def test_a_copy_whose_manifest_and_config_disagree_on_the_layer_count_is_a_mismatch(
    tmp_path: Path,
) -> None:
    """DST answered; its manifest names two layers and its config one diffID: the copy is
    wrong (mismatch, exit 1, named), not a run that could not finish."""
    memory = Memory()
    memory.push("src", TARS)
    one = {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}}
    one["rootfs"]["diff_ids"] = [sha(TARS[0])]  # type: ignore[index]
    memory.push("dst", TARS, config=json.dumps(one).encode())
    report = _run(memory, tmp_path)
    assert report.verdict is Verdict.MISMATCH and report.exit_code == 1
    assert "resolving DST" in report.message
    assert "the manifest has 2 layers but the config lists 1 diff_ids" in report.message


def test_a_copy_whose_layer_does_not_decompress_is_a_mismatch_naming_it(tmp_path: Path) -> None:
    """DST's registry served a layer whose bytes hash to its digest but are a cut-off gzip
    stream: the copy's content is wrong (mismatch, exit 1, the layer named), not a run
    that could not finish (3)."""
    memory = Memory()
    memory.push("src", TARS)
    memory.push("dst", TARS)
    manifest = json.loads(memory.manifests[("dst", "1")])
    cut = memory.blobs[manifest["layers"][1]["digest"]][:-12]
    memory.blobs[sha(cut)] = cut
    manifest["layers"][1].update(digest=sha(cut), size=len(cut))
    body = json.dumps(manifest).encode()
    memory.manifests[("dst", "1")] = memory.manifests[("dst", sha(body))] = body
    report = _run(memory, tmp_path)
    assert report.verdict is Verdict.MISMATCH and report.exit_code == 1, report.message
    assert f"layer 1 ({sha(cut)}): " in report.message and "truncated gzip" in report.message
    assert report.layers[1].match is False and report.layers[1].error is None


def test_config_differences_paths() -> None:
    a = json.dumps({"config": {"Env": ["A=1"], "Cmd": ["x"]}, "created": "1", "x": 1}).encode()
    b = json.dumps({"config": {"Env": ["A=2"], "Cmd": ["x"]}, "created": "1", "y": 1}).encode()
    assert config_differences(a, b) == [
        "config.Env (changed)",
        "x (only in SRC)",
        "y (only in DST)",
    ]
    assert config_differences(a, a) == []


def test_cli_json_is_one_document_and_bad_reference_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from imagekit.cli import main

    monkeypatch.setenv("IMAGEKIT_ROOT", str(tmp_path))
    runner = CliRunner()
    result = runner.invoke(main, ["mirror", "NOT A REF", "x/y:1", "--verify-diffids", "--json"])
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"]["type"] == "ReferenceFormatError"
    # Verification is the default: without the flag the same command runs (and fails on the
    # same bad reference), instead of refusing a flag that carried no information.
    result = runner.invoke(main, ["mirror", "NOT A REF", "x/y:1", "--json"])
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"]["type"] == "ReferenceFormatError"


def test_foreign_layer_is_reported_not_skipped(tmp_path: Path) -> None:
    memory = Memory()
    memory.push("src", TARS)
    memory.push("dst", TARS, level=1)
    manifest = json.loads(memory.manifests[("dst", "1")])
    layer = manifest["layers"][0]
    layer["mediaType"] = "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"
    layer["urls"] = ["https://foreign.example/layer.tar.gz"]
    del memory.blobs[layer["digest"]]  # only at its URL, which is never followed
    memory.manifests[("dst", "1")] = json.dumps(manifest).encode()
    report = _run(memory, tmp_path)
    assert report.verdict is Verdict.ERROR
    assert "non-distributable (foreign) layer with 1 external URL(s), not followed" in (
        report.message
    )
    assert report.layers[0].error and report.layers[1].match


def test_an_error_says_so_on_stderr_and_its_scope_claims_only_what_was_hashed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from imagekit.cli.mirror_cmd import _human
    from imagekit.mirror import _scope

    memory, _ = _dst_without_layer_1()
    report = _run(memory, tmp_path)
    assert report.verdict is Verdict.ERROR
    scope = _scope(report, MirrorOptions())
    assert scope == (
        "1 of 2 DST layers streamed and hashed before it stopped; no verdict on the content"
    )
    assert "every layer" not in scope
    capsys.readouterr()
    _human(report)
    captured = capsys.readouterr()
    assert "error: could not verify layer 1" in captured.err
    assert "could not verify" not in captured.out


def test_a_verification_reports_each_layers_bytes_as_progress(tmp_path: Path) -> None:
    import io

    from imagekit import progress
    from imagekit.progress import PlainReporter

    memory = Memory()
    memory.push("src", TARS)
    memory.push("dst", TARS)
    stream = io.StringIO()
    with progress.installed(PlainReporter(stream)):
        report = _run(memory, tmp_path)
    assert report.verdict is Verdict.IDENTICAL
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("verifying registry.example/dst:1: 2 items, ")
    done = [line for line in lines if ": done " in line]
    assert len(done) == 2 and all("layer " in line for line in done)
    assert lines[-1].endswith("(100%)")
    assert report.message.endswith("all 2 layers verified")


def test_what_a_copy_carried_is_said_beside_the_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import dataclasses

    from imagekit.cli.mirror_cmd import _human

    memory = Memory()
    memory.push("src", TARS)
    memory.push("dst", TARS)
    carried = {"attestations": 2, "signatures": 1, "referrers": 0}
    report = dataclasses.replace(_run(memory, tmp_path), copy={"attachments": carried})
    _human(report)
    out = capsys.readouterr().out
    assert "copied with it: 2 attestations, 0 referrers, 1 signature\n" in out
