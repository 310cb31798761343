"""The container runner's `docker run`: what a stage asks for, and nothing it did not."""

from __future__ import annotations

from pathlib import Path

from imagekit.runtime.container import ContainerSpec, Mount, ProcessRun, container_argv, gpu_refusal
from imagekit.runtime.output import Kept


def _value(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, item in enumerate(argv) if item == flag]


def test_the_defaults_lock_a_container_down_no_network_no_device() -> None:
    argv = container_argv("docker", ContainerSpec(image="sha256:" + "b" * 64, argv=("x",)), "n1")
    assert argv[:2] == ["docker", "run"] and _value(argv, "--name") == ["n1"]
    assert _value(argv, "--network") == ["none"]
    assert _value(argv, "--cap-drop") == ["ALL"] and "--read-only" in argv
    assert "--gpus" not in argv and "--device" not in argv and "--privileged" not in argv
    assert argv[-2:] == ["sha256:" + "b" * 64, "x"]


def test_gpus_cdi_shared_memory_and_mounts_are_given_only_when_asked() -> None:
    spec = ContainerSpec(
        image="img",
        argv=("-m", "torch.distributed.run"),
        entrypoint="python3",
        gpus="all",
        cdi_devices=("nvidia.com/gpu=all",),
        shm_size="16g",
        env={"NCCL_NVLS_ENABLE": "0"},
        mounts=(Mount(Path("/p/probe.py"), "/imagekit-gpu/probe.py"),
                Mount(Path("/o"), "/imagekit-out", read_only=False)),
    )  # fmt: skip
    argv = container_argv("docker", spec, "n2")
    assert _value(argv, "--gpus") == ["all"]
    assert _value(argv, "--device") == ["nvidia.com/gpu=all"]
    assert _value(argv, "--shm-size") == ["16g"]
    assert _value(argv, "-e") == ["NCCL_NVLS_ENABLE=0"]
    assert _value(argv, "-v") == ["/p/probe.py:/imagekit-gpu/probe.py:ro", "/o:/imagekit-out"]
    assert _value(argv, "--network") == ["none"] and _value(argv, "--entrypoint") == ["python3"]


def _run(code: int, stderr: bytes) -> ProcessRun:
    empty = Kept("stdout", 0, (), 0, b"")
    return ProcessRun(("docker",), code, 0.1, empty, Kept("stderr", len(stderr), (), 0, stderr))


def test_an_engine_that_cannot_give_gpus_is_named_with_its_own_words() -> None:
    said = (
        b'docker: Error response from daemon: could not select device driver "" with '
        b"capabilities: [[gpu]]\n\nRun 'docker run --help' for more information\n"
    )
    refused = gpu_refusal(_run(125, said))
    assert refused == 'Error response from daemon: could not select device driver "" with ' \
        "capabilities: [[gpu]]"  # fmt: skip
    assert gpu_refusal(_run(1, said)) is None  # the container ran: not a refusal
    assert gpu_refusal(_run(125, b"docker: invalid reference format\n")) is None
