"""Benchmark: `ledger verify`, `show --json` and `lock` on a 200 MB ledger, memory beside time.

The target: all three stream, so their memory stays bounded (under 150 MB) whatever the
ledger's length. The ledger is generated here: a valid chain of note records of about 600
bytes each (tests/support/ledger_chain.py), 200 MB in all, so some 340,000 records.

Measured, each command in a fresh child process, its peak resident memory (``ru_maxrss``,
as GNU time reports it) and its wall time:

1. imagekit: ``imagekit ledger verify --json`` (every line parsed as a record, the chain
   recomputed, the head named), ``imagekit ledger show --json`` (every record printed as
   one JSON document, written to a file) and ``imagekit ledger lock --json`` (verified, then
   rendered in two more passes over the same bytes);
2. side by side, what a user would otherwise run to read the ledger: ``jq -c . LEDGER``
   (every line parsed and printed, no chain, no validation) and ``sha256sum LEDGER`` (the
   floor: reading the bytes once);
3. with ``--baseline REV``, the same three imagekit commands from that git revision (its
   ``imagekit/`` package extracted with ``git archive``), the figures before a change.

Results go to evidence/bench/ledger-memory.json and .md. Single runs: the figures that
matter are the memory ones, which the machine's load does not change.

Run: ``python -m bench.ledger [--baseline REV]`` (or ``nox -s bench -- ledger``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.report import SIDE_BY_SIDE, Report, machine  # noqa: E402
from tests.support.ledger_chain import write_chain  # noqa: E402

SIZE = 200 << 20
TARGET_MB = 150
REPORT = Report(
    "ledger-memory",
    "Ledger verify, show and lock on a 200 MB ledger: memory and time",
    "`nox -s bench -- ledger` (or `python -m bench.ledger [--baseline REV]`)",
)


def _measure(argv: list[str], env: dict[str, str], stdout: Path) -> dict[str, Any]:
    """One child under GNU time: its exit code, wall seconds and peak resident memory (MB).

    GNU time (small, forked from nothing larger) reports the child's own ``ru_maxrss``; a
    child forked straight from this interpreter would count the interpreter's pages too.
    """
    measured = stdout.with_suffix(".time")
    with stdout.open("wb") as out:
        start = time.perf_counter()
        proc = subprocess.run(  # noqa: S603
            ["/usr/bin/time", "-f", "%M", "-o", str(measured), *argv],
            stdout=out,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=stdout.parent,  # not the checkout: `python -c` imports from its folder first
            check=False,
        )
        wall = time.perf_counter() - start
    kilobytes = int(measured.read_text().split()[-1])
    return {
        "exit": proc.returncode,
        "wall_s": round(wall, 2),
        "peak_rss_mb": round(kilobytes / 1024, 1),
        "output_bytes": stdout.stat().st_size,
    }


def _imagekit(tmp: Path, ledger: Path, source: Path, label: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGEKIT_")}
    env |= {"IMAGEKIT_ROOT": str(tmp), "IMAGEKIT_LEDGER": str(ledger), "PYTHONPATH": str(source)}
    cli = [sys.executable, "-c", "from imagekit.cli import main; main()", "ledger"]
    return {
        "verify": _measure([*cli, "verify", "--json"], env, tmp / f"{label}-verify.json"),
        "show_json": _measure([*cli, "show", "--json"], env, tmp / f"{label}-show.json"),
        "lock": _measure([*cli, "lock", "--json"], env, tmp / f"{label}-lock.json"),
    }


def _baseline_source(rev: str, tmp: Path) -> Path:
    """The imagekit package of ``rev``, extracted beside the run."""
    folder = tmp / "baseline"
    folder.mkdir()
    archive = tmp / "baseline.tar"
    with archive.open("wb") as out:
        git = shutil.which("git") or "/usr/bin/git"
        subprocess.run([git, "archive", rev, "imagekit"], cwd=REPO_ROOT, stdout=out, check=True)  # noqa: S603
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "evidence" / "bench")
    parser.add_argument("--baseline", metavar="REV", help="also run this git revision's imagekit")
    parser.add_argument("--size-mb", type=int, default=SIZE >> 20)
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="imagekit-bench-ledger-"))
    try:
        ledger = tmp / "manifests" / "ledger.jsonl"
        ledger.parent.mkdir()
        records = write_chain(ledger, size=args.size_mb << 20)
        loadavg = list(os.getloadavg())
        results: dict[str, Any] = {
            "benchmark": "ledger verify, show --json and lock, memory and time",
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "ledger": {"bytes": ledger.stat().st_size, "records": records},
            "imagekit": _imagekit(tmp, ledger, REPO_ROOT, "imagekit"),
            "jq": _measure(["jq", "-c", ".", str(ledger)], dict(os.environ), tmp / "jq.out"),
            "sha256sum": _measure(["sha256sum", str(ledger)], dict(os.environ), tmp / "sum.out"),
            "target": f"peak resident memory < {TARGET_MB} MB whatever the ledger's length",
        }
        if args.baseline:
            source = _baseline_source(args.baseline, tmp)
            results["baseline"] = {
                "revision": args.baseline,
                **_imagekit(tmp, ledger, source, "baseline"),
            }
        results["machine"] = machine(loadavg) | {"loadavg_at_end": list(os.getloadavg())}
        _write(args.out, results)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def _row(what: str, run: dict[str, Any]) -> str:
    return f"| {what} | {run['peak_rss_mb']:.0f} | {run['wall_s']:.1f} | {run['exit']} |"


def _write(out: Path, results: dict[str, Any]) -> None:
    REPORT.write_json(out, results)
    ours, shape = results["imagekit"], results["ledger"]
    rows = [
        _row("imagekit `ledger verify --json`", ours["verify"]),
        _row("imagekit `ledger show --json` (to a file)", ours["show_json"]),
        _row("imagekit `ledger lock --json` (verify, then render)", ours["lock"]),
    ]
    if "baseline" in results:
        base = results["baseline"]
        rows += [
            _row(f"before (`{base['revision']}`): `ledger verify --json`", base["verify"]),
            _row(f"before (`{base['revision']}`): `ledger show --json`", base["show_json"]),
            _row(f"before (`{base['revision']}`): `ledger lock --json`", base["lock"]),
        ]
    rows += [
        _row("`jq -c . LEDGER` (parse and print every line)", results["jq"]),
        _row("`sha256sum LEDGER` (read the bytes once)", results["sha256sum"]),
    ]
    worst = max(ours[what]["peak_rss_mb"] for what in ("verify", "show_json", "lock"))
    lines = [
        f"Ledger: {shape['bytes'] / 2**20:.0f} MiB, {shape['records']} generated note records "
        "in one valid chain; each command in a fresh child process.",
        "",
        "| what | peak resident MB | seconds | exit |",
        "| --- | ---: | ---: | ---: |",
        *rows,
        "",
        f"- peak resident memory of the three imagekit commands: at most **{worst:.0f} MB** "
        f"(target < {TARGET_MB} MB); it does not grow with the ledger: the file is read a "
        "chunk at a time and verify holds three records and one bit a sequence number",
        f"- {SIDE_BY_SIDE}Memory is the figure that matters here, and load does not change it.",
    ]
    REPORT.write_markdown(out, results, lines)


if __name__ == "__main__":
    sys.exit(main())
