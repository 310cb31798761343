"""The launcher's argv and the options' bad input: torch's launcher, never one of ours."""

from __future__ import annotations

import json
import math
import re

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
        ({"nproc_per_node": 0}, "--nproc-per-node 0"),
        ({"sizes_mib": ()}, "--sizes"),
        ({"sizes_mib": (1.0, -2.0)}, "--sizes"),
        ({"sizes_mib": (1.0, math.nan)}, "--sizes nan"),
        ({"sizes_mib": (math.inf,)}, "--sizes inf"),
        ({"iterations": 0}, "--iterations"),
        ({"timeout_s": 0}, "--timeout"),
        ({"timeout_s": math.nan}, "--timeout nan: give a finite number"),
        ({"timeout_s": math.inf}, "--timeout inf: give a finite number"),
        ({"timeout_s": 0.1}, "--timeout 0.1: give a finite number at least 1"),
        ({"min_busbw": math.nan}, "--min-busbw nan"),
        ({"min_busbw": -5.0}, "--min-busbw -5.0"),
    ],
)
def test_bad_options_are_usage_errors(given: dict[str, object], said: str) -> None:
    with pytest.raises(UsageError, match=re.escape(said)):
        ProbeOptions(**given)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"gpus": 0}, "--gpus 0"),
        ({"gpus": True}, "--gpus True"),
        ({"gpus": 10**23}, "--gpus 1000"),
        ({"gpu_name": "H20("}, "--gpu-name 'H20(' is not a regular expression"),
        ({"gpu_name": "(?i)H20"}, "is not a regular expression"),
        ({"min_memory_gib": math.inf}, "--min-memory-gib inf"),
        ({"min_memory_gib": math.nan}, "--min-memory-gib nan"),
        ({"min_memory_gib": 0.0}, "--min-memory-gib 0.0"),
        ({"min_capability": "abc"}, "--min-capability abc: not a compute capability"),
        ({"min_capability": "9.0\n"}, "not a compute capability"),
    ],
)
def test_bad_expectations_are_usage_errors_where_given(given: dict[str, object], said: str) -> None:
    with pytest.raises(UsageError, match=re.escape(said)):
        Expectations(**given)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("-m", "mymodule"), "-m: not one of"),
        (("-r", "3"), "-r: not one of"),
        (("/tmp/evil.py",), "/tmp/evil.py: not one of"),
        (("--no-python",), "--no-python: not one of"),
        (("--max-restarts=3",), "--max-restarts=3: not one of"),
        (("--nnodes",), "--nnodes: the option's value is missing"),
        (("--nnodes", "probe.py"), "'probe.py' is not a value of --nnodes"),
        (("--nnodes=two",), "'two' is not a value of --nnodes"),
        (("--rdzv-endpoint=host:29400 --x",), "is not a value of --rdzv-endpoint"),
        (("--master-port=-1",), "is not a value of --master-port"),
    ],
)
def test_launcher_args_are_the_rendezvous_options_with_their_values(
    args: tuple[str, ...], said: str
) -> None:
    with pytest.raises(UsageError, match=re.escape(said)):
        ProbeOptions(launcher_args=args)


def test_rendezvous_options_given_in_two_parts_or_underscored_pass_as_one() -> None:
    options = ProbeOptions(
        launcher_args=("--nnodes", "2", "--node_rank=0", "--rdzv-endpoint", "head:29400",
                       "--rdzv-id=m3-preflight", "--master-addr=10.0.0.1", "--master-port=29500")
    )  # fmt: skip
    assert options.launcher_args == (
        "--nnodes=2", "--node-rank=0", "--rdzv-endpoint=head:29400", "--rdzv-id=m3-preflight",
        "--master-addr=10.0.0.1", "--master-port=29500",
    )  # fmt: skip
