"""The probe's own logic, run for real against this interpreter (no container needed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from imagekit.audit import probe
from tests.support.cuda_arches import COVERS, COVERS_IDS
from tests.support.pythons import old_pythons

PROBE = Path(probe.__file__)


def run_probe(spec: dict[str, Any], env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(PROBE), "--spec-json", json.dumps(spec)],
        capture_output=True,
        timeout=120,
        check=True,
        env=env,
    )
    return {c["name"]: c for c in json.loads(proc.stdout)["checks"]}


def spec(**profile: Any) -> dict[str, Any]:
    # Only the checks under test: video off, and nothing that hashes all of site-packages.
    base: dict[str, Any] = {
        "name": "unit", "video": False, "record": False, "timeouts": {"default": 60},
    }  # fmt: skip
    base.update(profile)
    return {"profile": base, "expected_paths": [], "host": False}


def test_pip_check_lines_of_both_shapes_are_parsed() -> None:
    text = (
        "nixl 1.2.0 requires nixl-cu12, which is not installed.\n"
        "moviepy 2.2.1 has requirement pillow<12.0,>=9.2.0, but you have pillow 12.2.0.\n"
        "something pip says that no pattern knows\n"
    )
    conflicts, unparsed = probe.parse_pip_check(text)
    assert conflicts == [
        {
            "distribution": "nixl",
            "version": "1.2.0",
            "requirement": "nixl-cu12",
            "problem": "missing",
            "installed": None,
        },
        {
            "distribution": "moviepy",
            "version": "2.2.1",
            "requirement": "pillow<12.0,>=9.2.0",
            "problem": "version-conflict",
            "installed": "pillow 12.2.0",
        },
    ]
    assert unparsed == ["something pip says that no pattern knows"]
    assert probe.parse_pip_check("No broken requirements found.\n") == ([], [])


@pytest.mark.parametrize(("arches", "capability", "covered"), COVERS, ids=COVERS_IDS)
def test_compiled_arches_cover_a_capability(
    arches: list[str], capability: tuple[int, int], covered: bool
) -> None:
    assert probe.covers(arches, *capability) is covered


def test_a_hung_check_times_out_while_the_others_finish() -> None:
    checks = run_probe(
        spec(
            modules=["json"],
            cli=[
                {
                    "name": "hangs",
                    "command": ["{python}", "-c", "import time; time.sleep(600)"],
                    "timeout_s": 2,
                },
                {
                    "name": "quick",
                    "command": ["{python}", "-c", "print('--flag')"],
                    "flags": ["--flag"],
                },
            ],
        )  # fmt: skip
    )
    assert checks["cli:hangs"]["status"] == "TIMEOUT"
    assert 2 <= checks["cli:hangs"]["duration_s"] < 20
    assert checks["cli:quick"]["status"] == "PASS"
    assert checks["find-spec"]["status"] == "PASS"


def test_garbage_output_cannot_break_the_report() -> None:
    noise = "import sys; sys.stdout.buffer.write(bytes(range(256)) * 4); print(' --ok')"
    checks = run_probe(
        spec(cli=[{"name": "noise", "command": ["{python}", "-c", noise], "flags": ["--ok"]}])
    )
    noisy = checks["cli:noise"]
    assert noisy["status"] == "PASS"
    note = "stdout was not valid UTF-8: decoded with replacement characters"
    assert note in noisy["output_notes"]
    assert "\ufffd" in noisy["stdout"]


def test_a_cli_failing_for_an_unknown_reason_fails_even_with_a_fallback() -> None:
    cli = {
        "name": "broken",
        "command": ["{python}", "-c", "import sys; sys.exit('ImportError: libcuda.so')"],
        "flags": [],
        "environmental_failure": {
            "pattern": "Failed to infer device type",
            "fallback": {"command": ["{python}", "-c", "print('fine')"]},
        },
    }
    checks = run_probe(spec(cli=[cli]))
    assert checks["cli:broken"]["status"] == "FAIL"


def test_a_deferred_cli_whose_fallback_fails_is_a_fail() -> None:
    cli = {
        "name": "gpu",
        "command": ["{python}", "-c", "import sys; sys.exit('Failed to infer device type')"],
        "flags": ["--block-size"],
        "environmental_failure": {
            "pattern": "Failed to infer device type",
            "fallback": {"command": ["{python}", "-c", "print('--max-model-len')"]},
        },
    }
    checks = run_probe(spec(cli=[cli]))
    assert checks["cli:gpu"]["status"] == "FAIL"
    assert "fallback failed" in checks["cli:gpu"]["reason"]
    assert "Failed to infer device type" in checks["cli:gpu"]["data"]["raw_failure"]["stderr"]


def test_cpu_only_torch_fails_when_sm_90_is_required(tmp_path: Path) -> None:
    """The probe's CPU-only branch: version.cuda None and no arch flags.

    A module with only those facts, made here; the same refusal in a real container is
    tests/integration/test_audit.py's (a labelled stand-in: no CPU build is on the index).
    """
    pkg = tmp_path / "torch"
    (pkg / "cuda").mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "from torch import cuda, version\n__version__ = '2.13.0+cpu'\n"
    )
    (pkg / "version.py").write_text("cuda = None\n")
    (pkg / "cuda" / "__init__.py").write_text("def get_arch_list():\n    return []\n")
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    checks = run_probe(spec(torch={"required": True, "arches": ["sm_90"]}), env=env)
    torch = checks["torch"]
    assert torch["status"] == "FAIL"
    assert "CPU-only build" in torch["reason"]
    assert torch["data"]["cuda"] is None


def test_arch_flags_are_read_without_a_gpu(tmp_path: Path) -> None:
    """get_arch_list() is [] without a GPU; the build's arch flags still list sm_90."""
    pkg = tmp_path / "torch"
    (pkg / "cuda").mkdir(parents=True)
    (pkg / "_C").mkdir()
    (pkg / "__init__.py").write_text(
        "from torch import _C, cuda, version\n__version__ = '2.11.0'\n"
    )
    (pkg / "version.py").write_text("cuda = '13.0'\n")
    (pkg / "cuda" / "__init__.py").write_text("def get_arch_list():\n    return []\n")
    (pkg / "_C" / "__init__.py").write_text(
        "def _cuda_getArchFlags():\n    return 'sm_80 sm_90 sm_100'\n"
    )
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    checks = run_probe(spec(torch={"required": True, "arches": ["sm_90"]}), env=env)
    assert checks["torch"]["status"] == "PASS", checks["torch"]["reason"]
    assert checks["torch"]["data"]["arch_list"] == ["sm_80", "sm_90", "sm_100"]
    missing = run_probe(spec(torch={"required": True, "arches": ["sm_120"]}), env=env)
    assert missing["torch"]["status"] == "FAIL"
    assert "lacks required sm_120" in missing["torch"]["reason"]


