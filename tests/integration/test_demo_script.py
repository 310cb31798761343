"""`make demo` as a user runs it: scripts/demo.sh, the README's main walkthrough, for real.

Scripts have no package, so this sits beside the other tests of the whole (as the unit tests
of the CI files sit beside the unit tests of the package). The script runs in this checkout
with its state folder moved under tmp_path (IMAGEKIT_DEMO_STATE) and its two registries on
ports the test picked, so that a user's .demo/ (key pair, ledger, registries on 5101/5102) is
never read or touched. Everything it starts is real: Debian's docker-registry, the engine,
BuildKit, imagekit, cosign.

What the walkthrough promises and the test holds it to: exit 0 only when the pipeline passed,
the ledger verifies and the gate accepts both R's image and M's copy (default policy and the
demo's policy) and cosign verifies the final image's attestations; the ledger gets this run's
records; a second run reuses the key pair and the registries; `--purge` stops the
registries it started. And it fails closed: in that second run the public key is another
key's, so the gate refuses and the script exits non-zero, though the pipeline itself passed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from imagekit.ledger import read_records
from tests.support.engine_refs import remember_images
from tests.support.registries import free_port

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "demo.sh"
#: The kinds one demo run appends, in order (its vulnerability scan is recorded too).
RUN_KINDS = ["build", "audit", "vulnerability-scan", "push", "mirror-verify", "final-pull"]
COSIGN_TYPES = 3  # audit, SLSA provenance, final pull


@dataclass(frozen=True)
class DemoState:
    """Where one test's demo keeps everything, and the ports of its registries R and M."""

    state: Path
    registry_port: int
    mirror_port: int

    def env(self) -> dict[str, str]:
        # None of the caller's IMAGEKIT_* settings: the script sets the ones it needs.
        environment = {k: v for k, v in os.environ.items() if not k.startswith("IMAGEKIT_")}
        environment.update(
            IMAGEKIT_DEMO_STATE=str(self.state),
            IMAGEKIT_DEMO_REGISTRY_PORT=str(self.registry_port),
            IMAGEKIT_DEMO_MIRROR_PORT=str(self.mirror_port),
        )
        return environment

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SCRIPT), *args],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
            env=self.env(),
        )

    def registry_pids(self) -> list[int]:
        return [int(p.read_text()) for p in sorted(self.state.glob("*/registry.pid"))]


def _answers(port: int) -> bool:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2)  # noqa: S310
    except OSError:
        return False
    return True


