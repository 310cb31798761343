"""The health checks judged from their numbers, on the lent H100's own captures.

tests/fixtures/gpu/smi-q-h100-idle.xml and smi-q-h100-load.xml are what `nvidia-smi -q -x`
printed on the NVIDIA H100 80GB HBM3 lent on 2026-12-07 (driver 580.159.04), at rest and
under a BF16 load. Each failing case is that capture with ONE edit, named in the test
(`_edited`), so what fails is the edit and nothing else. The numbers go through the probe's
own reading (probe.parse_smi_xml, probe.health_numbers) and are judged by imagekit's
judges (imagekit.gpu.health), as a report's numbers are.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from imagekit.cli import main
from imagekit.errors import UsageError
from imagekit.gpu import health, probe
from imagekit.gpu.report import parse_report

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "gpu"
UUID = "GPU-26024bb6-9470-a9a0-bf6b-430d91d17e3e"  # the lent H100
MIB = 1024 * 1024
GENERIC = health.resolve_thresholds("standard")
H100 = health.resolve_thresholds("standard", health.load_gpu_profile("H100"))
# the probe's own process under the load (pid 544 in the capture) is ours, not another's
OWN = [544]
# what torch.cuda.mem_get_info said on that GPU before the checks (the capture's run.log)
FREE_AT_START = {UUID: 81950605312}


def _capture(name: str) -> str:
    return (FIXTURES / name).read_text()


def _edited(text: str, old: str, new: str) -> str:
    """The capture with one edit: OLD must be in it exactly once."""
    assert text.count(old) == 1, old
    return text.replace(old, new)


def _numbers(
    xml: str,
    *,
    before: str | None = None,
    samples: list[dict[str, Any]] | None = None,
    free: dict[str, int] | None = None,
) -> dict[str, dict[str, Any]]:
    smi = probe.parse_smi_xml(xml)
    counters = None
    if before is not None:
        counters = {
            g["uuid"]: g["clock_reason_counters_us"] for g in probe.parse_smi_xml(before)["gpus"]
        }
    topology = probe.parse_topology(_capture("topo-1x-h100.txt"))
    return probe.health_numbers(
        smi, samples or [], counters, topology, {}, {}, OWN,
        FREE_AT_START if free is None else free, samples is not None,
    )  # fmt: skip


def _judge(
    name: str, numbers: dict[str, Any], thresholds: health.Thresholds = GENERIC
) -> health.Judgement:
    return health.judge_check(name, numbers, thresholds)


def _sample(**reasons: str) -> str:
    """One row of the probe's throttle query as nvidia-smi prints it, the H100's values
    under load (SW power cap active, the rest not), REASONS replacing some."""
    values = {
        "hw_slowdown": "Not Active",
        "hw_thermal_slowdown": "Not Active",
        "hw_power_brake_slowdown": "Not Active",
        "sw_thermal_slowdown": "Not Active",
        "sw_power_cap": "Active",
        **reasons,
    }
    return ", ".join([UUID, *values.values(), "1335", "5", "51", "648.02"])


def test_the_lent_h100_at_rest_passes_every_read_only_check_with_its_numbers() -> None:
    numbers = _numbers(_capture("smi-q-h100-idle.xml"))
    judged = {name: _judge(name, found) for name, found in numbers.items()}
    assert {n: j.state for n, j in judged.items()} == {
        "ecc": "PASS",
        "row_remapping": "PASS",
        "retired_pages": "SKIPPED",  # an H100 remaps rows instead of retiring pages
        "throttle": "INCOMPLETE",  # no sample was taken: never a pass
        "pcie_link": "PASS",
        "nvlink": "SKIPPED",  # one GPU: the topology shows no NV#
        "processes": "PASS",
        "persistence": "PASS",
        "fabric": "SKIPPED",  # no NVSwitch: fabric N/A
    }
    [link] = numbers["pcie_link"]["gpus"]
    assert (link["current_gen"], link["max_gen"], link["current_width"], link["max_width"]) == (
        5, 5, 16, 16,
    )  # fmt: skip
    [ecc] = numbers["ecc"]["gpus"]
    assert (ecc["volatile_uncorrected"], ecc["aggregate_uncorrected"]) == (0, 0)
    [rows] = numbers["row_remapping"]["gpus"]
    assert (rows["pending"], rows["failure"], rows["uncorrectable"]) == (False, False, 0)
    [mem] = numbers["processes"]["gpus"]
    assert mem["total_mib"] == 81559 and mem["others"] == []
    assert numbers["persistence"]["gpus"][0]["persistence_mode"] == "Enabled"
    assert judged["pcie_link"].sentence == f"{UUID} gen 5 x16 (max gen 5 x16)"


def test_a_pending_row_remapping_fails_naming_it() -> None:
    # edit: remapped_row_pending No -> Yes
    xml = _edited(
        _capture("smi-q-h100-idle.xml"),
        "<remapped_row_pending>No</remapped_row_pending>",
        "<remapped_row_pending>Yes</remapped_row_pending>",
    )
    judged = _judge("row_remapping", _numbers(xml)["row_remapping"])
    assert judged.state == "FAIL"
    assert judged.sentence == f"{UUID}: a row remapping is pending (reset the GPU)"
    # edit: remapped_row_failure No -> Yes
    xml = _edited(
        _capture("smi-q-h100-idle.xml"),
        "<remapped_row_failure>No</remapped_row_failure>",
        "<remapped_row_failure>Yes</remapped_row_failure>",
    )
    assert (
        "row remapping failed" in _judge("row_remapping", _numbers(xml)["row_remapping"]).sentence
    )


def test_uncorrected_ecc_since_the_driver_loaded_fails_and_aggregate_only_past_its_limit() -> None:
    # edit: volatile dram_uncorrectable 0 -> 2 (the first of the two dram_uncorrectable: volatile)
    idle = _capture("smi-q-h100-idle.xml")
    xml = idle.replace("<dram_uncorrectable>0</dram_uncorrectable>", "<dram_uncorrectable>2<"
                       "/dram_uncorrectable>", 1)  # fmt: skip
    judged = _judge("ecc", _numbers(xml)["ecc"])
    assert (judged.state, judged.sentence) == ("FAIL", f"{UUID}: 2 uncorrected since the driver "
                                               "loaded")  # fmt: skip
    # edit: only the aggregate (lifetime) count 0 -> 3: judged against a limit where one is given
    parts = idle.split("<dram_uncorrectable>0</dram_uncorrectable>")
    assert len(parts) == 3
    xml = parts[0] + "<dram_uncorrectable>0</dram_uncorrectable>" + parts[1] + (
        "<dram_uncorrectable>3</dram_uncorrectable>") + parts[2]  # fmt: skip
    numbers = _numbers(xml)["ecc"]
    assert _judge("ecc", numbers).state == "PASS"
    limited = health.resolve_thresholds("standard", options={"max_aggregate_uncorrected_ecc": 2})
    assert _judge("ecc", numbers, limited).state == "FAIL"


def test_a_pcie_link_trained_down_to_x8_fails() -> None:
    # edit: current_link_width 16x -> 8x
    xml = _edited(
        _capture("smi-q-h100-idle.xml"),
        "<current_link_width>16x</current_link_width>",
        "<current_link_width>8x</current_link_width>",
    )
    judged = _judge("pcie_link", _numbers(xml)["pcie_link"])
    assert (judged.state, judged.sentence) == ("FAIL", f"{UUID}: link x8 of x16 (trained down)")


def test_a_lower_pcie_generation_fails_only_when_seen_under_load() -> None:
    # edit: current_link_gen 5 -> 1 (a GPU at rest may lower its link to save power)
    xml = _edited(
        _capture("smi-q-h100-idle.xml"),
        "<current_link_gen>5</current_link_gen>",
        "<current_link_gen>1</current_link_gen>",
    )
    assert _judge("pcie_link", _numbers(xml)["pcie_link"]).state == "PASS"
    under_load = probe.parse_throttle_rows(_sample().replace(", 1335, 5,", ", 1335, 4,"))
    judged = _judge("pcie_link", _numbers(xml, samples=under_load)["pcie_link"])
    assert (judged.state, judged.sentence) == ("FAIL", f"{UUID}: gen 4 of 5 under load "
                                               "(trained down)")  # fmt: skip
    healthy = probe.parse_throttle_rows(_sample())
    assert _judge("pcie_link", _numbers(xml, samples=healthy)["pcie_link"]).state == "PASS"


def test_the_h100_under_load_passes_and_hw_slowdown_under_load_fails() -> None:
    idle, load = _capture("smi-q-h100-idle.xml"), _capture("smi-q-h100-load.xml")
    samples = probe.parse_throttle_rows("\n".join([_sample(), _sample()]))
    numbers = _numbers(load, before=idle, samples=samples)["throttle"]
    assert numbers["counter_deltas_us"][UUID]["sw_power_cap"] == 2979435  # at the power cap
    judged = _judge("throttle", numbers)
    assert judged.state == "PASS", judged.sentence
    assert judged.sentence.endswith("in 2 sample(s) under the BF16 load")
    # edit: one sample's hw_slowdown Not Active -> Active
    slowed = probe.parse_throttle_rows("\n".join([_sample(), _sample(hw_slowdown="Active")]))
    judged = _judge("throttle", _numbers(load, before=idle, samples=slowed)["throttle"])
    assert (judged.state, judged.sentence) == (
        "FAIL", f"hw_slowdown active under the BF16 load on {UUID}",
    )  # fmt: skip
    # edit: the HW thermal counter 0 us -> 1500000 us during the load (no sample caught it)
    hot = _edited(
        load,
        "<clocks_event_reasons_counters_hw_therm_slowdown>0 us<",
        "<clocks_event_reasons_counters_hw_therm_slowdown>1500000 us<",
    )
    judged = _judge("throttle", _numbers(hot, before=idle, samples=samples)["throttle"])
    assert judged.state == "FAIL" and "hw_thermal_slowdown" in judged.sentence


def test_another_process_holding_40_gb_fails_the_free_memory_floor_and_is_named() -> None:
    # edit: a process (pid 4242) holding 40960 MiB beside the probe's own, as nvidia-smi lists it
    load = _capture("smi-q-h100-load.xml")
    xml = _edited(
        load,
        "\t\t\t\t<used_memory>1130 MiB</used_memory>\n\t\t\t</process_info>\n",
        "\t\t\t\t<used_memory>1130 MiB</used_memory>\n\t\t\t</process_info>\n"
        "\t\t\t<process_info>\n\t\t\t\t<pid>4242</pid>\n\t\t\t\t<type>C</type>\n"
        "\t\t\t\t<process_name>python3</process_name>\n"
        "\t\t\t\t<used_memory>40960 MiB</used_memory>\n\t\t\t</process_info>\n",
    )
    assert _judge("processes", _numbers(load)["processes"]).state == "PASS"  # ours alone
    free = {UUID: FREE_AT_START[UUID] - 40960 * MIB}
    judged = _judge("processes", _numbers(xml, free=free)["processes"])
    assert judged.state == "FAIL"
    assert "floor 90%" in judged.sentence and "python3 (pid 4242, 40960 MiB)" in judged.sentence
    assert "pid 544" not in judged.sentence  # the probe's own process is not another's


def test_an_inactive_nvlink_where_the_topology_shows_nv18_fails() -> None:
    text = _capture("nvlink-s-h100-gpu0.txt")
    topology = probe.parse_topology(_capture("topo-8x-nv18-two-numa.txt"))
    expected = probe.nvlink_expected(topology)
    assert expected["GPU0"] == 18

    def judged(status: str) -> health.Judgement:
        [(uuid, gpu)] = probe.parse_nvlink_status(status).items()
        errors = probe.parse_nvlink_errors(_capture("nvlink-e-h100.txt"))
        numbers = {"gpus": [{"uuid": uuid, "label": "GPU0", "links": gpu["links"],
                             "expected_links": expected["GPU0"],
                             "errors": next(iter(errors.values()))}]}  # fmt: skip
        return _judge("nvlink", numbers)

    assert judged(text).state == "PASS"
    # edit: link 7's speed -> <inactive>, as nvidia-smi prints a link that is down
    down = judged(_edited(text, "Link 7: 26.562 GB/s", "Link 7: <inactive>"))
    assert (down.state, down.sentence) == (
        "FAIL", "GPU0: 17 of 18 NVLink(s) active (the topology shows NV18; inactive: link 7)",
    )  # fmt: skip


def test_nvlink_error_counters_are_read_and_recorded() -> None:
    errors = probe.parse_nvlink_errors(_capture("nvlink-e-h100.txt"))
    [(uuid, links)] = errors.items()
    assert uuid == "GPU-abcdefab-cdef-abdc-abcd-abababababab"
    assert links["1"] == {"Replay Errors": 0, "Recovery Errors": 0, "CRC Errors": 0}


def test_xid_events_fail_when_fatal_and_an_unread_log_is_never_a_pass() -> None:
    lines = _capture("dmesg-h100.txt").splitlines()
    clean = probe.xid_events(lines, "dmesg")
    assert _judge("xid", clean).state == "PASS" and clean["lines_read"] == len(lines)
    # edit: one line added, the kernel's words for a GPU that fell off the bus
    fallen = "[ 912.41] NVRM: Xid (PCI:0000:00:06): 79, pid=2711, GPU has fallen off the bus."
    judged = _judge("xid", probe.xid_events([*lines, fallen], "dmesg"))
    assert judged.state == "FAIL" and judged.sentence.startswith("XID 79 in the kernel log")
    # an XID outside the fatal list is recorded, not judged (13: a graphics engine exception)
    other = "[ 913.00] NVRM: Xid (PCI:0000:00:06): 13, pid=2711, Graphics Exception"
    assert _judge("xid", probe.xid_events([*lines, other], "dmesg")).sentence.endswith("XID 13")
    unread = probe.xid_events([], None, "/dev/kmsg: Operation not permitted")
    assert _judge("xid", unread).state == "RECORDED"
    strict = health.resolve_thresholds("quick", options={"require_kernel_log": True})
    assert _judge("xid", unread, strict).state == "INCOMPLETE"


def test_a_driver_older_than_the_image_s_cuda_runtime_is_named_as_that() -> None:
    lent = {"driver_version": "580.159.04", "driver_cuda": "13.0", "runtime_cuda": "13.0"}
    assert _judge("driver", lent).state == "PASS"
    old = dict(lent, driver_version="535.183.01", driver_cuda="12.2")
    judged = _judge("driver", old)
    assert judged.state == "FAIL"
    assert judged.sentence.startswith("the driver is too old for the image's CUDA runtime")
    # where CUDA would not even start, CUDA's own words name it, not a failed kernel
    said = "RuntimeError: The NVIDIA driver on your system is too old (found version 12020)."
    refused = dict(lent, driver_cuda=None, cuda_init_error=said)
    assert _judge("driver", refused).sentence.startswith("the driver is too old")
    minor = dict(lent, driver_cuda="13.0", runtime_cuda="13.1")
    assert "minor version compatibility" in _judge("driver", minor).sentence


def _copies(h2d: list[float], d2d: list[float]) -> dict[str, dict[str, Any]]:
    figures: dict[str, Any] = {"rank": 0, "uuid": UUID, "repeats": len(h2d), "pinned": True}
    for kind, runs in (("h2d", h2d), ("d2h", h2d), ("d2d", d2d)):
        figures.update({f"{kind}_gbps": runs, f"{kind}_median_gbps": probe.median(runs)})
    pcie = {k: v for k, v in figures.items() if not k.startswith("d2d")}
    memory = {k: v for k, v in figures.items() if not k.startswith(("h2d", "d2h", "pinned"))}
    return {"pcie_bandwidth": {"gpus": [pcie]}, "memory_bandwidth": {"gpus": [memory]}}


def test_bandwidth_floors_are_judged_on_the_median_of_the_repeats() -> None:
    # the lent H100's own figures (pinned 256 MiB copies, 1 GiB device copies, 2026-12-07)
    lent = _copies([54.2, 54.7, 55.0, 54.9, 55.1], [1482.7, 1492.9, 1490.0, 1492.6, 1490.6])
    assert _judge("pcie_bandwidth", lent["pcie_bandwidth"], H100).state == "PASS"
    assert _judge("memory_bandwidth", lent["memory_bandwidth"], H100).state == "PASS"
    # no floor known: recorded, never a pass on its own
    assert _judge("memory_bandwidth", lent["memory_bandwidth"], GENERIC).state == "RECORDED"
    above = health.resolve_thresholds("standard", options={"min_h2d_gbps": 80})
    judged = _judge("pcie_bandwidth", lent["pcie_bandwidth"], above)
    assert judged.state == "FAIL"
    assert f"{UUID} host-to-device 54.9 GB/s (median of 5) under the floor 80.0" in judged.sentence
    # one slow repeat does not fail a GPU whose median is above the floor
    noisy = _copies([12.0, 54.7, 55.0, 54.9, 55.1], [300.0, 1492.9, 1490.0, 1492.6, 1490.6])
    assert _judge("pcie_bandwidth", noisy["pcie_bandwidth"], H100).state == "PASS"
    assert _judge("memory_bandwidth", noisy["memory_bandwidth"], H100).state == "PASS"
    slow = _copies([54.2] * 5, [900.0] * 5)
    assert _judge("memory_bandwidth", slow["memory_bandwidth"], H100).state == "FAIL"


def test_at_the_quick_level_the_copies_are_skipped_and_said_so() -> None:
    judged = _judge("pcie_bandwidth", {"not_at_level": "quick"})
    assert (judged.state, judged.sentence) == ("SKIPPED", "not measured at level quick")


def test_the_level_s_budget_fails_when_the_run_took_longer() -> None:
    numbers = {"level": "quick", "seconds": 6.2, "seconds_checks": 6.2, "seconds_probe": 9.0,
               "measured": "from the process group's start to the report"}  # fmt: skip
    quick = health.resolve_thresholds("quick")
    assert quick.budget_s == 5.0
    judged = _judge("budget", numbers, quick)
    assert (
        judged.state == "FAIL" and "6.20 s" in judged.sentence and "5.0 s budget" in judged.sentence
    )
    assert _judge("budget", dict(numbers, seconds=1.4), quick).state == "PASS"


def test_a_fabric_manager_that_has_not_finished_fails_where_nvswitch_is() -> None:
    # edit: fabric state N/A -> In Progress, status N/A -> N/A (an NVSwitch node mid-registration)
    xml = _edited(
        _capture("smi-q-h100-idle.xml"),
        "<state>N/A</state>\n\t\t\t<status>N/A</status>\n\t\t\t<cliqueId>",
        "<state>In Progress</state>\n\t\t\t<status>N/A</status>\n\t\t\t<cliqueId>",
    )
    judged = _judge("fabric", _numbers(xml)["fabric"])
    assert judged.state == "FAIL" and "In Progress" in judged.sentence


def test_persistence_mode_off_is_recorded_and_fails_only_where_required() -> None:
    # edit: persistence_mode Enabled -> Disabled
    xml = _edited(
        _capture("smi-q-h100-idle.xml"),
        "<persistence_mode>Enabled</persistence_mode>",
        "<persistence_mode>Disabled</persistence_mode>",
    )
    numbers = _numbers(xml)["persistence"]
    assert _judge("persistence", numbers).state == "RECORDED"
    required = health.resolve_thresholds("standard", options={"require_persistence": True})
    assert _judge("persistence", numbers, required).state == "FAIL"


def test_numbers_that_are_not_the_probe_s_are_not_judged() -> None:
    judged = _judge("ecc", {"gpus": [{"uuid": UUID, "volatile_uncorrected": "none, trust me"}]})
    assert judged.state == "INCOMPLETE"
    assert judged.sentence.startswith(
        "its numbers are not the probe's: gpus.0.volatile_uncorrected"
    )
    assert _judge("row_remapping", {"gpus": [], "verdict": "PASS"}).state == "INCOMPLETE"


def test_dcgm_s_absence_is_said_and_never_a_failure() -> None:
    judged = _judge("dcgm", {"present": False, "level": 1, "why_absent": "dcgmi is not on PATH"})
    assert judged.state == "SKIPPED" and "not a failure" in judged.sentence


@pytest.mark.parametrize("name", health.builtin_profiles())
def test_every_shipped_gpu_profile_names_a_source_for_every_value(name: str) -> None:
    profile = health.load_gpu_profile(name)
    assert profile.name == name
    assert set(profile.thresholds) <= set(health.Thresholds.model_fields)
    assert all(value.source.strip() for value in profile.thresholds.values())
    health.resolve_thresholds("standard", profile)


def test_the_profiles_cover_the_gpus_served_and_an_unknown_floor_is_left_empty() -> None:
    assert {"H20", "H100", "H200", "B200", "GB10", "L20"} <= set(health.builtin_profiles())
    gb10 = health.resolve_thresholds("standard", health.load_gpu_profile("GB10"))
    assert gb10.min_free_memory_fraction is None  # shared memory: no floor known
    assert gb10.min_h2d_gbps is None
    assert H100.min_h2d_gbps == 48 and H100.min_d2d_gbps == 1340


def test_the_options_win_over_the_plan_which_wins_over_the_profile() -> None:
    profile = health.load_gpu_profile("H100")
    found = health.resolve_thresholds(
        "quick", profile, {"min_h2d_gbps": 50, "min_d2h_gbps": 51}, {"min_h2d_gbps": 40}
    )
    assert (found.min_h2d_gbps, found.min_d2h_gbps, found.min_d2d_gbps) == (40, 51, 1340)
    assert found.budget_s == 5.0 and found.load_seconds == 0.0
    assert health.parse_threshold_options(("fatal_xids=[79, 94]",)) == {"fatal_xids": [79, 94]}
    with pytest.raises(UsageError, match="--threshold min_h2d=5"):
        health.parse_threshold_options(("min_h2d=5",))
    with pytest.raises(UsageError, match="min_free_memory_fraction"):
        health.resolve_thresholds("quick", options={"min_free_memory_fraction": 2})
    with pytest.raises(UsageError, match="unknown GPU profile"):
        health.load_gpu_profile("H300")


def test_every_level_requires_every_read_only_check_and_standard_the_copies() -> None:
    assert set(health.REQUIRED_AT_LEVEL["quick"]) | set(probe.MEASURED) == set(
        health.REQUIRED_AT_LEVEL["standard"]
    )
    assert set(health.REQUIRED_AT_LEVEL["standard"]) <= set(health.HEALTH_JUDGES)
    assert health.LEVEL_SETTINGS["quick"].budget_s == 5.0
    assert health.LEVEL_SETTINGS["standard"].budget_s == 30.0


REAL_RUNS = [
    # (the report the probe wrote on the lent H100, 2026-12-07; the options it ran with)
    ("report-quick-h100.json", health.thresholds_for("quick", None, None)),
    ("report-standard-h100.json", health.thresholds_for("standard", "H100", None)),
    ("report-memory-holder-h100.json", health.thresholds_for("quick", None, None)),
]


@pytest.mark.parametrize(("name", "thresholds"), REAL_RUNS, ids=[r[0] for r in REAL_RUNS])
def test_imagekit_judges_the_lent_h100_s_real_reports_as_the_probe_did(
    name: str, thresholds: health.Thresholds
) -> None:
    report = parse_report((FIXTURES / name).read_bytes(), name)
    judged = {
        check: health.judge_check(check, report.check(check), thresholds).state
        for check in health.HEALTH_JUDGES
        if check in report.checks
    }
    assert judged == {check: report.checks[check].status for check in judged}
    assert set(health.REQUIRED_AT_LEVEL[report.level or "standard"]) <= set(judged)


def test_the_real_runs_numbers_are_in_their_reports() -> None:
    standard = parse_report((FIXTURES / "report-standard-h100.json").read_bytes(), "standard")
    assert standard.level == "standard"
    [copies] = standard.check("pcie_bandwidth")["gpus"]
    assert copies["repeats"] == 5 and len(copies["h2d_gbps"]) == 5
    assert copies["h2d_median_gbps"] == 55.05 and copies["d2h_median_gbps"] == 54.97
    [device] = standard.check("memory_bandwidth")["gpus"]
    assert device["d2d_median_gbps"] == 1479.68 and device["d2d_size_mib"] == 1024
    throttle = standard.check("throttle")
    assert len(throttle["samples"]) == 8 and throttle["under_load"]
    assert throttle["load"][0]["tflops_median"] > 600  # BF16 8192^3 on an H100
    held = parse_report((FIXTURES / "report-memory-holder-h100.json").read_bytes(), "held")
    assert held.checks["processes"].status == "FAIL"
    [gpu] = held.check("processes")["gpus"]
    assert [(p["name"], p["used_mib"]) for p in gpu["others"]] == [("python3", 41478.0)]


def _job_spec(*options: str) -> dict[str, Any]:
    """The probe's spec in the Job `imagekit gpu-preflight --emit-job` prints (no GPU needed)."""
    ref = "registry.test/team/m3@sha256:" + "a" * 64
    argv = ["gpu-preflight", ref, "--emit-job", "--gpus", "8", "--json", *options]
    done = CliRunner().invoke(main, argv)
    assert done.exit_code == 0, done.output
    [job] = [item for item in json.loads(done.stdout)["items"] if item["kind"] == "Job"]
    [container] = job["spec"]["template"]["spec"]["containers"]
    spec: dict[str, Any] = json.loads(container["command"][-1])
    return spec


def test_the_level_profile_and_thresholds_reach_the_probe_from_the_command_line() -> None:
    spec = _job_spec("--level", "quick", "--gpu-profile", "H100", "--threshold", "min_d2d_gbps=9")
    assert spec["level"] == "quick" and spec["sizes_mib"] == [1.0]
    assert spec["thresholds"]["budget_s"] == 5.0 and spec["thresholds"]["min_h2d_gbps"] == 48
    assert spec["thresholds"]["min_d2d_gbps"] == 9  # the option over the profile's 1340
    standard = _job_spec()
    assert standard["level"] == "standard" and standard["sizes_mib"] == [1.0, 16.0, 128.0]
    assert standard["thresholds"]["min_free_memory_fraction"] == 0.9
    assert "min_h2d_gbps" not in standard["thresholds"]  # no profile: no GPU model's floor
    extended = _job_spec("--level", "extended", "--dcgm", "2")
    assert extended["sizes_mib"][-1] == 4096.0 and extended["dcgm"] == 2
    assert extended["thresholds"]["load_seconds"] == 60.0
