"""What a caller may choose about one build, whichever builder makes it.

Every builder (imagekit.builders.buildkit on the engine, imagekit.builders.assemble through the
registry, a BuildKit of its own) and the choice between them (imagekit.builders.choice) read
these options, so they live apart from either builder. The options naming a BuildKit of the
build's own are declared once (:class:`DaemonOptions`), for a build and for a night.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any


@dataclass(frozen=True, kw_only=True)
class DaemonOptions:
    """A BuildKit of the build's own (imagekit.builders.remote) and its cache: what ``imagekit
    build`` and a night (imagekit.flows.nightly) both take, named by keyword."""

    #: a BuildKit daemon of its own (imagekit.builders.remote): tcp:// or unix://, and its TLS files
    buildkit: str | None = None
    buildkit_ca: Path | None = None
    buildkit_cert: Path | None = None
    buildkit_key: Path | None = None
    #: a buildx builder by name (remote, kubernetes or docker-container driver), same flow
    buildx_builder: str | None = None
    #: a registry reference the --buildkit/--buildx-builder build imports its cache from and
    #: exports it to (type=registry, mode=max), so a fresh daemon reuses the layers; steps it
    #: finds there are not run again (a night says so in its record)
    cache_ref: str | None = None

    @property
    def remote(self) -> bool:
        """Whether the build runs on a BuildKit of its own."""
        return self.buildkit is not None or self.buildx_builder is not None

    def daemon(self) -> dict[str, Any]:
        """These options by name, to hand on (a night's, to the builds of its candidates)."""
        return {f.name: getattr(self, f.name) for f in fields(DaemonOptions)}


@dataclass(frozen=True)
class BuildOptions(DaemonOptions):
    """What a caller may choose about one build; the plan decides everything else."""

    tag: str | None = None
    push: str | None = None
    no_cache: bool = False
    index_url: str | None = None
    ca_bundle: Path | None = None
    base_override: str | None = None
    #: engine (imagekit.builders.buildkit), registry (imagekit.builders.assemble) or auto
    #: (imagekit.builders.choice).
    builder: str = "engine"
    index: bool = False  # registry builder: push an index holding the manifest too
    assertions: bool = True  # registry builder: false accepts the image unchecked
    sign_key: Path | None = None  # with push: sign SLSA v1 provenance beside the image
    #: a night's candidate (imagekit.flows.nightly): the nightly-... tag it is built for; its
    #: build record says so (BuildDetails.candidate), so it is never taken for accepted
    candidate: str | None = None