def _running(pid: int) -> bool:
    """Alive and not a zombie waiting for its reaper."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[DemoState]:
    """A state folder and two free ports; whatever happens, --purge at the end (and the
    registries this test's script started are stopped by pid if --purge did not)."""
    user_demo = REPO / ".demo"
    user_listing = sorted(os.listdir(user_demo)) if user_demo.is_dir() else None
    ports = (free_port(), free_port())
    while ports[1] == ports[0]:
        ports = (ports[0], free_port())
    state = DemoState(tmp_path / "demo-state", *ports)
    try:
        yield state
    finally:
        pids = state.registry_pids() if state.state.is_dir() else []
        state.run("--purge")
        for pid in pids:
            if _running(pid):
                os.kill(pid, 15)
    # The checkout's own .demo/ is as it was.
    assert (sorted(os.listdir(user_demo)) if user_demo.is_dir() else None) == user_listing


def _engine_refs(demo: DemoState, done: subprocess.CompletedProcess[str]) -> list[str]:
    """What the run left in the engine under names of its own: the pipeline's build tag, its
    push tag and final pull (from the newest summary), and the base's name in R."""
    refs: list[str] = []
    summaries = sorted((demo.state / "evidence" / "demo" / "pipeline").glob("*/pipeline.json"))
    if summaries:
        remember_images(json.loads(summaries[-1].read_text()), refs)
    base = re.search(r"^demo: base: (\S+)$", done.stderr, re.M)
    if base:
        refs.append(base[1])
    return refs


def _blocks(stdout: str) -> dict[str, list[str]]:
    """The script's output by section: header (between ``== ``/`` ==``) -> its lines."""
    blocks: dict[str, list[str]] = {}
    current: list[str] = []
    for line in stdout.splitlines():
        header = re.fullmatch(r"== (.+) ==", line)
        if header:
            current = blocks.setdefault(header[1], [])
        else:
            current.append(line)
    return blocks


def _final_and_pushed(demo: DemoState) -> tuple[str, str]:
    summary = sorted((demo.state / "evidence" / "demo" / "pipeline").glob("*/pipeline.json"))[-1]
    doc = json.loads(summary.read_text())
    push = next(s for s in doc["stages"] if s["stage"] == "push")
    return push["data"]["pushed"], doc["final_reference"]


def _gate_headers(demo: DemoState, ref: str) -> tuple[str, str]:
    public = demo.state / "signing.pub"
    plain = f"imagekit verify {ref} --key {public}"
    return plain, f"{plain} --policy {demo.state / 'policy.yaml'}"


def _passes(demo: DemoState, done: subprocess.CompletedProcess[str], records_before: int) -> int:
    """Everything one passing run must show; returns the ledger's length after it."""
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "Traceback" not in done.stderr
    blocks = _blocks(done.stdout)
    pushed, final = _final_and_pushed(demo)
    digest = pushed.rpartition("@")[2]
    assert pushed == f"127.0.0.1:{demo.registry_port}/imagekit/demo@{digest}"
    assert final == f"127.0.0.1:{demo.mirror_port}/imagekit/demo@{digest}"  # a copy: identical
    # The ledger: this run's records, then `ledger verify` over all of them.
    ledger = demo.state / "ledger.jsonl"
    records = read_records(ledger)
    added = records[records_before:]
    assert [r.kind for r in added] == RUN_KINDS, [r.kind for r in added]
    assert all(r.plan == "demo" for r in added)
    listed = [ln for ln in blocks[f"ledger records this run added ({ledger})"] if ln.strip()]
    assert [ln.split()[1] for ln in listed] == RUN_KINDS, listed
    verified = [ln for ln in blocks["imagekit ledger verify"] if ln.strip()]
    assert verified[0].startswith(f"ledger ok: {len(records)} records, "), verified
    # The gate, from the registries alone: R's image and M's copy, both policies.
    for ref in (pushed, final):
        plain, with_policy = _gate_headers(demo, ref)
        for header in (plain, with_policy):
            assert blocks[header][0] == f"{ref}: ACCEPTED", blocks[header][:6]
        assert any(
            ln.strip().startswith("HOLDS  provenance from plan demo on base sha256:")
            for ln in blocks[with_policy]
        ), blocks[with_policy]
    mirror_scope = next(ln for ln in blocks[_gate_headers(demo, final)[0]] if "scope:" in ln)
    assert f"through a signed mirror binding: identical to {pushed}" in mirror_scope
    # cosign reads the same attestations of the final image.
    cosign = blocks[
        "the same proof, read by cosign (key pairs: no transparency log; loopback: plain HTTP)"
    ]
    assert [ln.strip() for ln in cosign if "->" in ln] == ["-> verified"] * COSIGN_TYPES, cosign
    return len(records)


def test_make_demo_passes_then_a_key_not_the_signers_fails_it_and_purge_stops_its_registries(
    demo: DemoState, tmp_path: Path, created_refs: list[str]
) -> None:
    """One state folder, two runs (a third whole pipeline would cost the suite half a
    minute): the first makes the key pair and passes; before the second, the public key is
    swapped for another key's. The second reuses the pair it finds (the private key is not
    made again, the registries are reused) and its pipeline passes, but every gate and every
    cosign check must refuse and the script exit non-zero: it fails closed."""
    first = demo.run()
    created_refs.extend(_engine_refs(demo, first))
    assert "demo: made the demo's signing key pair" in first.stderr
    after_first = _passes(demo, first, 0)
    private = (demo.state / "signing.key").read_bytes()
    pids = demo.registry_pids()
    assert len(pids) == 2 and all(_running(p) for p in pids)

    other = subprocess.run(
        [sys.executable, "-m", "imagekit", "keys", "generate", str(tmp_path / "other")],
        capture_output=True, text=True, check=False, env=demo.env(),
    )  # fmt: skip
    assert other.returncode == 0, other.stderr
    (demo.state / "signing.pub").write_bytes((tmp_path / "other.pub").read_bytes())

    second = demo.run()
    created_refs.extend(_engine_refs(demo, second))
    # The same key pair file and the same registries, reused; nothing made again.
    assert "signing key pair" not in second.stderr
    assert (demo.state / "signing.key").read_bytes() == private
    assert (demo.state / "signing.pub").read_bytes() == (tmp_path / "other.pub").read_bytes()
    for port in (demo.registry_port, demo.mirror_port):
        assert f"already answers on 127.0.0.1:{port} (reused)" in second.stderr
    assert demo.registry_pids() == pids
    records = read_records(demo.state / "ledger.jsonl")
    assert [r.kind for r in records[after_first:]] == RUN_KINDS
    # It is the gate that says no: the pipeline itself passed.
    assert second.returncode != 0, second.stdout[-4000:]
    assert "Traceback" not in second.stderr
    assert "pipeline demo: complete" in second.stdout
    blocks = _blocks(second.stdout)
    pushed, final = _final_and_pushed(demo)
    for ref in (pushed, final):
        for header in _gate_headers(demo, ref):
            assert blocks[header][0] == f"{ref}: REFUSED", blocks[header][:6]
    cosign = [
        ln.strip()
        for ln in blocks[
            "the same proof, read by cosign (key pairs: no transparency log; loopback: plain HTTP)"
        ]
        if "->" in ln
    ]
    assert len(cosign) == COSIGN_TYPES and all(ln.startswith("-> refused (exit ") for ln in cosign)
    assert "ACCEPTED" not in second.stdout and "-> verified" not in second.stdout

    purged = demo.run("--purge")
    assert purged.returncode == 0, purged.stderr
    assert not demo.state.exists()
    deadline = time.monotonic() + 10
    while any(_running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_running(p) for p in pids), f"registry processes left behind: {pids}"
    assert not _answers(demo.registry_port) and not _answers(demo.mirror_port)


@pytest.mark.parametrize("holder", ["checkout", "above"])
def test_purge_refuses_a_state_folder_that_holds_the_repository(
    tmp_path: Path, holder: str
) -> None:
    """--purge deletes the state folder: IMAGEKIT_DEMO_STATE naming the repository or a folder
    above it is refused (exit 2) before anything is deleted. Tried on a copy of the scripts,
    so that a broken guard deletes only the copy."""
    checkout = tmp_path / "above" / "checkout"
    shutil.copytree(REPO / "scripts", checkout / "scripts")
    state = checkout if holder == "checkout" else checkout.parent
    environment = {k: v for k, v in os.environ.items() if not k.startswith("IMAGEKIT_")}
    done = subprocess.run(
        [str(checkout / "scripts" / "demo.sh"), "--purge"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**environment, "IMAGEKIT_DEMO_STATE": str(state)},
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"demo: IMAGEKIT_DEMO_STATE must name a folder of its own, not {state} "
        "(it holds the repository)\n"
    )
    assert (checkout / "scripts" / "demo.sh").is_file()