def test_output_is_capped_and_the_cap_noted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe, "OUTPUT_CAP", 1000)
    proc = probe.run_process([sys.executable, "-c", "print('x' * 5000)"], timeout_s=30)
    rendered = probe.render_output(proc)
    assert len(rendered["stdout"]) == 1000
    assert rendered["stdout_bytes"] == 5001
    assert rendered["output_capped"] is True
    assert rendered["output_notes"] == ["stdout capped: kept the first 1000 of 5001 bytes"]


def test_missing_required_distribution_fails_versions() -> None:
    checks = run_probe(spec(distributions=["pip"], required_distributions=["surely-not-installed"]))
    assert checks["versions"]["status"] == "FAIL"
    assert checks["versions"]["data"]["versions"]["surely-not-installed"] is None


@pytest.mark.parametrize("python", old_pythons() or [None])
def test_probe_runs_on_old_interpreters(python: str | None) -> None:
    """Images ship old interpreters: the probe must keep to what Python 3.8 has."""
    if python is None:
        pytest.skip("no Python 3.8 or 3.9 on this machine to run the probe with")
    # The help fallback's code path too: a CLI refusing --help=all, read with --help.
    old_cli = {
        "name": "old",
        "command": ["{python}", "-c", ARGPARSE_CLI, "--help=all"],
        "flags": ["--num-prompts"],
    }
    proc = subprocess.run(
        [python, str(PROBE), "--spec-json", json.dumps(spec(modules=["json"], cli=[old_cli]))],
        capture_output=True,
        timeout=120,
        check=True,
    )
    checks = {c["name"]: c["status"] for c in json.loads(proc.stdout)["checks"]}
    assert checks["cli:old"] == "PASS"
    assert checks["find-spec"] == "PASS"
    assert checks["versions"] == "PASS"
    assert checks["pip-check"] in ("PASS", "FAIL")  # whatever that interpreter's pip says


def test_a_profile_may_turn_pip_check_off() -> None:
    checks = run_probe(spec(pip_check=False))
    assert checks["pip-check"]["status"] == "SKIPPED"
    assert checks["pip-check"]["reason"] == "the profile turns this check off"
    assert checks["pip-check"]["command"] == []  # pip was never run


