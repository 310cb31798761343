"""`imagekit build`: the engine builder or the registry builder, chosen for each plan.

A plan whose every step only lays files or metadata over the base (overlay, env, labels,
entrypoint, cmd) can be assembled through the registry (imagekit.builders.assemble.builder) with no
engine and no base pull; a pip or package step runs programs inside the image and needs the
engine (imagekit.builders.buildkit). ``auto`` picks the registry builder for the first kind
when a push target is given, since its image exists only in a registry; ``registry`` or
``engine`` force one, and an option only the other builder has is refused by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TextIO

from imagekit.builders.assemble.builder import assemble_plan, engine_steps
from imagekit.builders.assemble.result import AssembleOptions, AssembleResult
from imagekit.builders.buildkit import BuildResult, build_plan
from imagekit.builders.options import BuildOptions
from imagekit.builders.platforms import PlatformsResult, build_platforms
from imagekit.builders.remote import RemoteResult, build_remote, check_daemon_choice
from imagekit.errors import UsageError
from imagekit.plans.load import load_named_plan
from imagekit.plans.model import Plan
from imagekit.registry import RegistryClient
from imagekit.runtime.engine import Engine
from imagekit.workspace import Workspace

BUILDERS = ("auto", "registry", "engine")


def choose_builder(plan: Plan, requested: str, push: str | None) -> str:
    """``registry`` or ``engine`` for a requested ``auto``, ``registry`` or ``engine``."""
    if requested not in BUILDERS:
        raise UsageError(f"unknown builder {requested!r}", hint="one of: " + ", ".join(BUILDERS))
    if requested != "auto":
        return requested
    return "registry" if not engine_steps(plan) and push is not None else "engine"


def chosen_builder(plan: Plan, options: BuildOptions) -> str:
    """What :func:`build_image` builds ``plan`` with for ``options``: ``buildkit`` or
    ``buildx`` (a BuildKit of its own, named by the options), else ``registry`` or
    ``engine`` as :func:`choose_builder` picks. A flow that sets options per builder (the
    night) asks here, so it and ``imagekit build`` choose alike."""
    if options.buildx_builder is not None:
        return "buildx"
    if options.buildkit is not None:
        return "buildkit"
    return choose_builder(plan, options.builder, options.push)


Built = BuildResult | AssembleResult | RemoteResult | PlatformsResult


@dataclass(frozen=True)
class BuildRequest:
    """One build: the plan's name, the options (the builder, its push, its signing key) and
    where its log streams besides evidence/ (stderr by default)."""

    name: str
    options: BuildOptions = field(default_factory=BuildOptions)
    echo: TextIO | None = field(default=None, compare=False)


def build_image(
    workspace: Workspace,
    name: str,
    options: BuildOptions | None = None,
    *,
    engine: Engine | None = None,
    registry: RegistryClient | None = None,
    echo: TextIO | None = None,
) -> Built:
    """`imagekit build NAME` as a call of its own (the stage's :func:`run`, kept for the
    flows and scripts that name it)."""
    request = BuildRequest(name, options or BuildOptions(), echo)
    return run(workspace, request, engine=engine, registry=registry)


def run(
    workspace: Workspace,
    request: BuildRequest,
    *,
    engine: Engine | None = None,
    registry: RegistryClient | None = None,
) -> Built:
    """Build plan ``request.name`` with the builder ``request.options.builder`` names or
    ``auto`` picks.

    ``engine`` and ``registry`` are the caller's (one made for the call when None), so a flow
    that builds several plans hands the same ones to whichever builder each plan gets. Both
    results are BuiltImages: a caller reads them the same way whichever builder ran. A plan of
    several platforms goes to imagekit.builders.platforms, which refuses a builder that cannot.
    ``options.candidate`` (a night's) marks the build record as its candidate's.
    """
    name, options, echo = request.name, request.options, request.echo
    if check_daemon_choice(options):
        if options.builder not in ("auto", "engine") or options.index or not options.assertions:
            raise UsageError(
                "--buildkit and --buildx-builder build the plan's Dockerfile on that daemon; "
                "--builder registry, --index and --no-assertions are the registry builder's",
                hint="drop them, or drop --buildkit/--buildx-builder",
            )
        if load_named_plan(workspace, name, base_override=options.base_override).multi_platform:
            return build_platforms(workspace, name, options, registry=registry, echo=echo)
        return build_remote(workspace, name, options, echo=echo)
    loaded = load_named_plan(workspace, name, base_override=options.base_override)
    if loaded.multi_platform:
        return build_platforms(
            workspace, name, options, engine=engine, registry=registry, echo=echo
        )
    if choose_builder(loaded.plan, options.builder, options.push) == "engine":
        if options.index or not options.assertions:
            flag = "--index" if options.index else "--no-assertions"
            raise UsageError(
                f"{flag} is an option of the registry builder; the engine path runs the "
                "assertions inside the build and pushes what the engine made",
                hint="add --builder registry (the plan must have no pip or package steps)",
            )
        return build_plan(workspace, name, options, engine=engine, registry=registry, echo=echo)
    # The package index and CA bundle (often set in the environment) serve pip steps, which a
    # registry build has none of; --no-cache asked for explicitly is a mistake worth naming.
    if options.no_cache:
        raise UsageError(
            "--no-cache is an option of the engine builder; the registry builder runs no "
            "build step and keeps no build cache",
            hint="drop it, or add --builder engine",
        )
    return assemble_plan(
        workspace,
        name,
        AssembleOptions(
            push=options.push,
            tag=options.tag,
            base_override=options.base_override,
            index=options.index,
            assertions=options.assertions,
            sign_key=options.sign_key,
            candidate=options.candidate,
        ),
        client=registry,
        engine=engine,
        echo=echo,
    )
