"""Benchmark: `imagekit build --buildkit` beside `buildctl build` run directly.

One run, side by side, on the demo plan and the test suite's Debian base (pushed to a loopback
registry), each build on a fresh buildkitd with an empty root of its own (so each pulls the
base and runs every step), each pushing by digest to the same registry:

1. ``buildctl build`` of the rendered demo context with the flags imagekit passes (dockerfile
   frontend, host network, the CA bundle as a secret, push by digest): the peer, and the floor;
2. ``imagekit build demo --buildkit ADDR --push REPO``: the same build, plus what imagekit adds
   around it: the render, the daemon probe, the evidence log, the plan's assertions run once
   more in the pushed image through the engine (which pulls it), and the ledger record.

imagekit's overhead is (2) - (1); it includes the post-push assertions, for which the engine
pulls the image (the engine already holds the base's layers: the base is pushed from it).
imagekit runs first, and buildctl then builds the context imagekit kept in evidence.
Results go to evidence/bench/remote-build.json and .md (``--out``).

Run: ``python -m bench.remote`` (``nox -s bench -- remote``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.report import SIDE_BY_SIDE, Report, machine  # noqa: E402
from tests.support.base_image import push_base  # noqa: E402
from tests.support.buildkitd import BUILDCTL, start_buildkitd  # noqa: E402
from tests.support.registries import start_registry  # noqa: E402

REPORT = Report(
    stem="remote-build",
    title="imagekit build --buildkit beside buildctl",
    reproduce="`python -m bench.remote` (`nox -s bench -- remote`)",
    note=SIDE_BY_SIDE,
)
CA = Path("/etc/ssl/certs/ca-certificates.crt")


def _workspace(root: Path) -> dict[str, str]:
    (root / "manifests").mkdir(parents=True)
    for plan in (REPO_ROOT / "manifests").glob("*.yaml"):
        shutil.copy2(plan, root / "manifests" / plan.name)
    shutil.copytree(REPO_ROOT / "dockerfiles" / "demo", root / "dockerfiles" / "demo")
    (root / "evidence").mkdir()
    return {"IMAGEKIT_ROOT": str(root), "IMAGEKIT_LEDGER": str(root / "manifests/ledger.jsonl")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "evidence" / "bench")
    args = parser.parse_args(argv)
    load = list(os.getloadavg())
    client = shutil.which("docker") or "/usr/bin/docker"
    imagekit = str(Path(sys.executable).parent / "imagekit")
    with tempfile.TemporaryDirectory(prefix="imagekit-bench-remote-") as tmp_name:
        tmp = Path(tmp_name)
        registry = start_registry(tmp / "registry", "none")
        try:
            base = push_base(client, registry.host)
            env = {**os.environ, **_workspace(tmp / "project")}
            # imagekit first: buildctl then builds the context imagekit staged, from the
            # rendered files imagekit kept in evidence (Dockerfile, checker) and the overlay.
            render = tmp / "render"
            results: dict[str, Any] = {}
            for name in ("imagekit", "buildctl"):
                daemon = start_buildkitd(tmp / f"bkd-{name}", [registry.host])
                repo = f"{registry.host}/bench/remote-{name}"
                try:
                    started = time.monotonic()
                    if name == "buildctl":
                        argv = [
                            BUILDCTL, "--addr", daemon.address, "build", "--progress=plain",
                            "--frontend=dockerfile.v0", f"--local=context={render}",
                            f"--local=dockerfile={render}", "--opt=platform=linux/amd64",
                            "--opt=force-network-mode=host", "--allow=network.host",
                            f"--secret=id=pip_ca,src={CA}",
                            f"--output=type=image,name={repo},push=true,push-by-digest=true",
                        ]  # fmt: skip
                    else:
                        argv = [
                            imagekit, "build", "demo", "--base", base.reference,
                            "--buildkit", daemon.address, "--push", repo, "--json",
                        ]  # fmt: skip
                    done = subprocess.run(  # noqa: S603 - fixed argv, no shell
                        argv, env=env, capture_output=True, text=True
                    )
                    seconds = time.monotonic() - started
                finally:
                    daemon.stop()
                if done.returncode != 0:
                    print(done.stderr[-3000:], file=sys.stderr)
                    return 3
                results[name] = {"seconds": round(seconds, 2)}
                if name == "imagekit":
                    doc = json.loads(done.stdout)
                    results[name]["assertions"] = doc["assertions"]["status"]
                    subprocess.run([client, "rmi", doc["pushed"]], capture_output=True)  # noqa: S603
                    render.mkdir()
                    for kept in ("Dockerfile", "imagekit-assert.json", "imagekit-assert.py"):
                        shutil.copy2(Path(doc["evidence_dir"]) / kept, render / kept)
                    shutil.copytree(
                        REPO_ROOT / "dockerfiles" / "demo" / "overlay", render / "overlay"
                    )
            subprocess.run([client, "rmi", base.reference], capture_output=True)  # noqa: S603
        finally:
            registry.stop()
    document = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(load),
        "plan": "demo",
        "results": results,
    }
    REPORT.write_json(args.out, document)
    peer, ours = results["buildctl"]["seconds"], results["imagekit"]["seconds"]
    REPORT.write_markdown(
        args.out,
        document,
        [
            "The demo plan on a fresh buildkitd each (empty root: the base pulled, every step "
            "run), pushed by digest to a loopback registry.",
            "",
            "| build | seconds |",
            "|---|---|",
            f"| `buildctl build` (the same context and flags) | {peer:.1f} |",
            f"| `imagekit build demo --buildkit` (render, probe, build, push, assertions "
            f"in the pushed image through the engine: {results['imagekit']['assertions']}, "
            f"ledger) | {ours:.1f} |",
            "",
            f"imagekit takes {ours - peer:.1f} s ({ours / peer:.1f}x) more than buildctl alone. "
            "The build itself is buildctl's, with the same flags; the difference is what "
            "imagekit adds around it, which includes the engine pulling the pushed image (the "
            "base's layers it already holds) to run the plan's assertions once more: the daemon "
            "is someone else's machine, so its in-build verdict is not taken on trust. The "
            "phases were not timed apart.",
        ],
    )
    print((args.out / "remote-build.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
