"""imagekit.runners.engine: the seam's spec as the engine's container, locked down, with the
devices, shared memory, mounts, scratch and limits it gives and nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.runners.engine import container_spec
from imagekit.runners.seam import Devices, Limits, Mount, RunSpec
from imagekit.runtime.container import container_argv


def _values(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, item in enumerate(argv) if item == flag]


def test_the_program_replaces_the_entrypoint_and_the_rest_is_given() -> None:
    spec = RunSpec(
        image="sha256:" + "a" * 64,
        argv=("python3", "/p/probe.py", "--x"),
        stage="gpu-preflight",
        label="io.imagekit.t=1",
        devices=Devices(gpus="all", cdi=("nvidia.com/gpu=all",), shm_size="16g"),
        env={"A": "1"},
        mounts=(Mount(Path("/here/probe.py"), "/p/probe.py"),),
        limits=Limits(cpus=1.5, memory="2g", scratch=(("/tmp", "1g"),)),  # noqa: S108
    )
    argv = container_argv("docker", container_spec(spec), "imagekit-t-1")
    assert argv[-3:] == ["sha256:" + "a" * 64, "/p/probe.py", "--x"]
    assert _values(argv, "--entrypoint") == ["python3"]
    assert _values(argv, "--gpus") == ["all"]
    assert _values(argv, "--device") == ["nvidia.com/gpu=all"]
    assert _values(argv, "--shm-size") == ["16g"]
    assert _values(argv, "--network") == ["none"]
    assert (_values(argv, "--cpus"), _values(argv, "--memory")) == (["1.5"], ["2g"])
    assert _values(argv, "--tmpfs") == ["/tmp:size=1g"]
    assert _values(argv, "-v") == ["/here/probe.py:/p/probe.py:ro"]
    assert _values(argv, "-e") == ["A=1"]
    assert _values(argv, "--label") == ["io.imagekit.t=1"]
    assert "--read-only" in argv and _values(argv, "--cap-drop") == ["ALL"]


def test_no_device_unless_given() -> None:
    spec = RunSpec(image="sha256:" + "b" * 64, argv=("true",), stage="t")
    argv = container_argv("docker", container_spec(spec), "n")
    assert not {"--gpus", "--device", "--shm-size", "--cpus", "--memory"} & set(argv)


def test_a_container_needs_an_image() -> None:
    with pytest.raises(ValueError, match="names none"):
        container_spec(RunSpec(argv=("true",), stage="t"))
