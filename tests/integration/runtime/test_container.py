"""The container runner against the real engine: what a container gets, what the engine says
when asked for GPUs it cannot give, and that a container stopped at its limit is gone.

This machine's engine is Docker 20.10 without the NVIDIA container toolkit or CDI, driven by
both of its clients (Debian's 20.10 and the newer one first on PATH): a GPU request is refused
before the container starts, which the runner must name (the GPU preflight's INCOMPLETE "no
GPU visible"), never mistake for a run whose output means something.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from imagekit.runtime.container import ContainerSpec, gpu_refusal, new_name, run_container
from imagekit.runtime.engine import Engine
from tests.support.base_image import BaseImage
from tests.support.engine_refs import containers


def _clients(engine: Engine) -> list[str]:
    """The engine's chosen client, and Debian's 20.10 client where it is another one."""
    clients = [engine.client_path]
    debian = "/usr/bin/docker"
    if os.path.exists(debian) and os.path.realpath(debian) != os.path.realpath(clients[0]):
        clients.append(debian)
    return clients


def test_a_container_gets_no_network_no_capability_and_the_shared_memory_asked(
    engine: Engine, base_image: BaseImage, tmp_path: Path
) -> None:
    script = "ls /sys/class/net; df -k /dev/shm | tail -n 1; grep CapEff /proc/self/status"
    spec = ContainerSpec(
        image=base_image.local_tag, argv=("-c", script), entrypoint="sh", shm_size="256m",
        label="io.imagekit.test-runner=1",
    )  # fmt: skip
    run = run_container(engine.client_path, spec, tmp_path, 120, stage="test")
    assert run.exit_code == 0, (tmp_path / "probe-stderr.raw").read_text()
    lines = (tmp_path / "probe-stdout.raw").read_text().splitlines()
    assert lines[0] == "lo"  # no interface but loopback
    assert lines[1].split()[1] == str(256 * 1024)  # /dev/shm of the size asked, in KiB
    assert lines[2].split() == ["CapEff:", "0000000000000000"]  # every capability dropped
    assert containers(engine, "label=io.imagekit.test-runner=1") == []


@pytest.mark.skipif(os.path.exists("/dev/nvidiactl"), reason="NVIDIA devices: no refusal here")
@pytest.mark.parametrize(("gpus", "cdi"), [("all", ()), ("device=0,1", ()),
                                           (None, ("nvidia.com/gpu=all",))])  # fmt: skip
def test_gpus_the_engine_cannot_give_are_named_in_its_own_words(
    engine: Engine, base_image: BaseImage, tmp_path: Path, gpus: str | None, cdi: tuple[str, ...]
) -> None:
    for number, client in enumerate(_clients(engine)):
        spec = ContainerSpec(
            image=base_image.local_tag, argv=("true",), gpus=gpus, cdi_devices=cdi,
            label="io.imagekit.test-runner=1",
        )  # fmt: skip
        run_dir = tmp_path / f"client-{number}"
        run_dir.mkdir()
        run = run_container(client, spec, run_dir, 120, stage="test")
        said = gpu_refusal(run)
        assert run.exit_code == 125 and said is not None, (client, run.stderr.last_words())
        if gpus is not None:
            assert 'could not select device driver "" with capabilities: [[gpu]]' in said
        else:
            assert 'could not select device driver "cdi"' in said or (
                "is not an absolute path" in said
            )
        assert said in (run_dir / "probe-stderr.raw").read_text()  # the raw words kept
    assert containers(engine, "label=io.imagekit.test-runner=1") == []


def test_the_wall_clock_limit_kills_and_removes_the_container(
    engine: Engine, base_image: BaseImage, tmp_path: Path
) -> None:
    spec = ContainerSpec(
        image=base_image.local_tag, argv=("300",), entrypoint="sleep",
        label="io.imagekit.test-runner=1",
    )  # fmt: skip
    run = run_container(engine.client_path, spec, tmp_path, 5, stage="test")
    assert run.timed_out and run.seconds < 60
    assert containers(engine, "label=io.imagekit.test-runner=1") == []
    ended = json.loads((tmp_path / "probe-run.json").read_text())
    assert ended["ended"] == "killed at the wall-clock limit" and ended["timed_out"] is True
    assert new_name("x") != new_name("x")  # each run its own name
