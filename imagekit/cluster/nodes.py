"""The nodes a step runs on: listed from the API server by a label selector, each with how
much of an extended resource it can give and whether it takes new pods.

``choose`` keeps the nodes whose *allocatable* amount of the resource (``nvidia.com/gpu``:
what the device plugin advertises, less what the kubelet reserves) is at least the asked
count, and sets aside, each with why, the nodes that match the selector but cannot take the
work: too few of the resource, or cordoned (``spec.unschedulable``: an administrator took it
out of service; the scheduler places nothing new there). A node that is not Ready is kept:
its pod stays Pending and the step says so in the scheduler's words, which is the truth about
that node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from imagekit.cluster.connection import Connection
from imagekit.cluster.runner import api_errors


@dataclass(frozen=True)
class NodeInfo:
    """A node as the API server lists it: its name, what it can allocate, whether cordoned."""

    name: str
    allocatable: Mapping[str, str]
    unschedulable: bool = False

    def amount(self, resource: str) -> Decimal:
        """The allocatable amount of ``resource`` (0 when the node does not advertise it)."""
        from lightkube.utils.quantity import parse_quantity

        given = self.allocatable.get(resource)
        found = parse_quantity(given) if given else None
        return found if found is not None else Decimal(0)


@dataclass(frozen=True)
class NodeChoice:
    """The nodes chosen (by name, sorted) and those the selector matched but set aside."""

    chosen: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]  # (node, why)

    @property
    def matched(self) -> int:
        return len(self.chosen) + len(self.skipped)


def choose(nodes: Iterable[NodeInfo], resource: str, at_least: int) -> NodeChoice:
    """The nodes with ``at_least`` allocatable ``resource`` that take new pods."""
    chosen: list[str] = []
    skipped: list[tuple[str, str]] = []
    for node in sorted(nodes, key=lambda n: n.name):
        amount = node.amount(resource).normalize()
        if amount < at_least:
            skipped.append((node.name, f"allocatable {resource} {amount:f} < {at_least}"))
        elif node.unschedulable:
            skipped.append((node.name, "cordoned (spec.unschedulable): it takes no new pods"))
        else:
            chosen.append(node.name)
    return NodeChoice(tuple(chosen), tuple(skipped))


def list_nodes(connection: Connection, selector: Mapping[str, str]) -> list[NodeInfo]:
    """The nodes whose labels hold every ``selector`` pair (all nodes for an empty one)."""
    from lightkube.resources.core_v1 import Node

    described = f"the nodes labelled {said(selector)}" if selector else "all nodes"
    with api_errors(f"listing {described}"):
        found = list(connection.client.list(Node, labels=dict(selector) or None))
    return [_info(node) for node in found]


def _info(node: Any) -> NodeInfo:
    status, spec = node.status, node.spec
    return NodeInfo(
        name=str(node.metadata.name),
        allocatable=dict(status.allocatable or {}) if status is not None else {},
        unschedulable=bool(spec is not None and spec.unschedulable),
    )


def said(selector: Mapping[str, str]) -> str:
    """A selector as kubectl's ``-l`` takes it (``pool=a,zone=b``)."""
    return ",".join(f"{key}={value}" for key, value in selector.items())
