"""One whole night of the upstream watch, for docs/nightly.md:
`python -m tests.support.watch_night OUT`.

The same parts as tests/integration/flows/test_nightly_watch.py, all in one night: two real
registries on loopback, the demo base pushed by the engine, an upstream repository whose
tags point at images stacked on it (tests/support/upstream.py), five copies of the demo
plan that watch those tags, and their accepted images (the demo copy by a whole pipeline,
the overlay-only copies by a registry build, an audit and a final pull). Then upstream
moves: ``bookworm`` to a base with toml 0.10.2 instead of 0.10.1, ``rebuilt`` to a base
whose av/about.py changed, ``doomed`` is deleted, ``stable`` stays. The night is the real
command line (``imagekit nightly --proposals ... --markdown ... --json``), then
``imagekit plans bump demo-watch`` applies one proposal.

OUT receives summary.md (the job summary), night.json, the proposals, bump.diff,
commands.txt (what ran, with exit codes, start times and durations) and night.stderr.txt
(imagekit's own progress lines from the night; the engine's BuildKit progress is left out,
as it names the engine's default registry for local tags), with the project's temporary
folder written as ``$PROJECT``. Everything it started is stopped and removed at the end:
both registries, their storage and the project, and every engine image or container under
the two registries' loopback addresses or named ``imagekit/<plan>`` that was not there
before; what could not be removed is printed, and the exit code is then 1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from imagekit.audit.stage import AuditRequest, audit
from imagekit.builders.assemble import AssembleOptions, assemble_plan
from imagekit.flows.pipeline import PipelineOptions, run_pipeline
from imagekit.plans.render import render_plans
from imagekit.pull import final_pull
from imagekit.runtime.engine import connect
from imagekit.workspace import Workspace
from tests.support.base_image import push_base
from tests.support.registries import RunningRegistry, start_registry
from tests.support.upstream import Upstream, file_layer, package_layer

ROOT = Path(__file__).resolve().parents[2]
AV_ABOUT = "usr/lib/python3/dist-packages/av/about.py"
DEMO_REFERENCE = (
    "127.0.0.1:5000/imagekit-test/base@sha256:"
    "52f6e63cdccafc5631f9415e9d779bd9546a50b263c76fe417ac474c068f6fb6"
)


def _plan(ws: Workspace, name: str, reference: str, tag: str, *, pip: bool) -> None:
    """The demo plan's text under another name, pinned to ``reference``, watching ``tag``."""
    text = (ROOT / "manifests" / "demo.yaml").read_text()
    text = text.replace("name: demo\n", f"name: {name}\n").replace(DEMO_REFERENCE, reference)
    text = text.replace("found_as: bookworm", f"found_as: {tag}")
    if not pip:  # the overlay-only variant: what a registry build can do alone
        text = text.replace("  - kind: pip_install\n    requirements:\n      - six==1.16.0\n", "")
        text = text.replace("find_spec: [six, av, numpy]", "find_spec: [av, numpy]")
    (ws.plans_dir / f"{name}.yaml").write_text(text)
    shutil.copytree(ROOT / "dockerfiles" / "demo", ws.dockerfiles_dir / name)


PLANS = ("demo-watch", "overlay-watch", "drift-watch", "steady-watch", "gone-watch")


def _engine_lines(client: str, *args: str) -> list[str]:
    answer = subprocess.run([client, *args], capture_output=True, text=True, check=True)
    return [line for line in answer.stdout.splitlines() if line.strip()]


def _images(client: str) -> set[str]:
    """Every name the engine knows an image by: repo:tag and repo@digest."""
    names: set[str] = set()
    fmt = "{{.Repository}}\t{{.Tag}}\t{{.Digest}}"
    for line in _engine_lines(client, "images", "--digests", "--format", fmt):
        repository, tag, digest = line.split("\t")
        if repository == "<none>":
            continue
        if tag != "<none>":
            names.add(f"{repository}:{tag}")
        if digest != "<none>":
            names.add(f"{repository}@{digest}")
    return names


def _ours(name: str, hosts: list[str]) -> bool:
    return any(name.startswith(f"{host}/") for host in hosts) or any(
        name.startswith((f"imagekit/{plan}:", f"imagekit/{plan}@")) for plan in PLANS
    )


