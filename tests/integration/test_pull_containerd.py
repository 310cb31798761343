"""The final pull where Kubernetes pulls: a real containerd (its CRI plugin on), real registry.

Every identifier imagekit records is checked here against what Debian's own ``ctr`` reports
(``ctr -n k8s.io images ls``, ``ctr content get``, ``ctr snapshots info``), read with this
file's own simple parsing and hashing, not imagekit's.

No kubelet runs here (there is no Kubernetes on these machines), so the pod documents are
written by the tests in the shape the kubelet gives them with containerd: ``image`` as in the
spec, ``imageID`` as the CRI plugin names the image, which the tests derive from ``ctr``'s
listing by the CRI's rule (the image's names with a digest, in sort order, first).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from imagekit.ledger import append_record, read_records, verify
from imagekit.runtime.engine import Engine
from imagekit.workspace import Workspace
from tests.support.containerd import RunningContainerd
from tests.support.oci_layout import Layer, LayoutWriter, config_for, push_through_api, tar_of
from tests.support.registries import RunningRegistry
from tests.support.tiny_image import TinyImage, run_imagekit

pytestmark = pytest.mark.integration

NODE = "gpu-node-07"


@dataclass(frozen=True)
class TwoPlatformIndex:
    repository: str
    index_digest: str
    amd64_manifest: str
    amd64_config: str
    amd64_diff_ids: tuple[str, ...]
    arm64_manifest: str
    arm64_config: str

    @property
    def by_index(self) -> str:
        return f"{self.repository}@{self.index_digest}"


@pytest.fixture(scope="module")
def two_platform_index(
    registry: RunningRegistry, tmp_path_factory: pytest.TempPathFactory
) -> TwoPlatformIndex:
    """An index pushed through the registry API: a two-layer linux/amd64 image, a one-layer
    linux/arm64/v8 image and a BuildKit-style attestation entry."""
    salt = secrets.token_hex(4)
    writer = LayoutWriter(tmp_path_factory.mktemp("cri-index"))
    amd64 = [
        Layer.gzip(tar_of({"etc/imagekit/base.txt": f"base {salt}\n".encode()})),
        Layer.gzip(tar_of({"opt/app/hello.txt": f"amd64 {salt}\n".encode()})),
    ]
    arm64 = [Layer.gzip(tar_of({"opt/app/hello.txt": f"arm64 {salt}\n".encode()}))]
    amd64_config = config_for(amd64, arch="amd64")
    arm64_config = config_for(arm64, arch="arm64", extra={"variant": "v8"})
    amd64_entry = {
        **writer.image(amd64, amd64_config),
        "platform": {"os": "linux", "architecture": "amd64"},
    }
    arm64_entry = {
        **writer.image(arm64, arm64_config),
        "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"},
    }
    entries = [amd64_entry, arm64_entry, writer.attestation(amd64_entry)]
    top = writer.index(entries, tag="multi")
    repository = f"{registry.host}/imagekit-test/cri-{salt}"
    push_through_api(writer.root, top, f"{repository}:multi")
    return TwoPlatformIndex(
        repository=repository,
        index_digest=top["digest"],
        amd64_manifest=amd64_entry["digest"],
        amd64_config=_sha256(amd64_config),
        amd64_diff_ids=tuple(layer.diff_id for layer in amd64),
        arm64_manifest=arm64_entry["digest"],
        arm64_config=_sha256(arm64_config),
    )


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _chain_id(diff_ids: tuple[str, ...]) -> str:
    # https://github.com/opencontainers/image-spec/blob/main/config.md#layer-chainid
    chain = diff_ids[0]
    for diff_id in diff_ids[1:]:
        chain = _sha256(f"{chain} {diff_id}".encode())
    return chain


def _ctr_images(containerd: RunningContainerd) -> dict[str, str]:
    """name -> target digest from `ctr -n k8s.io images ls` (REF, TYPE, DIGEST come first)."""
    done = containerd.ctr("images", "ls")
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.decode().splitlines()[1:] if line.strip()]
    return {row[0]: row[2] for row in rows}


def _ctr_blob(containerd: RunningContainerd, digest: str) -> bytes:
    done = containerd.ctr("content", "get", digest)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _kubelet_image_id(images: dict[str, str], targets: set[str]) -> str:
    """The CRI rule: of the names of one image that carry a digest, the first in order."""
    return sorted(name for name, target in images.items() if target in targets and "@" in name)[0]


def _pod(path: Path, *, node: str, image: str, image_id: str) -> Path:
    """A pod as `kubectl get pod -o json` prints it from a kubelet running containerd."""
    document: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "zero-gpu-probe", "namespace": "serving", "uid": "0f6d1c52"},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [{"name": "server", "image": image}],
        },
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "server",
                    "image": image,
                    "imageID": image_id,
                    "containerID": "containerd://" + secrets.token_hex(32),
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "state": {"running": {"startedAt": "2026-12-03T10:00:00Z"}},
                }
            ],
        },
    }
    path.write_text(json.dumps(document))
    return path


def _pull(containerd: RunningContainerd, ref: str, *args: str) -> dict[str, Any]:
    result = run_imagekit(
        "pull", ref, "--runtime", "containerd", "--address", containerd.address, *args, "--json"
    )
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def _record_pod(pod: Path, *args: str) -> tuple[int, dict[str, Any]]:
    result = run_imagekit("ledger", "record-pod", str(pod), *args, "--json")
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def test_an_index_pulled_by_digest_through_containerd(
    containerd: RunningContainerd,
    two_platform_index: TwoPlatformIndex,
    workspace: Workspace,
    tmp_path: Path,
) -> None:
    index = two_platform_index
    assert index.by_index not in _ctr_images(containerd)
    document = _pull(containerd, index.by_index, "--record", "--where", NODE)
    assert document["status"] == "verified", document["checks"]

    # What imagekit recorded, against what ctr itself reports.
    images = _ctr_images(containerd)
    assert images[index.by_index] == index.index_digest == document["target_digest"]
    # The CRI plugin's own record of the image ID: the config digest, pointing at the pull.
    assert images[index.amd64_config] == index.index_digest
    assert document["image_id"] == index.amd64_config
    index_bytes = _ctr_blob(containerd, index.index_digest)
    assert _sha256(index_bytes) == index.index_digest
    listed = {m["digest"] for m in json.loads(index_bytes)["manifests"]}
    assert {index.amd64_manifest, index.arm64_manifest} <= listed
    manifest = json.loads(_ctr_blob(containerd, index.amd64_manifest))
    assert document["platform"] == "linux/amd64"
    assert document["platform_manifest_digest"] == index.amd64_manifest
    assert manifest["config"]["digest"] == document["config_digest"] == index.amd64_config
    # containerd fetched only the host platform: the arm64 manifest is not in its store.
    assert containerd.ctr("content", "get", index.arm64_manifest).returncode != 0
    chain = _chain_id(index.amd64_diff_ids)
    assert chain != index.amd64_diff_ids[-1]  # two layers: a real chain, not one diffID
    assert document["chain_id"] == document["chain_id_reported"] == chain
    snapshot = containerd.ctr("snapshots", "--snapshotter", "overlayfs", "info", chain)
    assert snapshot.returncode == 0, snapshot.stderr
    assert json.loads(snapshot.stdout)["Kind"] == "Committed"
    kubelet = _kubelet_image_id(images, {index.index_digest})
    assert kubelet == index.by_index == document["kubelet_image_ref"]

    (record,) = read_records(workspace.ledger_path)
    assert record.kind == "final-pull" and record.status == "verified"
    assert record.images == {"image": index.by_index}
    d = record.details
    assert (d["source"], d["image_store"], d["where"]) == ("containerd", "containerd-cri", NODE)
    assert d["image_id"] == index.amd64_config and "CRI image ID" in d["image_id_means"]
    assert d["target_digest"] == index.index_digest and d["chain_id"] == chain
    assert d["containerd"]["namespace"] == "k8s.io"
    assert record.evidence is not None and (workspace.root / record.evidence.path).is_file()

    # The pod, as the kubelet reports it: named by the index, matched against that pull.
    pod = _pod(tmp_path / "pod.json", node=NODE, image=index.by_index, image_id=kubelet)
    code, report = _record_pod(pod, "--against-final-pull")
    assert code == 0, report
    (container,) = report["containers"]
    assert container["status"] == "verified" and container["final_pull_seq"] == record.seq
    assert "not by its linux/amd64 manifest" in container["reason"]
    # Expecting the platform manifest (what the registry client resolves to) says no: an
    # index pulled by digest is named by the index.
    code, report = _record_pod(pod, "--expect", index.amd64_manifest)
    assert code == 1 and report["containers"][0]["status"] == "mismatch"

    # The same CRI image under its platform manifest's name, and under its bare image ID.
    for image_id in (f"{index.repository}@{index.amd64_manifest}", index.amd64_config):
        same = _pod(tmp_path / "same.json", node=NODE, image=index.by_index, image_id=image_id)
        code, report = _record_pod(same, "--against-final-pull")
        assert code == 0, report
    # The other platform's image, and a pod on a node that never recorded a pull: never ok.
    other = f"{index.repository}@{index.arm64_manifest}"
    arm = _pod(tmp_path / "arm.json", node=NODE, image=other, image_id=other)
    code, report = _record_pod(arm, "--against-final-pull")
    assert code == 1 and report["containers"][0]["status"] == "mismatch"
    away = _pod(tmp_path / "away.json", node="gpu-node-99", image=index.by_index, image_id=kubelet)
    code, report = _record_pod(away, "--against-final-pull")
    assert code == 1 and report["containers"][0]["status"] == "unknown"
    assert verify(workspace).ok


def test_the_platform_manifest_pulled_too_joins_the_same_cri_image(
    containerd: RunningContainerd, two_platform_index: TwoPlatformIndex, workspace: Workspace
) -> None:
    index = two_platform_index
    _pull(containerd, index.by_index)
    by_manifest = f"{index.repository}@{index.amd64_manifest}"
    document = _pull(containerd, by_manifest, "--record", "--where", NODE)
    assert document["status"] == "verified", document["checks"]
    assert document["target_digest"] == document["platform_manifest_digest"]
    assert document["image_id"] == index.amd64_config
    # One config, two names: the CRI plugin keeps both, the kubelet shows the first.
    assert {index.by_index, by_manifest} <= set(document["cri_references"])
    images = _ctr_images(containerd)
    kubelet = _kubelet_image_id(images, {index.index_digest, index.amd64_manifest})
    assert document["kubelet_image_ref"] == kubelet == min(index.by_index, by_manifest)


def test_a_tag_that_names_other_content_is_a_mismatch_record(
    containerd: RunningContainerd, two_platform_index: TwoPlatformIndex, workspace: Workspace
) -> None:
    wrong = "sha256:" + "0" * 64
    tagged = f"{two_platform_index.repository}:multi"
    result = run_imagekit(
        "pull", tagged, "--expect-digest", wrong, "--runtime", "containerd",
        "--address", containerd.address, "--record", "--json",
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    document = json.loads(result.stdout)
    failed = {c["name"] for c in document["checks"] if not c["ok"]}
    assert failed == {"registry digest", "containerd image target"}
    assert _ctr_images(containerd)[tagged] == two_platform_index.index_digest
    (record,) = read_records(workspace.ledger_path)
    assert record.status == "mismatch" and record.details["expected_manifest_digest"] == wrong


def test_a_containerd_that_does_not_answer_is_exit_3(
    workspace: Workspace, tmp_path: Path, two_platform_index: TwoPlatformIndex
) -> None:
    result = run_imagekit(
        "pull", two_platform_index.by_index, "--runtime", "containerd",
        "--address", str(tmp_path / "no-containerd.sock"), "--record",
    )  # fmt: skip
    assert result.returncode == 3
    assert "does not answer" in result.stderr and "start containerd" in result.stderr
    assert "Traceback" not in result.stderr
    assert not workspace.ledger_path.exists()


def test_engine_and_containerd_final_pulls_side_by_side(
    engine: Engine,
    containerd: RunningContainerd,
    tiny_image: TinyImage,
    workspace: Workspace,
    tmp_path: Path,
) -> None:
    # The build and push that made the image (a real `docker import` and `docker push` in the
    # fixture), on record so the lock knows the plan's image.
    append_record(
        workspace,
        "build",
        plan="tiny",
        images={"image": f"{tiny_image.repository}:v1"},
        status="built",
        scope="docker import of a one-file tar (the test's own image)",
        details={"image_id": tiny_image.config_digest},
    )
    append_record(
        workspace,
        "push",
        plan="tiny",
        images={"image": f"{tiny_image.repository}:v1", "pushed": tiny_image.pinned},
        status="pushed",
        scope="docker push to the loopback registry",
        details={
            "manifest_digest": tiny_image.digest,
            "config_digest": tiny_image.config_digest,
        },
    )
    engine_pull = run_imagekit("pull", tiny_image.pinned, "--plan", "tiny", "--record", "--json")
    assert engine_pull.returncode == 0, engine_pull.stderr
    document = _pull(containerd, tiny_image.pinned, "--plan", "tiny", "--record", "--where", NODE)
    assert document["status"] == "verified", document["checks"]
    assert document["chain_id"] == tiny_image.diff_id  # one layer: the chain is its diffID
    images = _ctr_images(containerd)
    assert images[tiny_image.pinned] == tiny_image.digest
    assert images[tiny_image.config_digest] == tiny_image.digest
    assert _sha256(_ctr_blob(containerd, tiny_image.config_digest)) == tiny_image.config_digest

    lock = run_imagekit("ledger", "lock", "--json")
    assert lock.returncode == 0, lock.stderr
    pulls = json.loads(lock.stdout)["lock"]["images"]["tiny"]["final_pulls"]
    assert pulls["engine"]["status"] == pulls["containerd"]["status"] == "verified"
    assert pulls["containerd"]["image_id"] == tiny_image.config_digest
    assert pulls["containerd"]["image_store"] == "containerd-cri"
    assert pulls["containerd"]["kubelet_image_ref"] == tiny_image.pinned
    assert "CRI image ID" in pulls["containerd"]["image_id_means"]
    if engine.image_store == "classic":
        assert pulls["engine"]["image_id"] == tiny_image.config_digest
        assert "classic store" in pulls["engine"]["image_id_means"]
    else:
        assert pulls["engine"]["image_id"] == tiny_image.digest

    pod = _pod(
        tmp_path / "pod.json",
        node=NODE,
        image=tiny_image.pinned,
        image_id=_kubelet_image_id(images, {tiny_image.digest}),
    )
    code, report = _record_pod(pod, "--plan", "tiny", "--against-final-pull")
    assert code == 0, report
    assert "manifest" in report["containers"][0]["reason"]
    assert verify(workspace).ok
