"""docs/walkthrough-cluster.md, run as written on the test cluster.

The page's ```sh blocks are the walkthrough: they are taken from the page with the fence
pattern the documents' command check uses (tests/unit/test_docs_commands.py), joined in order
and run by bash (``set -euo pipefail``). The page's plain block of settings is the user's to
adapt and is not run: the test gives the same variables its own values. KUBECONFIG is the test
cluster's, HOME is empty, R is the session's registry (with the session's base image as BASE),
and M is a second loopback registry the kubelet trusts. The stand-in GPU patch is the page's
own block, and the test undoes it afterwards.

What the page promises, checked here:
- the kubelet's imageID names the digest the audit named, in M;
- the records are there (build, push, mirror, the audit and the kubelet's final pull bound to
  one pod, the preflight bound to the Job's pod) and the ledger verifies;
- the lock has the audit, the preflight and the final pull;
- no pod, Job or ConfigMap of imagekit's is left.
The time of each command is kept in the test's output (``-s`` shows it).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from imagekit.ledger import read_records
from imagekit.workspace import Workspace
from tests.support.base_image import BaseImage
from tests.support.cluster import TOOLS, Cluster
from tests.support.registries import RunningRegistry
from tests.unit.test_docs_commands import _FENCE

REPO = Path(__file__).resolve().parents[3]
PAGE = REPO / "docs" / "walkthrough-cluster.md"
MANAGED = "app.kubernetes.io/managed-by=imagekit"


def walkthrough() -> list[str]:
    """The page's ```sh blocks, in order."""
    text = PAGE.read_text(encoding="utf-8")
    return [m.group(2) for m in _FENCE.finditer(text) if m.group(0).startswith("```sh\n")]


def _timings(trace: Path) -> list[tuple[float, str]]:
    """Each traced command's wall time (until the next one started), from bash's xtrace
    lines ``+ EPOCHREALTIME COMMAND``; the last one ends at the trace file's last write."""
    marks: list[tuple[float, str]] = []
    for line in trace.read_text(errors="replace").splitlines():
        head, _, command = line.lstrip("+").strip().partition(" ")
        try:
            marks.append((float(head), command))
        except ValueError:
            continue
    ends = [t for t, _ in marks[1:]] + [trace.stat().st_mtime]
    return [(end - start, command) for (start, command), end in zip(marks, ends, strict=True)]


def test_the_page_has_the_steps_it_says() -> None:
    script = "\n".join(walkthrough())
    for step in ("imagekit build demo", "imagekit mirror --copy", "imagekit audit",
                 "imagekit gpu-preflight", "imagekit ledger verify", "imagekit ledger lock",
                 "kubectl get pods"):  # fmt: skip
        assert step in script, step


def test_the_walkthrough_runs_on_our_cluster(
    cluster: Cluster,
    base_image: BaseImage,
    registry: RunningRegistry,
    make_registry: Callable[..., RunningRegistry],
    workspace: Workspace,
    created_refs: list[str],
    tmp_path: Path,
) -> None:
    mirror = make_registry("none")
    cluster.trust_registry(mirror.host)
    walk = tmp_path / "walk"
    walk.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    trace = tmp_path / "trace"
    environment = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        "HOME": str(home),
        "PATH": f"{REPO / '.venv' / 'bin'}:{TOOLS}:{os.environ['PATH']}",
        "R": registry.host,
        "M": mirror.host,
        "BASE": base_image.reference,
    }
    script = "\n".join(
        ["set -euo pipefail", f"exec 3>{trace}", "BASH_XTRACEFD=3",
         "PS4='+ $EPOCHREALTIME '", "set -x", *walkthrough()]
    )  # fmt: skip
    try:
        done = subprocess.run(
            ["bash", "-c", script], cwd=walk, env=environment, capture_output=True,
            text=True, timeout=1200, check=False,
        )  # fmt: skip
    finally:
        cluster.advertise_gpus(0)
        built = walk / "build.json"
        if built.exists():
            tag = json.loads(built.read_text()).get("tag")
            if tag:
                created_refs.append(str(tag))
    (tmp_path / "stdout").write_text(done.stdout)  # kept with the test's tmp_path
    (tmp_path / "stderr").write_text(done.stderr)
    timings = _timings(trace)
    shown = "\n".join(f"{seconds:7.1f} s  {command}" for seconds, command in timings)
    print(f"\nthe walkthrough's commands, timed:\n{shown}")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-6000:] + cluster.tails()
    assert "Traceback" not in done.stderr

    pushed = json.loads((walk / "build.json").read_text())["pushed"]
    digest = pushed.rpartition("@")[2]
    final = f"{mirror.host}/imagekit/demo@{digest}"
    assert pushed == f"{registry.host}/imagekit/demo@{digest}"

    records = read_records(workspace.ledger_path)
    kinds = [r.kind for r in records]
    for wanted in ("build", "mirror-verify", "audit", "final-pull", "gpu-preflight"):
        assert wanted in kinds, kinds
    audit = next(r for r in records if r.kind == "audit")
    pulled = next(r for r in records if r.kind == "final-pull")
    preflight = next(r for r in records if r.kind == "gpu-preflight")
    # The kubelet's imageID beside the audit's digest: the pod ran what was audited.
    pod = audit.details["pod"]
    assert isinstance(pod, dict)
    print(f"audit digest: {digest}\nkubelet imageID: {pod['image_id']}")
    assert pod["image_id"] == final, (pod, final)
    assert audit.status == "CPU_PASS" and audit.plan == "demo"
    assert audit.details["image_id"] == digest
    assert pulled.status == "verified" and pulled.plan == "demo"
    assert pulled.details["pod_uid"] == pod["uid"] and pulled.details["image_id"] == digest
    assert (preflight.status, preflight.plan) == ("GPU_PREFLIGHT_INCOMPLETE", "demo")
    assert preflight.details["where"] == "pod" and preflight.details["node"] == cluster.node_name
    assert preflight.images == {"image": final}
    assert f"ledger ok: {len(records)} records" in done.stdout, done.stdout

    lock: dict[str, Any] = json.loads((walk / "images.lock.json").read_text())["images"]["demo"]
    assert lock["audit"]["status"] == "CPU_PASS", lock["audit"]
    assert lock["gpu_preflight_status"]["status"] == "GPU_PREFLIGHT_INCOMPLETE", lock
    # The final pull is the kubelet's (source "pod"), of the mirror's name for the digest.
    pull = lock["final_pull"]
    assert (pull["source"], pull["status"], pull["where"]) == (
        "pod", "verified", cluster.node_name,
    ), pull  # fmt: skip
    assert (pull["reference"], pull["image_id"]) == (final, digest), pull
    # ... and beside the engine's and containerd's pulls (none here), naming its pod.
    beside = lock["final_pulls"]
    assert beside["pod"]["pod_uid"] == pod["uid"], beside
    assert beside["engine"] == beside["containerd"] == "not-recorded", beside
    assert '"audit"' in done.stdout and '"gpu_preflight_status"' in done.stdout  # the jq view

    # Nothing left: the page's kubectl found nothing, nor does a look across namespaces.
    assert "No resources found" in done.stderr, done.stderr[-2000:]
    for kind in ("pods", "jobs", "configmaps"):
        left = cluster.kubectl_json("get", kind, "-A", "-l", MANAGED)["items"]
        assert left == [], [item["metadata"]["name"] for item in left]
