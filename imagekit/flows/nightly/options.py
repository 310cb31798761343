"""What a caller may choose about a night (`imagekit nightly`'s options); each plan decides
the rest."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from imagekit.builders.options import DaemonOptions


@dataclass(frozen=True)
class NightOptions(DaemonOptions):
    """What a caller may choose about a night; each plan decides the rest.

    The daemon options build the candidates on a BuildKit of their own (imagekit.builders.remote),
    as ``imagekit build --buildkit/--buildx-builder`` does: no engine builds, BuildKit pushes
    by digest; the engine still audits the pushed image. With one of those, ``cache_ref``:
    BuildKit's cache from and to this registry reference, so a fresh runner reuses layers.
    """

    base_override: str | None = None
    keep_images: bool = False
    candidate_registry: str | None = None
    #: a plan whose tag did not move is not rebuilt: the watch costs a HEAD and a GET a plan
    watch_only: bool = False
    #: where the proposed plan changes of ready candidates go, one NAME.diff each
    proposals_dir: Path | None = None
    #: apply those changes to the plans (and their committed renders)
    write_plans: bool = False

    def rebuild(self) -> str:
        """How a candidate is rebuilt, for a record's scope: where, and with which cache."""
        where = (
            f" on the buildx builder {self.buildx_builder}"
            if self.buildx_builder is not None
            else f" on the BuildKit daemon at {self.buildkit}"
            if self.buildkit is not None
            else ""
        )
        if self.remote and self.cache_ref is not None:
            return (
                f"a rebuild{where} with BuildKit's registry cache {self.cache_ref} (steps "
                "found there were not run again)"
            )
        return f"a rebuild without cache{where}"
