"""The library's calls, in one calling convention, for scripts, CI jobs and notebooks.

``import imagekit`` hands these out lazily (imagekit/__init__.py); docs/API.md shows each
with an example. Underneath, every stage is run as ``run(workspace, request)``; these calls
are thin and all alike, for a script that would rather not build a request itself:

- the subject first (a reference, two references, a plan name), then ``options`` (the
  stage's options object, or None for its defaults), then ``workspace``: None means the
  current directory's (``Workspace.from_env()``: the same folders the CLI would use there,
  moved by the ``IMAGEKIT_*`` variables);
- ``platform`` as ``"os/arch[/variant]"`` or a ``Platform``, checked before anything runs;
- ``record``, keyword only, True by default wherever recording is optional (a mirror
  verification, a final pull); an audit and a build always record, their records being
  part of what they prove;
- every result has ``.ok``, ``.exit_code`` (the CLI's for the same outcome) and
  ``.to_json()`` (what ``--json`` prints); a failure that is not a verdict raises an
  ``ImagekitError`` whose class gives the exit code.

Each call makes its stage's request and runs it the one way every stage is run (the CLI and
the pipeline too): ``run(workspace, request)``; nothing here changes what a stage does.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from imagekit.errors import UsageError
from imagekit.refs import Platform, parse_platform
from imagekit.workspace import Workspace

if TYPE_CHECKING:
    from imagekit.audit.stage import AuditRequest, AuditResult
    from imagekit.builders.built import BuiltImage
    from imagekit.builders.options import BuildOptions
    from imagekit.gpu.stage import PreflightRequest, PreflightResult
    from imagekit.mirror import MirrorOptions, MirrorReport
    from imagekit.plans.model import LoadedPlan
    from imagekit.pull import PullResult
    from imagekit.registry import ResolvedImage

# verify_image (attestations checked against a policy, from the registry alone) is
# imagekit.gate.verify's own function: the face hands it out as it is.


def _workspace(workspace: Workspace | None) -> Workspace:
    return workspace if workspace is not None else Workspace.from_env()


def _platform(platform: str | Platform | None) -> Platform | None:
    """A platform given either way, parsed (ReferenceFormatError, exit 2) before any request."""
    if platform is None or isinstance(platform, Platform):
        return platform
    return parse_platform(platform)


def inspect_image(reference: str, *, platform: str | Platform | None = None) -> ResolvedImage:
    """What ``reference`` resolves to in its registry: manifest, config and ``.layers``,
    each checked against its digest. A malformed reference raises before any request."""
    from imagekit.inspect import inspect_image as inspect

    wanted = _platform(platform)
    return inspect(reference, platform=str(wanted) if wanted else None)


def audit_image(
    reference: str,
    options: AuditRequest | None = None,
    workspace: Workspace | None = None,
    *,
    platform: str | Platform | None = None,
) -> AuditResult:
    """Audit the image ``reference`` (local, or pulled by digest) inside a container with no
    network; writes the evidence and appends the ``audit`` and ``vulnerability-scan``
    records. ``options`` is an ``AuditRequest`` whose ``ref`` this call sets."""
    from imagekit.audit import stage
    from imagekit.audit.stage import AuditRequest

    request = replace(options, ref=reference) if options else AuditRequest(ref=reference)
    if request.host:
        raise UsageError(
            "audit_image audits an image; the host audit is `imagekit audit --host`",
            hint="give AuditRequest(host=False), the default",
        )
    wanted = _platform(platform)
    if wanted is not None:
        request = replace(request, platform=str(wanted))
    return stage.run(_workspace(workspace), request)


def verify_mirror(
    source: str,
    destination: str,
    options: MirrorOptions | None = None,
    workspace: Workspace | None = None,
    *,
    platform: str | Platform | None = None,
    record: bool = True,
) -> MirrorReport:
    """Verify that ``destination`` holds the content of ``source``, layer by layer by diffID
    (with ``MirrorOptions(copy=True)`` copy it first). The report's ``.verdict`` says what was
    proved; a bad reference raises before any request. ``record=False`` (or ``options`` with
    ``record=False``) appends no ``mirror-verify`` record."""
    from imagekit import mirror
    from imagekit.mirror import MirrorOptions, MirrorRequest

    options = options or MirrorOptions()
    wanted = _platform(platform)
    options = replace(
        options,
        record=options.record and record,
        platform=wanted if wanted is not None else options.platform,
    )
    return mirror.run(_workspace(workspace), MirrorRequest(source, destination, options))


def load_plan(
    name: str, workspace: Workspace | None = None, *, base: str | None = None
) -> LoadedPlan:
    """Plan ``name`` of the workspace, validated, with the exact bytes it was read from;
    ``base`` replaces its base (pinned by digest, as ``imagekit build --base``)."""
    from imagekit.plans.load import load_named_plan

    return load_named_plan(_workspace(workspace), name, base_override=base)


def build_image(
    name: str, options: BuildOptions | None = None, workspace: Workspace | None = None
) -> BuiltImage:
    """Build plan ``name`` with the builder ``options.builder`` names (``auto`` by default
    here, as on the command line): the build and push records are appended; a build step,
    guard or assertion that says no raises ``BuildRejected``."""
    from imagekit.builders import choice
    from imagekit.builders.options import BuildOptions

    request = choice.BuildRequest(name, options or BuildOptions(builder="auto"))
    return choice.run(_workspace(workspace), request)


def final_pull(
    reference: str,
    workspace: Workspace | None = None,
    *,
    expect_digest: str | None = None,
    record: bool = True,
    plan: str | None = None,
    where: str | None = None,
) -> PullResult:
    """Pull ``reference`` through the engine and check that it holds exactly that image
    (image ID and repo digests against the registry's). A mismatch is a result (``.ok``
    False, recorded), not an exception."""
    from imagekit import pull

    request = pull.PullRequest(reference, expect_digest, record=record, plan=plan, where=where)
    return pull.run(_workspace(workspace), request)


def gpu_preflight(
    reference: str | None,
    options: PreflightRequest | None = None,
    workspace: Workspace | None = None,
    *,
    record: bool = True,
) -> PreflightResult:
    """Preflight the image ``reference`` on this node's GPUs (through the engine, no network;
    ``None`` with ``PreflightRequest(host=True)``: this Python environment, no image
    claimed). ``options`` is a ``PreflightRequest`` whose ``reference`` this call sets; its
    ``options`` holds the expectations (``ProbeOptions(expect=Expectations(gpus=8))``). The
    verdict (``.status``: GPU_PREFLIGHT_PASS, _FAIL, _INCOMPLETE) is a result, not an
    exception; a ``gpu-preflight`` record is appended unless ``record=False``."""
    from imagekit.gpu import stage
    from imagekit.gpu.stage import PreflightRequest

    request = options or PreflightRequest()
    request = replace(request, reference=reference, record=request.record and record)
    return stage.run(_workspace(workspace), request)
