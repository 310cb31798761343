"""The audit container's lockdown, as the options handed to the engine."""

from __future__ import annotations

from pathlib import Path

from imagekit.audit.runner import PROBE_IN_CONTAINER, Limits, container_argv
from imagekit.refs import parse_reference
from imagekit.runtime.images import EngineImage


def test_container_is_locked_down() -> None:
    argv = container_argv(
        "/usr/bin/docker",
        Limits(cpus=1.5, memory="2g"),
        Path("/somewhere/probe.py"),
        "sha256:" + "b" * 64,
        "imagekit-audit-0123",
        "{}",
    )
    assert argv[:2] == ["/usr/bin/docker", "run"]

    def value(flag: str) -> list[str]:
        return [argv[i + 1] for i, item in enumerate(argv) if item == flag]

    assert "--rm" in argv and "--read-only" in argv
    assert value("--name") == ["imagekit-audit-0123"]  # named, so imagekit can remove it
    assert value("--network") == ["none"]
    assert value("--cap-drop") == ["ALL"]
    assert value("--security-opt") == ["no-new-privileges"]
    assert value("--entrypoint") == ["python3"]
    assert (value("--cpus"), value("--memory")) == (["1.5"], ["2g"])
    envs = dict(e.split("=", 1) for e in value("-e"))
    assert envs["CUDA_VISIBLE_DEVICES"] == ""
    assert envs["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert envs["HF_HUB_OFFLINE"] == envs["TRANSFORMERS_OFFLINE"] == "1"
    assert [t.split(":")[0] for t in value("--tmpfs")] == ["/tmp", envs["HOME"]]
    assert value("-v") == [f"/somewhere/probe.py:{PROBE_IN_CONTAINER}:ro"]
    assert value("--pull") == ["never"]
    assert "--gpus" not in argv and "--device" not in argv and "--privileged" not in argv
    assert argv[-4:] == ["sha256:" + "b" * 64, PROBE_IN_CONTAINER, "--spec-json", "{}"]


def test_evidence_names_prefer_the_pinned_digest() -> None:
    digest = "sha256:" + "a" * 64
    pinned = EngineImage(
        requested=f"127.0.0.1:5000/x/y@{digest}",
        image_id="sha256:" + "b" * 64,
        repo_tags=(),
        repo_digests=(f"127.0.0.1:5000/x/y@sha256:{'c' * 64}",),
        reference=parse_reference(f"127.0.0.1:5000/x/y@{digest}"),
        pulled=True,
    )
    assert pinned.manifest_digest == digest
    assert pinned.name == "127.0.0.1:5000/x/y"
    local = EngineImage(
        requested="sha256:" + "b" * 64,
        image_id="sha256:" + "b" * 64,
        repo_tags=("team/app:1",),
        repo_digests=(),
        reference=None,
        pulled=False,
    )
    assert local.manifest_digest is None
    assert local.name == "team/app"
