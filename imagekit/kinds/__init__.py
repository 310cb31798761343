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

#: the kinds' names in the registry's order, as they were when the package was imported
NAMES: tuple[str, ...] = tuple(spec.name for spec in KINDS)

_Index = tuple[tuple[KindSpec, ...], dict[str, KindSpec], dict[str, KindSpec]]
_index: _Index | None = None


def _indexed() -> _Index:
    """KINDS by name and by predicate type, read again whenever KINDS is another tuple
    (a kind registered by a test module, with no other file touched)."""
    global _index  # noqa: PLW0603 - a cache of KINDS, rebuilt when it is rebound
    if _index is None or _index[0] is not KINDS:
        by_name = {spec.name: spec for spec in KINDS}
        by_predicate = {s.predicate.uri: s for s in KINDS if s.predicate is not None}
        _index = (KINDS, by_name, by_predicate)
    return _index


def names() -> tuple[str, ...]:
    """Every registered kind's name, in the registry's order."""
    return tuple(_indexed()[1])


def kind(name: str) -> KindSpec:
    """The spec of the kind NAME; KeyError for a kind nobody registered."""
    return _indexed()[1][name]


def by_predicate(predicate_type: str) -> KindSpec | None:
    """The kind whose verdicts are signed as PREDICATE_TYPE, or None."""
    return _indexed()[2].get(predicate_type)