def test_record_hashes_written_in_hex_match_the_same_bytes(tmp_path: Path) -> None:
    """bookworm's python3-blinker ships a RECORD with hex sha256 digests instead of base64."""
    site = tmp_path / "site"
    (site / "hexpkg").mkdir(parents=True)
    (site / "hexpkg" / "__init__.py").write_text("x = 1\n")
    info = site / "hexpkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hexpkg\nVersion: 1.0\n")
    good = __import__("hashlib").sha256(b"x = 1\n").hexdigest()
    (info / "RECORD").write_text(
        f"hexpkg/__init__.py,sha256={good},6\nhexpkg-1.0.dist-info/RECORD,,\n"
    )
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    record = run_probe(spec(record=True, distributions=["hexpkg"]), env=env)["record"]
    assert not [e for e in record["data"]["differ"] if e["distribution"] == "hexpkg"]
    (site / "hexpkg" / "__init__.py").write_text("x = 2\n")  # a real change still differs
    record = run_probe(spec(record=True, distributions=["hexpkg"]), env=env)["record"]
    assert [e["path"] for e in record["data"]["differ"] if e["distribution"] == "hexpkg"] == [
        "hexpkg/__init__.py"
    ]


# --------------------------------------------------------------------------- help and video

ARGPARSE_CLI = (
    "import argparse, sys; p = argparse.ArgumentParser(prog='old');"
    " p.add_argument('--num-prompts'); p.parse_args(sys.argv[1:])"
)


def test_a_cli_that_refuses_help_all_is_read_with_help_and_says_so() -> None:
    cli = {"name": "old", "command": ["{python}", "-c", ARGPARSE_CLI, "--help=all"]}
    checks = run_probe(spec(cli=[{**cli, "flags": ["--num-prompts"]}]))
    old = checks["cli:old"]
    assert old["status"] == "PASS"
    assert old["command"][-1] == "--help"
    assert old["reason"] == "`--help=all` refused, read `--help`: help lists --num-prompts"
    assert "refused `--help=all`" in old["proves"]
    assert old["data"]["help_read"] == "--help"
    (refused,) = old["data"]["help_all_refused"]
    assert "ignored explicit argument 'all'" in refused["stderr"]
    assert refused["exit_code"] == 2


def test_a_cli_that_takes_help_all_is_not_read_with_help() -> None:
    grouped = (
        "import sys; print('--num-prompts' if sys.argv[1] == '--help=all' else 'Config Groups')"
    )
    cli = {"name": "new", "command": ["{python}", "-c", grouped, "--help=all"]}
    new = run_probe(spec(cli=[{**cli, "flags": ["--num-prompts"]}]))["cli:new"]
    assert new["status"] == "PASS"
    assert new["data"]["help_read"] == "--help=all"
    assert "help_all_refused" not in new["data"]
    assert "refused" not in new["proves"]


def test_any_other_failure_of_help_all_is_not_retried_with_help() -> None:
    gpu = "import sys; sys.exit('Failed to infer device type') if '--help=all' in sys.argv else 0"
    cli = {"name": "gpu", "command": ["{python}", "-c", gpu, "--help=all"], "flags": []}
    gpu_check = run_probe(spec(cli=[cli]))["cli:gpu"]
    assert gpu_check["status"] == "FAIL"
    assert gpu_check["command"][-1] == "--help=all"
    assert "help_all_refused" not in gpu_check["data"]


STANDIN = Path(__file__).resolve().parents[2] / "support" / "replica_pkgs" / "vllm-standin"


def _standin_env(tmp_path: Path, without: tuple[str, ...] = ()) -> dict[str, str]:
    """PATH with a `vllm` command running the replica's stand-in CLI (a variant lacking the
    benchmark flags ``without`` when given); no GPU device is visible, as in an audit."""
    import os
    import shutil

    package = tmp_path / "standin"
    shutil.copytree(STANDIN, package)
    (package / "vllm" / "_standin_variant.py").write_text(f"WITHOUT_BENCH_FLAGS = {without!r}\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "vllm"
    script.write_text(
        f"#!{sys.executable}\nimport sys\nfrom vllm.entrypoints.cli.main import main\n"
        "sys.exit(main())\n"
    )
    script.chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(package),
        "CUDA_VISIBLE_DEVICES": "",
    }


def _vllm_cli() -> list[dict[str, Any]]:
    from imagekit.audit.profiles import load_profile

    return [p.model_dump(mode="json") for p in load_profile("vllm").cli]


