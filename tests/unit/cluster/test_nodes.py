"""Which nodes `gpu-preflight --all-nodes` runs on: enough allocatable GPUs, not cordoned."""

from __future__ import annotations

from decimal import Decimal

from imagekit.cluster.nodes import NodeInfo, choose, said

GPU = "nvidia.com/gpu"


def test_nodes_with_enough_allocatable_gpus_are_chosen_sorted_the_rest_set_aside_with_why() -> None:
    nodes = [
        NodeInfo("gpu-c", {GPU: "8", "cpu": "96"}),
        NodeInfo("gpu-a", {GPU: "8"}),
        NodeInfo("gpu-b", {GPU: "4"}),  # a node with fewer GPUs than asked
        NodeInfo("cpu-only", {"cpu": "32"}),  # no device plugin: no nvidia.com/gpu at all
        NodeInfo("gpu-d", {GPU: "8"}, unschedulable=True),  # cordoned by an administrator
    ]
    choice = choose(nodes, GPU, 8)
    assert choice.chosen == ("gpu-a", "gpu-c")
    assert dict(choice.skipped) == {
        "gpu-b": f"allocatable {GPU} 4 < 8",
        "cpu-only": f"allocatable {GPU} 0 < 8",
        "gpu-d": "cordoned (spec.unschedulable): it takes no new pods",
    }
    assert choice.matched == 5


def test_no_node_is_no_choice() -> None:
    choice = choose([], GPU, 1)
    assert (choice.chosen, choice.skipped, choice.matched) == ((), (), 0)


def test_a_quantity_is_read_as_kubernetes_writes_it() -> None:
    assert NodeInfo("n", {GPU: "2k"}).amount(GPU) == Decimal(2000)
    assert NodeInfo("n", {}).amount(GPU) == 0


def test_a_selector_is_said_as_kubectl_takes_it() -> None:
    assert said({"pool": "h100", "zone": "b"}) == "pool=h100,zone=b"
