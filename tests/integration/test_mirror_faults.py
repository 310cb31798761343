"""The fault matrix: a fault-injecting proxy in front of the real registry, DST read through it.

Transient faults (a connection dropped mid-blob, 503 and 429 with Retry-After, a slow drip)
must be survived by bounded retries and resume with the same verdict as without faults.
Corruption (a truncated body, flipped bytes, a lying Docker-Content-Digest) must end in
``error`` or ``mismatch`` naming the blob. No fault may ever produce a positive verdict.
Every case also asserts that its fault actually fired.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from imagekit.kinds.mirror import MirrorVerdict as Verdict
from imagekit.mirror import MirrorOptions, mirror
from imagekit.registry import RegistryClient, RetryPolicy
from imagekit.workspace import Workspace
from tests.support.faultproxy import Fault, FaultProxy
from tests.support.oci_layout import (
    Layer,
    make_tar,
    push_layout,
    push_new_image,
    skopeo_copy,
    tar_of,
)
from tests.support.registries import RunningRegistry

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def dst_registry(make_registry: Callable[..., RunningRegistry]) -> RunningRegistry:
    # A registry of its own: skopeo's blob-info cache would otherwise reuse SRC's blobs
    # instead of recompressing, and the "copy" would be identical.
    return make_registry()


@pytest.fixture(scope="module")
def images(
    registry: RunningRegistry,
    dst_registry: RunningRegistry,
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[str, str, str]:
    """SRC (gzip level 6, docker format) and a recompressed copy of it: (src, dst_repo, tag)."""
    tmp = tmp_path_factory.mktemp("faults")
    layers = [Layer.gzip(make_tar(100 + i, size=300_000)) for i in range(3)]
    src = f"{registry.host}/imagekit-test/faults-src:1"
    push_new_image(tmp / "layout", src, layers, "--format", "v2s2")
    # gzip at level 9 from the decompressed layers: other blobs, same content
    skopeo_copy(f"docker://{src}", f"dir:{tmp / 'plain'}", "--dest-decompress")
    dst_repo = "imagekit-test/faults-dst"
    skopeo_copy(
        f"dir:{tmp / 'plain'}",
        f"docker://{dst_registry.host}/{dst_repo}:1",
        "--dest-compress",
        "--dest-compress-level",
        "9",
    )
    return src, dst_repo, "1"


@pytest.fixture
def proxy(dst_registry: RunningRegistry) -> Iterator[FaultProxy]:
    running = FaultProxy(dst_registry.host).start()
    yield running
    running.stop()


def _verify(
    images: tuple[str, str, str], proxy: FaultProxy, workspace: Workspace
) -> tuple[Verdict, str, Path | None]:
    src, dst_repo, tag = images
    # Short waits so the matrix runs quickly; the attempts stay bounded as in production.
    client = RegistryClient(retry_policy=RetryPolicy(max_attempts=4, initial_wait=0.05))
    with client:
        report = mirror(
            src,
            f"{proxy.host}/{dst_repo}:{tag}",
            options=MirrorOptions(workers=2),
            workspace=workspace,
            client=client,
        )
    return report.verdict, report.message, report.evidence


def test_baseline_without_faults(
    images: tuple[str, str, str], proxy: FaultProxy, workspace: Workspace
) -> None:
    verdict, message, evidence = _verify(images, proxy, workspace)
    assert verdict is Verdict.CONTENT_IDENTICAL, message
    assert message == "same config, same 3 diffIDs, compressed blobs differ"
    assert evidence is not None and evidence.is_file()
    assert any("/blobs/" in e.path for e in proxy.log)


@pytest.mark.parametrize(
    "fault",
    [
        Fault("drop", after=20_000, times=2, only_full=True),
        Fault("status", status=503, retry_after="1", times=2),
        Fault("status", status=429, retry_after="0", times=1),
        Fault("status", status=503, path=r"/manifests/", times=1, retry_after="0"),
        Fault("drip", piece=16_384, delay=0.002, times=3),
        Fault("wrong_digest", times=3),  # on blobs: the bytes are checked, not the header
    ],
    ids=["drop-mid-blob", "503-retry-after", "429", "503-manifest", "drip", "blob-header"],
)
def test_transient_faults_are_survived_with_the_same_verdict(
    images: tuple[str, str, str], proxy: FaultProxy, workspace: Workspace, fault: Fault
) -> None:
    proxy.set_faults(fault)
    verdict, message, _ = _verify(images, proxy, workspace)
    assert proxy.fired() == fault.times
    assert verdict is Verdict.CONTENT_IDENTICAL, message
    if fault.kind == "drop":
        # resumed with Range where the connection broke, not downloaded again from 0
        resumed = [e.range for e in proxy.log if "/blobs/" in e.path and e.range]
        assert len(resumed) >= 2 and all(
            r.startswith("bytes=") and r != "bytes=0-" for r in resumed
        )


@pytest.mark.parametrize(
    ("fault", "names"),
    [
        (Fault("truncate", after=5_000, times=-1), "blob"),
        (Fault("flip", offset=10_000, times=-1), "blob"),
        (Fault("flip", offset=10_000, times=1), "blob"),
        (Fault("wrong_digest", path=r"/manifests/", times=-1), "Docker-Content-Digest"),
        (Fault("status", status=503, times=-1, retry_after="0"), "503"),
        (Fault("drop", after=1_000, times=-1), "broke off"),
    ],
    ids=["truncate", "flip-always", "flip-once", "manifest-digest", "503-forever", "drop-forever"],
)
def test_corruption_and_exhaustion_end_in_error_naming_the_blob(
    images: tuple[str, str, str],
    proxy: FaultProxy,
    workspace: Workspace,
    fault: Fault,
    names: str,
) -> None:
    proxy.set_faults(fault)
    verdict, message, evidence = _verify(images, proxy, workspace)
    assert proxy.fired() >= 1
    assert verdict in (Verdict.ERROR, Verdict.MISMATCH), message
    assert verdict not in (Verdict.IDENTICAL, Verdict.CONTENT_IDENTICAL)
    assert names in message
    if names == "blob":
        assert "sha256:" in message
    assert evidence is not None and evidence.is_file()


# ------------------------------------------------------------------ interrupts


@pytest.fixture(scope="module")
def slow_images(
    registry: RunningRegistry,
    dst_registry: RunningRegistry,
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[str, str, str]:
    """SRC and an identical DST with one 8 MiB incompressible layer a drip can slow down:
    (src, dst repository at dst_registry, the big layer's digest)."""
    tmp = tmp_path_factory.mktemp("slow")
    noise = random.Random(7).randbytes(8 << 20)  # noqa: S311 - test data, not a secret
    big = Layer.gzip(tar_of({"big.bin": noise}), level=1)
    layers = [big, Layer.gzip(make_tar(300)), Layer.gzip(make_tar(301))]
    src = push_new_image(tmp / "layout", f"{registry.host}/imagekit-test/slow-src:1", layers)
    dst_repo = "imagekit-test/slow-dst"
    push_layout(tmp / "layout", f"{dst_registry.host}/{dst_repo}:1")
    return src, dst_repo, "sha256:" + hashlib.sha256(big.blob).hexdigest()


IMAGEKIT = str(Path(sys.executable).parent / "imagekit")


def _signal_when(
    proc: subprocess.Popen[str], ready: Callable[[], bool], signum: int
) -> tuple[str, str, float]:
    """Signal the command once ``ready``; its output and the seconds it took to end."""
    deadline = time.monotonic() + 120
    try:
        while not ready():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the moment to interrupt never came"
            time.sleep(0.05)
        time.sleep(1.0)  # what was under way when it became ready finishes
        signalled = time.monotonic()
        if signum == signal.SIGINT:
            os.killpg(proc.pid, signum)  # Ctrl-C reaches the whole foreground group
        else:
            os.kill(proc.pid, signum)
        stdout, stderr = proc.communicate(timeout=60)
        return stdout, stderr, time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_verification_says_what_it_verified_and_records_no_verdict(
    slow_images: tuple[str, str, str],
    proxy: FaultProxy,
    workspace: Workspace,
    signum: int,
    code: int,
) -> None:
    src, dst_repo, big = slow_images
    proxy.set_faults(Fault("drip", path=f"/blobs/{big}", piece=65_536, delay=0.1, times=-1))
    argv = [IMAGEKIT, "mirror", "--verify-diffids", src, f"{proxy.host}/{dst_repo}:1", "--json"]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )

    def small_done() -> bool:
        # the config and the two small layers answered; the big one is dripping
        answered = [e for e in proxy.log if "/blobs/" in e.path and big not in e.path]
        return len(answered) >= 3 and proxy.fired("drip") >= 1

    stdout, stderr, stopped_in = _signal_when(proc, small_done, signum)
    assert stopped_in < 8, f"the verification went on for {stopped_in:.1f} s after the signal"
    assert proc.returncode == code, stderr
    document = json.loads(stdout)["interrupted"]  # exactly one JSON document
    assert document["signal"] == signal.Signals(signum).name and document["exit_code"] == code
    so_far = document["so_far"]
    assert so_far["layers_total"] == 3
    verified = so_far["layers_verified"]
    assert 1 <= len(verified) < 3 and all(layer["match"] for layer in verified)
    assert big not in [layer["destination_digest"] for layer in verified]
    partial = Path(document["evidence"])
    assert partial.name == "mirror-report.partial.json"
    saved = json.loads(partial.read_text())
    assert saved["partial"] is True and saved["verdict"] is None
    assert saved["layers"] == verified
    assert not workspace.ledger_path.exists()  # no verdict recorded
    assert "interrupted" in stderr


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_copy_stops_at_once_and_cancels_its_upload_session(
    slow_images: tuple[str, str, str],
    registry: RunningRegistry,
    make_registry: Callable[..., RunningRegistry],
    workspace: Workspace,
    signum: int,
    code: int,
) -> None:
    """Stopped at once: the big blob is not fetched to its end and uploaded after the signal,
    and its session is cancelled rather than left open."""
    src, _, big = slow_images
    target = make_registry()
    uploads = target.storage / "data" / "docker/registry/v2/repositories/team/copy/_uploads"
    with FaultProxy(registry.host) as slow_src:
        slow_src.set_faults(Fault("drip", path=f"/blobs/{big}", piece=65_536, delay=0.1, times=-1))
        source = src.replace(registry.host, slow_src.host)
        proc = subprocess.Popen(
            [IMAGEKIT, "mirror", "--copy", source, f"{target.host}/team/copy:1", "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip

        def session_open() -> bool:
            return slow_src.fired("drip") >= 1 and uploads.is_dir() and any(uploads.iterdir())

        stdout, stderr, stopped_in = _signal_when(proc, session_open, signum)
    assert proc.returncode == code, stderr
    assert json.loads(stdout)["interrupted"]["signal"] == signal.Signals(signum).name
    # The drip sends 8 MiB in about 13 s: stopping at once is well under that.
    assert stopped_in < 8, f"the copy went on for {stopped_in:.1f} s after the signal"
    # A cancelled session loses its data and start time; distribution 2.8 then rewrites
    # the hash state (blobWriter.Cancel closes after removing, see
    # https://github.com/distribution/distribution/pull/4869), so only that may remain.
    left = [p.relative_to(uploads) for p in uploads.rglob("*") if p.name in ("data", "startedat")]
    assert left == [], "an upload session was left open on the registry"
    assert not workspace.ledger_path.exists()
