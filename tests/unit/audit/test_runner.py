"""The audit container's lockdown, as the options handed to the engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.audit.report import decide
from imagekit.audit.runner import PROBE_IN_CONTAINER, Limits, container_argv, read_report
from imagekit.errors import CouldNotFinish
from imagekit.refs import parse_reference
from imagekit.runtime.container import ProcessRun
from imagekit.runtime.images import EngineImage
from imagekit.runtime.output import Kept


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


def _did_not_start(stderr: bytes, exit_code: int = 127) -> ProcessRun:
    def kept(stream: str, data: bytes) -> Kept:
        return Kept(stream=stream, total=len(data), files=(), cut=0, tail=data)

    return ProcessRun(
        command=("docker", "run", "IMAGE"),
        exit_code=exit_code,
        seconds=0.4,
        stdout=kept("stdout", b""),
        stderr=kept("stderr", stderr),
    )


# What Docker 28 prints for an image without python3 (its last line is the useless one).
NO_PYTHON = (
    b"docker: Error response from daemon: failed to create task for container: failed to "
    b"create shim task: OCI runtime create failed: runc create failed: unable to start "
    b'container process: error during container init: exec: "python3": executable file not '
    b"found in $PATH: unknown\n\nRun 'docker run --help' for more information\n"
)


def test_an_image_without_python3_is_a_verdict_naming_the_cause(tmp_path: Path) -> None:
    report, note = read_report(_did_not_start(NO_PYTHON), "r/plain@sha256:abc", tmp_path)
    verdict = decide(report)
    assert verdict.status == "CPU_CHECK_INCOMPLETE" and verdict.failing == ("python3",)
    assert 'exec: "python3": executable file not found in $PATH' in verdict.sentence
    assert "`imagekit sbom r/plain@sha256:abc`" in verdict.sentence
    assert "docker run --help" not in verdict.sentence
    assert note == "the image has no python3: the probe did not run"
    assert report.checks[0].stderr.endswith("for more information\n")  # kept whole


def test_any_other_failure_to_start_could_not_finish(tmp_path: Path) -> None:
    other = b'exec: "/bin/sh": executable file not found in $PATH\n'
    for stderr, code in ((b"Cannot connect to the Docker daemon\n", 125), (other, 127)):
        with pytest.raises(CouldNotFinish, match="did not run"):
            read_report(_did_not_start(stderr, code), "r/x:1", tmp_path)
