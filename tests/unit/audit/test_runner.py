"""The audit container's lockdown, as the options handed to the engine."""

from __future__ import annotations

from pathlib import Path

from imagekit.audit.runner import PROBE_IN_CONTAINER, EngineImage, Limits, container_options
from imagekit.refs import parse_reference


def test_container_is_locked_down() -> None:
    opts = container_options(Limits(cpus=1.5, memory="2g"), Path("/somewhere/probe.py"))
    assert opts["remove"] is True
    assert opts["networks"] == ["none"]
    assert opts["cap_drop"] == ["ALL"]
    assert opts["security_options"] == ["no-new-privileges"]
    assert opts["read_only"] is True
    assert opts["entrypoint"] == "python3"
    assert (opts["cpus"], opts["memory"]) == (1.5, "2g")
    assert opts["envs"]["CUDA_VISIBLE_DEVICES"] == ""
    assert opts["envs"]["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert opts["envs"]["HF_HUB_OFFLINE"] == opts["envs"]["TRANSFORMERS_OFFLINE"] == "1"
    assert [t.split(":")[0] for t in opts["tmpfs"]] == ["/tmp", opts["envs"]["HOME"]]
    assert opts["volumes"] == [("/somewhere/probe.py", PROBE_IN_CONTAINER, "ro")]
    assert "gpus" not in opts and "devices" not in opts


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