def _clean_engine(client: str, hosts: list[str], before: set[str]) -> list[str]:
    """Remove the containers and images this night made; what is left of them."""
    for line in _engine_lines(client, "ps", "-a", "--format", "{{.ID}}\t{{.Image}}"):
        container, image = line.split("\t")
        if _ours(image, hosts) and image not in before:
            subprocess.run([client, "rm", "-f", container], capture_output=True, check=False)
    made = sorted(n for n in _images(client) - before if _ours(n, hosts))
    for name in made:
        subprocess.run([client, "rmi", name], capture_output=True, check=False)
    return sorted(n for n in _images(client) - before if _ours(n, hosts))


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    engine = connect()
    before = _images(engine.client_path)
    tmp = Path(tempfile.mkdtemp(prefix="imagekit-watch-night-"))
    registries: list[RunningRegistry] = []
    log: list[str] = []
    leftover: list[str] = []
    started = time.monotonic()
    try:
        upstream_registry = start_registry(tmp / "registry-r")
        mirror = start_registry(tmp / "registry-m")
        registries += [upstream_registry, mirror]
        base = push_base(engine.client_path, upstream_registry.host)
        up = Upstream(upstream_registry.host, "upstream/bookworm", base.repository, base.digest)
        v1 = up.stack(package_layer("toml==0.10.1"))
        v2 = up.stack(package_layer("toml==0.10.2"))
        drifted = up.stack(
            file_layer(AV_ABOUT, b'__version__ = "10.0.0"\nIMAGEKIT_UPSTREAM = 2\n'), on=v1
        )
        doomed = up.stack(file_layer("etc/imagekit-doomed", b"soon gone\n"), on=v1)
        for tag, ref in (("bookworm", v1), ("rebuilt", v1), ("stable", v1), ("doomed", doomed)):
            up.tag(tag, ref)

        ws = Workspace.at(tmp / "project")
        for folder in ("manifests", "dockerfiles", "evidence"):
            (ws.root / folder).mkdir(parents=True)
        _plan(ws, "demo-watch", v1, "bookworm", pip=True)
        _plan(ws, "overlay-watch", v1, "bookworm", pip=False)
        _plan(ws, "drift-watch", v1, "rebuilt", pip=False)
        _plan(ws, "steady-watch", v1, "stable", pip=False)
        _plan(ws, "gone-watch", doomed, "doomed", pip=False)
        render_plans(ws, None)

        accepted = run_pipeline(
            ws, "demo-watch", PipelineOptions(registry=upstream_registry.host, mirror=mirror.host)
        )
        if not accepted.ok or accepted.final_reference is None:
            print(json.dumps([s.to_json() for s in accepted.stages], default=str))
            return 1
        for name in ("overlay-watch", "steady-watch"):
            built = assemble_plan(
                ws, name, AssembleOptions(push=f"{upstream_registry.host}/team/{name}")
            )
            audit(ws, AuditRequest(ref=built.pushed, plan=name))
            if not final_pull(ws, built.pushed, record=True, plan=name).ok:
                return 1

        log.append(
            "# before the night (library calls, not commands): the base pushed, upstream "
            "stacked, 5 plans written; demo-watch accepted by a whole pipeline, overlay-watch "
            "and steady-watch by a registry build, an audit and a final pull: "
            f"{time.monotonic() - started:.1f} s"
        )
        # Upstream moves overnight.
        up.tag("bookworm", v2)
        up.tag("rebuilt", drifted)
        up.delete(doomed)
        up.close()

        env = {**os.environ, "IMAGEKIT_ROOT": str(ws.root)}
        for var in ("IMAGEKIT_PLANS_DIR", "IMAGEKIT_DOCKERFILES_DIR", "IMAGEKIT_EVIDENCE_DIR"):
            env.pop(var, None)
        env["IMAGEKIT_LEDGER"] = str(ws.ledger_path)
        imagekit = str(Path(sys.executable).parent / "imagekit")
        proposals = ws.root / "proposals"
        night_cmd = [imagekit, "nightly", "--proposals", str(proposals), "--markdown",
                     str(ws.root / "summary.md"), "--json"]  # fmt: skip
        night = _command(log, night_cmd, env, "nightly --proposals proposals "
                         "--markdown summary.md --json")  # fmt: skip
        bump = _command(log, [imagekit, "plans", "bump", "demo-watch"], env,
                        "plans bump demo-watch")  # fmt: skip
        log.append(bump.stderr.strip())

        def clean(text: str) -> str:
            return text.replace(str(ws.root), "$PROJECT")

        (out / "summary.md").write_text(clean((ws.root / "summary.md").read_text()))
        (out / "night.json").write_text(clean(night.stdout))
        own = [ln for ln in night.stderr.splitlines() if ln.startswith(("nightly:", "imagekit:"))]
        (out / "night.stderr.txt").write_text(clean("\n".join(own)) + "\n")
        (out / "bump.diff").write_text(clean(bump.stdout))
        (out / "commands.txt").write_text(clean("\n".join(log)) + "\n")
        for item in sorted(proposals.glob("*.diff")) if proposals.exists() else []:
            (out / f"proposal-{item.name}").write_text(clean(item.read_text()))
        print(clean("\n".join(log)))
    finally:
        hosts = [registry.host for registry in registries]
        leftover = _clean_engine(engine.client_path, hosts, before)
        for registry in registries:
            registry.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        leftover += [str(tmp)] if tmp.exists() else []
        for name in leftover:
            print(f"watch_night: could not remove {name}", file=sys.stderr)
    return 1 if leftover else 0


def _command(
    log: list[str], argv: list[str], env: dict[str, str], shown: str
) -> subprocess.CompletedProcess[str]:
    """Run one imagekit command; log it as ``$ imagekit SHOWN``, its start, exit and time."""
    at, started = _stamp(), time.monotonic()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    log.append(f"$ imagekit {shown}")
    log.append(f"started {at}, exit {done.returncode} after {time.monotonic() - started:.1f} s")
    return done


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "watch-night")))
