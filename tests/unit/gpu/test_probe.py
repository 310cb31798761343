"""The GPU probe's pure parts: the topology table, the arithmetic, the expectations.

The probe's collectives and kernels run for real in tests/integration/gpu (gloo, in the
sglang replica's torch) and on the lent GPU machine (evidence/gpu-preflight/); what is
tested here needs no torch.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.gpu import probe
from tests.support.cuda_arches import COVERS, COVERS_IDS

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "gpu"


def test_the_field_s_node_is_read_into_a_matrix_with_each_gpu_s_numa_and_cpus() -> None:
    topo = probe.parse_topology((FIXTURES / "topo-8x-nv18-two-numa.txt").read_text())
    assert topo["devices"] == [f"GPU{i}" for i in range(8)]
    assert not topo["notes"]
    for i in range(8):
        row = topo["matrix"][f"GPU{i}"]
        assert row[f"GPU{i}"] == "X"
        assert {v for k, v in row.items() if k != f"GPU{i}"} == {"NV18"}
    assert topo["affinity"]["GPU0"] == {
        "CPU Affinity": "0-191",
        "NUMA Affinity": "0",
        "GPU NUMA ID": "N/A",
    }
    assert topo["affinity"]["GPU7"]["NUMA Affinity"] == "1"
    assert topo["affinity"]["GPU7"]["CPU Affinity"] == "192-383"
    assert "NV#" in topo["legend"]


def test_a_terminal_copy_with_nics_keeps_the_gpu_and_nic_links_apart() -> None:
    topo = probe.parse_topology((FIXTURES / "topo-4x-pcie-nics.txt").read_text())
    assert topo["devices"] == ["GPU0", "GPU1", "GPU2", "GPU3", "NIC0", "NIC1"]
    assert topo["matrix"]["GPU0"]["GPU1"] == "PIX" and topo["matrix"]["GPU0"]["GPU2"] == "SYS"
    assert topo["matrix"]["NIC1"]["GPU3"] == "PHB"
    assert "NIC0" not in topo["affinity"]  # NIC rows carry no affinity columns
    assert topo["affinity"]["GPU2"]["CPU Affinity"] == "16-31,48-63"


def test_text_without_a_table_is_said_so_not_guessed() -> None:
    topo = probe.parse_topology("NVIDIA-SMI has failed because it couldn't communicate\n")
    assert topo["matrix"] == {} and topo["notes"] == ["no GPU header row"]


def test_gpu_query_rows_are_read_with_their_ecc_and_mig_or_none() -> None:
    text = (
        "0, GPU-1, NVIDIA H20, 00000000:18:00.0, 97871, 0, 0, Disabled, 570.86.15\n"
        "1, GPU-2, NVIDIA H20, 00000000:2A:00.0, 97871, [N/A], 3, [N/A], 570.86.15\n"
        "garbage line\n"
    )
    rows = probe.parse_gpu_query(text)
    assert [r["uuid"] for r in rows] == ["GPU-1", "GPU-2"]
    assert rows[0]["memory.total"] == 97871 and rows[0]["mig.mode.current"] == "Disabled"
    assert rows[1]["ecc.errors.uncorrected.volatile.total"] is None
    assert rows[1]["ecc.errors.uncorrected.aggregate.total"] == 3


@pytest.mark.parametrize(("arches", "capability", "covered"), COVERS, ids=COVERS_IDS)
def test_compiled_arches_cover_a_capability_as_cuda_loads_them(
    arches: list[str], capability: tuple[int, int], covered: bool
) -> None:
    assert probe.covers(arches, *capability) is covered


def test_bus_bandwidth_is_nccl_tests_2_n_minus_1_over_n() -> None:
    algbw, busbw = probe.bandwidths(128 << 20, 0.001, 8)
    assert algbw == pytest.approx(134.217728)
    assert busbw == pytest.approx(algbw * 2 * 7 / 8)
    assert probe.bandwidths(1 << 20, 0.001, 1)[1] == 0.0  # one rank crosses no link


def _facts(name: str = "NVIDIA H20", gib: float = 96.0, cap: str = "9.0") -> dict[str, object]:
    return {"name": name, "memory_bytes": int(gib * 1024**3), "memory_gib": gib, "capability": cap}


def test_each_expectation_that_a_gpu_misses_is_named() -> None:
    assert probe.expectation_problems(_facts(), {"name": "H20", "min_memory_gib": 90}) == []
    problems = probe.expectation_problems(
        _facts("NVIDIA H100 80GB HBM3", 79.2, "9.0"),
        {"name": "H20", "min_memory_gib": 135, "min_capability": "10.0"},
    )
    assert problems == [
        "name 'NVIDIA H100 80GB HBM3' does not match 'H20'",
        "memory 79.20 GiB < 135 GiB",
        "capability 9.0 < 10.0",
    ]


def test_the_probe_keeps_to_python_3_8() -> None:
    import ast
    import re

    source = Path(probe.__file__).read_text()
    ast.parse(source, feature_version=(3, 8))
    assert not re.search(r"datetime\.UTC\b|\.removeprefix\(|\bmatch .*:$", source, re.M)


@pytest.mark.parametrize(
    ("pattern", "name", "matches"),
    [
        ("H20", "NVIDIA H20", True),
        ("H20", "NVIDIA H20-3e", True),
        ("H20", "NVIDIA H200", False),  # another GPU, not an H20
        ("h100", "NVIDIA H100 80GB HBM3", True),
        ("H100|H200", "NVIDIA H200", True),
        ("A100", "NVIDIA H100 80GB HBM3", False),
    ],
)
def test_a_gpu_name_pattern_is_a_whole_token_of_the_name(
    pattern: str, name: str, matches: bool
) -> None:
    from imagekit.kinds.gpu_preflight import name_matches

    assert probe.name_matches(pattern, name) is matches
    assert name_matches(pattern, name) is matches  # the gate's rule reads names alike


def test_the_lent_machine_s_own_table_with_its_underline_escapes_is_read() -> None:
    """Captured on the lent H200 machine (evidence/gpu-preflight/): nvidia-smi underlines the
    header row with terminal escapes even into a pipe; the first parser took the GPU's own
    row for the header and recorded an empty matrix."""
    text = (FIXTURES / "topo-1x-h200.txt").read_text()
    assert "\x1b[4m" in text
    topo = probe.parse_topology(text)
    assert topo["devices"] == ["GPU0"] and topo["matrix"] == {"GPU0": {"GPU0": "X"}}
    assert topo["affinity"]["GPU0"] == {
        "CPU Affinity": "0-15",
        "NUMA Affinity": "0",
        "GPU NUMA ID": "N/A",
    }


def test_a_serving_cli_re_check_passes_only_when_it_parses_and_lists_every_flag() -> None:
    """The check the CPU audit defers (vLLM's --help=all needs a GPU), re-run on the GPU
    node: the command's exit and its help's flags, as the audit's own CLI check reads them."""
    import sys

    ok = probe.run_cli({"argv": ["{python}", "--help"], "required_flags": ["-c", "-m"]})
    assert ok["status"] == "PASS" and ok["argv"][0] == sys.executable
    missing = probe.run_cli({"argv": ["{python}", "--help"], "required_flags": ["--serve-me"]})
    assert missing["status"] == "FAIL" and missing["missing_flags"] == ["--serve-me"]
    broken = probe.run_cli({"argv": ["{python}", "-c", "raise SystemExit(3)"]})
    assert broken["status"] == "FAIL" and broken["exit_code"] == 3
    slow = probe.run_cli({"argv": ["{python}", "-c", "import time; time.sleep(5)"],
                          "timeout_s": 0.5})  # fmt: skip
    assert slow["status"] == "INCOMPLETE" and "timed out" in slow["reason"]


def test_both_probes_judge_an_arch_list_alike() -> None:
    """The audit's probe and this one each stand alone in an image (no shared import), so
    each has its own copy of the arch rule; here they are held to the same answers."""
    from imagekit.audit import probe as audit_probe

    lists = [["sm_80", "sm_90"], ["sm_90a"], ["compute_90"], ["sm_86", "compute_80"], []]
    for arches in lists:
        for major in (7, 8, 9, 10, 12):
            for minor in (0, 5, 6, 9):
                assert probe.covers(arches, major, minor) == audit_probe.covers(
                    arches, major, minor
                ), (arches, major, minor)
