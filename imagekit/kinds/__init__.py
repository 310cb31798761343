"""Every kind of ledger record, registered once.

A kind's whole description (its details model, statuses, failed statuses, signed predicate
and how ``ledger sync`` imports it, its lock column, the detail keys naming its image, and
the requirement a policy may make of it) is its :class:`~imagekit.kinds.spec.KindSpec`, in
the kind's own module here. :data:`KINDS` registers them, and the ledger (imagekit.ledger.
record), ``ledger sync``, the lock, the policy model and the gate derive from it; no other
module lists kinds. Adding a stage: docs/ARCHITECTURE.md, "Adding a stage".

The order is the order of the policy file's keys and of the gate's requirements.
"""

from __future__ import annotations

from imagekit.kinds.audit import AUDIT
from imagekit.kinds.build import BUILD, REJECTED_BUILD
from imagekit.kinds.final_pull import FINAL_PULL
from imagekit.kinds.gpu_preflight import GPU_PREFLIGHT
from imagekit.kinds.mirror import MIRROR
from imagekit.kinds.note import NOTE
from imagekit.kinds.push import PUSH
from imagekit.kinds.spec import KindSpec
from imagekit.kinds.vulnerability_scan import VULNERABILITY_SCAN

KINDS: tuple[KindSpec, ...] = (
    BUILD,
    REJECTED_BUILD,
    AUDIT,
    VULNERABILITY_SCAN,
    PUSH,
    MIRROR,
    FINAL_PULL,
    GPU_PREFLIGHT,
    NOTE,
)

_BY_NAME = {spec.name: spec for spec in KINDS}
_BY_PREDICATE = {spec.predicate.uri: spec for spec in KINDS if spec.predicate is not None}
NAMES: tuple[str, ...] = tuple(_BY_NAME)


def kind(name: str) -> KindSpec:
    """The spec of the kind NAME; KeyError for a kind nobody registered."""
    return _BY_NAME[name]


def by_predicate(predicate_type: str) -> KindSpec | None:
    """The kind whose verdicts are signed as PREDICATE_TYPE, or None."""
    return _BY_PREDICATE.get(predicate_type)
