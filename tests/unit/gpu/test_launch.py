"""The launcher's argv and the options' bad input: torch's launcher, never one of ours."""

from __future__ import annotations

import json

import pytest

from imagekit.errors import UsageError
from imagekit.gpu.launch import Expectations, ProbeOptions, launcher_argv


def test_the_probe_is_started_by_torch_distributed_run_one_process_a_visible_gpu() -> None:
    options = ProbeOptions(expect=Expectations(gpus=8, gpu_name="H20"), min_busbw=150)
    argv = launcher_argv("python3", "/p/probe.py", "/o/r.json", options)
    assert argv[:5] == ["python3", "-m", "torch.distributed.run", "--nproc-per-node", "gpu"]
    assert argv[5:9] == ["/p/probe.py", "--out", "/o/r.json", "--spec-json"]
    spec = json.loads(argv[9])
    assert spec["expect"] == {"count": 8, "name": "H20"}
    assert spec["sizes_mib"] == [1.0, 16.0, 128.0]
    assert (spec["warmups"], spec["iterations"], spec["min_busbw"]) == (5, 20, 150)


def test_rendezvous_options_pass_through_and_nothing_else_does() -> None:
    options = ProbeOptions(
        nproc_per_node=8, launcher_args=("--nnodes=2", "--node-rank=1", "--rdzv-backend=c10d")
    )
    argv = launcher_argv("python3", "probe.py", "-", options)
    assert argv[3:9] == [
        "--nproc-per-node", "8", "--nnodes=2", "--node-rank=1", "--rdzv-backend=c10d", "probe.py"
    ]  # fmt: skip
    with pytest.raises(UsageError, match="--no-python"):
        ProbeOptions(launcher_args=("--no-python",))


def test_the_self_test_runs_two_processes_on_small_sizes() -> None:
    argv = launcher_argv("python3", "probe.py", "-", ProbeOptions(self_test=True))
    assert argv[4] == "2"
    spec = json.loads(argv[-1])
    assert spec["self_test"] is True and spec["sizes_mib"] == [0.0625, 1.0]


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"expect": Expectations(gpus=0)}, "--gpus 0"),
        ({"nproc_per_node": 0}, "--nproc-per-node 0"),
        ({"sizes_mib": ()}, "--sizes"),
        ({"sizes_mib": (1.0, -2.0)}, "--sizes"),
        ({"iterations": 0}, "--iterations"),
        ({"timeout_s": 0}, "--timeout"),
    ],
)
def test_bad_options_are_usage_errors(given: dict[str, object], said: str) -> None:
    with pytest.raises(UsageError, match=said):
        ProbeOptions(**given)  # type: ignore[arg-type]
