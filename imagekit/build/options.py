"""What a caller may choose about one build, whichever builder makes it.

Both builders (imagekit.build.buildkit on the engine, imagekit.build.assemble through the
registry) and the choice between them (imagekit.build.choice) read these options, so they
live apart from either builder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class BuildOptions:
    """What a caller may choose about one build; the plan decides everything else."""

    tag: str | None = None
    push: str | None = None
    no_cache: bool = False
    index_url: str | None = None
    ca_bundle: Path | None = None
    base_override: str | None = None
    #: engine (imagekit.build.buildkit), registry (imagekit.build.assemble) or auto
    #: (imagekit.build.choice).
    builder: str = "engine"
    index: bool = False  # registry builder: push an index holding the manifest too
    assertions: bool = True  # registry builder: false accepts the image unchecked
    sign_key: Path | None = None  # with push: sign SLSA v1 provenance beside the image
    #: a BuildKit daemon of its own (imagekit.build.remote): tcp:// or unix://, and its TLS files
    buildkit: str | None = None
    buildkit_ca: Path | None = None
    buildkit_cert: Path | None = None
    buildkit_key: Path | None = None
    #: a buildx builder by name (remote, kubernetes or docker-container driver), same flow
    buildx_builder: str | None = None
    #: a registry reference the --buildkit/--buildx-builder build imports its cache from and
    #: exports it to (type=registry, mode=max), so a fresh daemon reuses the layers
    cache_ref: str | None = None


#: the options that name a BuildKit of the build's own and its cache (a night takes them too)
DAEMON_OPTIONS = (
    "buildkit",
    "buildkit_ca",
    "buildkit_cert",
    "buildkit_key",
    "buildx_builder",
    "cache_ref",
)