def test_the_vllm_profile_on_the_stand_in_is_deferred_reading_help_all(tmp_path: Path) -> None:
    checks = run_probe(spec(cli=_vllm_cli()), env=_standin_env(tmp_path))
    for name in ("cli:serve-help", "cli:bench-serve-help"):
        assert checks[name]["status"] == "DEFERRED", checks[name]["reason"]
        assert checks[name]["data"]["help_read"] == "--help=all"
        raw = checks[name]["data"]["raw_failure"]
        assert "Failed to infer device type" in raw["stderr"]
    bench = checks["cli:bench-serve-help"]
    assert "--request-id-prefix" in bench["stdout"]
    assert "fallback passed: help lists --base-url" in bench["reason"]


def test_the_stand_in_s_plain_help_is_grouped_so_plain_help_misses_the_flags(
    tmp_path: Path,
) -> None:
    """Why `--help=all`: the profile used to read `bench serve --help`."""
    plain = [
        {**probe, "command": [p.replace("--help=all", "--help") for p in probe["command"]]}
        for probe in _vllm_cli()
    ]
    for each in plain:
        fallback = each["environmental_failure"]["fallback"]
        fallback["command"] = [p.replace("--help=all", "--help") for p in fallback["command"]]
    checks = run_probe(spec(cli=plain), env=_standin_env(tmp_path))
    bench = checks["cli:bench-serve-help"]
    assert bench["status"] == "FAIL"
    assert "Config Groups" in bench["stdout"]
    assert "help does not list --base-url" in bench["reason"]


def test_a_bench_client_lacking_two_flags_fails_naming_them(tmp_path: Path) -> None:
    env = _standin_env(tmp_path, without=("--num-warmups", "--request-id-prefix"))
    checks = run_probe(spec(cli=_vllm_cli()), env=env)
    assert checks["cli:serve-help"]["status"] == "DEFERRED"
    bench = checks["cli:bench-serve-help"]
    assert bench["status"] == "FAIL"
    assert bench["reason"].endswith("help does not list --num-warmups, --request-id-prefix")


@pytest.mark.parametrize("numpy_present", [True, False])
def test_the_av_roundtrip_goes_through_numpy_when_it_is_there(
    numpy_present: bool, tmp_path: Path
) -> None:
    """Where this interpreter has PyAV (the replicas' images do; the integration tests audit
    them): with numpy, frames are made as loaders make them; without, raw planes, said so."""
    import os

    pytest.importorskip("av")
    if numpy_present:
        pytest.importorskip("numpy")
    env = dict(os.environ)
    if not numpy_present:
        hidden = tmp_path / "hide"
        hidden.mkdir()
        # importlib.util.find_spec answers None for a module whose sys.modules entry is None.
        (hidden / "sitecustomize.py").write_text("import sys\nsys.modules['numpy'] = None\n")
        env["PYTHONPATH"] = str(hidden)
    checks = run_probe(spec(video=True), env=env)
    av_check = checks["av-roundtrip"]
    assert av_check["status"] == "PASS", av_check["reason"]
    if numpy_present:
        assert av_check["data"]["path"] == "numpy"
        assert "VideoFrame.from_ndarray" in av_check["proves"]
        assert "through numpy" in av_check["reason"]
    else:
        assert av_check["data"]["path"] == "raw-planes"
        assert "numpy is not installed" in av_check["proves"]


def test_pip_and_pyav_are_skipped_where_absent_when_the_profile_says_if_installed(
    tmp_path: Path,
) -> None:
    """A plain python3 (a venv without pip: no pip, no PyAV) under the generic profile's
    `if_installed`: SKIPPED saying why; without it, the same absence fails."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "plain")],
        check=True,
        timeout=120,
    )
    plain = tmp_path / "plain" / "bin" / "python3"

    def checks(**profile: Any) -> dict[str, Any]:
        argv = [str(plain), str(PROBE), "--spec-json", json.dumps(spec(video=True, **profile))]
        proc = subprocess.run(argv, capture_output=True, timeout=120, check=True)
        return {c["name"]: c for c in json.loads(proc.stdout)["checks"]}

    lenient = checks(if_installed=["pip-check", "av-roundtrip"])
    for name, what in (("pip-check", "pip is not installed"), ("av-roundtrip", "PyAV")):
        assert lenient[name]["status"] == "SKIPPED", lenient[name]
        assert what in lenient[name]["reason"]
        assert "the profile checks it only where it is" in lenient[name]["reason"]
    strict = checks()
    assert strict["pip-check"]["status"] == "FAIL"
    assert strict["av-roundtrip"]["status"] == "FAIL"
