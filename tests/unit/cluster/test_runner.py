"""imagekit.cluster.runner's reading of a pod: its phase, node, imageIDs and, while it is not
done, the scheduler's or the kubelet's reason (documents as the API server writes them)."""

from __future__ import annotations

from typing import Any

from imagekit.cluster.runner import PodRef, PodState

REF = PodRef("default", "p", "uid-1")


def _state(status: dict[str, Any], **spec: Any) -> PodState:
    document = {"metadata": {"name": "p", "uid": "uid-1"}, "spec": spec, "status": status}
    return PodState(REF, document)


def test_an_unscheduled_pod_names_the_schedulers_reason() -> None:
    state = _state(
        {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
                }
            ],
        }
    )
    assert not state.finished and state.node is None
    assert state.reason == (
        "not scheduled (Unschedulable): 0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    )


def test_a_pull_error_names_the_kubelets_message() -> None:
    waiting = {"reason": "ErrImagePull", "message": "failed to pull: not found"}
    state = _state(
        {
            "phase": "Pending",
            "containerStatuses": [{"name": "main", "imageID": "", "state": {"waiting": waiting}}],
        },
        nodeName="n1",
    )
    assert state.reason == "container main ErrImagePull: failed to pull: not found"
    assert state.image_ids == {"main": ""}


def test_creating_is_no_reason_and_a_finished_pod_gives_its_image_ids() -> None:
    creating = {"waiting": {"reason": "ContainerCreating"}}
    assert _state({"containerStatuses": [{"name": "m", "state": creating}]}).reason is None
    done = _state(
        {
            "phase": "Succeeded",
            "initContainerStatuses": [{"name": "i", "imageID": "r/i@sha256:" + "1" * 64}],
            "containerStatuses": [{"name": "m", "imageID": "r/m@sha256:" + "2" * 64}],
        },
        nodeName="n1",
    )
    assert done.finished and done.node == "n1" and done.phase == "Succeeded"
    assert done.image_ids == {"i": "r/i@sha256:" + "1" * 64, "m": "r/m@sha256:" + "2" * 64}


def test_a_failed_container_says_its_exit_code() -> None:
    ended = {"terminated": {"exitCode": 3, "reason": "Error"}}
    state = _state({"phase": "Failed", "containerStatuses": [{"name": "m", "state": ended}]})
    assert state.finished and state.reason == "container m exited 3 (Error)"
