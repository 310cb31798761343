"""Render a plan into a Dockerfile: deterministic text, reviewed as a diff when committed.

The same plan bytes (and base) always give the same Dockerfile bytes: nothing here reads the
clock, the host or the environment. The output uses only the Dockerfile frontend built into
BuildKit (no ``# syntax=`` line, which would make every build pull a frontend image), and:

- ``FROM --platform=P repo@sha256:...``: the base is content, never a tag (a plan of several
  platforms renders ``$TARGETPLATFORM``: each build takes its own image of the base index);
- each overlay is preceded by a guard RUN step that checks the file it replaces (its sha256,
  or that nothing is there) and fails with a grep-able ``IMAGEKIT_OVERLAY_DRIFT path=...
  expected=... actual=...`` line, so a base whose file changed under the patch stops the build
  before the COPY instead of clobbering newer upstream code;
- pip steps see the package index URL and the host CA bundle only through the BuildKit secret
  mounts ``pip_index`` and ``pip_ca`` (under /run/secrets/), so neither is written into a
  layer, the image's environment or its history. (A build argument would not do: BuildKit
  records every ARG in scope in the history's ``created_by`` of each later RUN, so
  ``docker history`` shows ``|1 PIP_INDEX_URL=...``; seen with Docker 20.10's BuildKit.)
  Without those secrets pip uses its defaults;
- system packages are removed by exact name after checking each is installed and that apt
  would remove nothing else (apt treats an unknown name with a '.' as a regex);
- the labels org.opencontainers.image.base.name / base.digest
  (https://github.com/opencontainers/image-spec/blob/main/annotations.md) and
  io.imagekit.plan / io.imagekit.plan-sha256 (the sha256 of the plan file's exact bytes);
- the plan's assertions as the last RUN step: imagekit's checker
  (imagekit/plans/assert_checker.py, standard-library Python 3.8) prints one
  ``IMAGEKIT_ASSERT_PASS``/``IMAGEKIT_ASSERT_FAIL`` line a check and exits 1 if any failed.
  What a plan commits is data: its checks as JSON beside the Dockerfile
  (dockerfiles/NAME/imagekit-assert.json, sorted keys, reviewed as a diff). The checker itself
  is one file of the package, never committed per plan: every build stages it into its context
  as imagekit-assert.py (:meth:`Rendered.context_files`), and the build record and provenance
  pin its sha256 with the rendered files'. The step reaches both through BuildKit bind mounts
  from the build context (``RUN --mount=type=bind,source=imagekit-assert.py,target=/tmp/...``):
  neither is copied into a layer, and the build log and image history show one short RUN line
  instead of a whole script (BuildKit echoes every RUN line into the log). The bind mount is in
  the Dockerfile frontend built into BuildKit, so it too needs no ``# syntax=`` line. The
  targets sit in /tmp, a folder every image has: Docker 20.10's BuildKit removes a file's
  mount point afterwards but keeps any folder it had to create for it, which would leave an
  empty folder in the image and show up as a change in `imagekit nightly`.

`imagekit render` writes exactly the files a plan renders to: a file under a rendered or staged
name that the plan does not render (an imagekit-assert.py committed by an earlier imagekit, or
the JSON of a plan that no longer asserts anything) is removed and said so, and `render --check`
reports it stale, so no stale checker stays in a commit.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from imagekit.errors import BaseDigestTruncated, PlanError
from imagekit.evidence import write_bytes
from imagekit.plans.load import load_plan, plan_path
from imagekit.plans.model import Assertions, LoadedPlan
from imagekit.plans.steps import (
    RENDERED_FILES,
    STAGED_FILES,
    Cmd,
    Entrypoint,
    Env,
    Labels,
    Overlay,
    PipInstall,
    PipUninstall,
    RemoveSystemPackages,
)
from imagekit.refs import Digest, Reference
from imagekit.workspace import Workspace

DOCKERFILE, ASSERT_SPEC = RENDERED_FILES
(ASSERT_CHECKER,) = STAGED_FILES
# Mount points inside the image (see the module's docstring for why under /tmp).
ASSERT_MOUNT = "/tmp/imagekit-assert.py"  # noqa: S108
ASSERT_SPEC_MOUNT = "/tmp/imagekit-assert.json"  # noqa: S108
#: Where the assertion step finds its two files (context name -> mount target), as the
#: Dockerfile's bind mounts and the registry builder's container mounts both place them.
ASSERT_MOUNTS = ((ASSERT_CHECKER, ASSERT_MOUNT), (ASSERT_SPEC, ASSERT_SPEC_MOUNT))
PIP_CA_SECRET = "pip_ca"  # noqa: S105 - the id of a secret mount, not a secret
PIP_INDEX_SECRET = "pip_index"  # noqa: S105 - the id of a secret mount, not a secret
DRIFT_MARKER = "IMAGEKIT_OVERLAY_DRIFT"
BLOCKED_MARKER = "IMAGEKIT_OVERLAY_BLOCKED"
# What the assertion checker prints per check and at the end; CheckerOutput reads them back
# (the registry builder, imagekit.builders.assemble.check, from the container's output).
ASSERT_PASS_MARKER = "IMAGEKIT_ASSERT_PASS"  # noqa: S105 - a marker, not a password
ASSERT_FAIL_MARKER = "IMAGEKIT_ASSERT_FAIL"
ASSERTIONS_PASSED_MARKER = "IMAGEKIT_ASSERTIONS_PASSED"
PACKAGE_MARKER = "IMAGEKIT_PACKAGES"


@dataclass(frozen=True)
class Rendered:
    """A Dockerfile's text, the files rendered beside it, the files staged from the package
    for it, and the overlay files it copies.

    ``generated`` holds the rendered files other than the Dockerfile (name -> bytes; today the
    plan's checks as JSON, when it has assertions): committed, compared by `render --check`.
    ``staged`` holds what every build adds from imagekit itself (the assertion checker): in the
    build context, never committed. ``sources`` are the overlay files (relative source ->
    file) its COPYs need. All of them go into the build context.
    """

    plan: str
    dockerfile: str
    sources: tuple[tuple[str, Path], ...]
    generated: tuple[tuple[str, bytes], ...] = ()
    staged: tuple[tuple[str, bytes], ...] = ()

    @property
    def data(self) -> bytes:
        return self.dockerfile.encode()

    @property
    def digest(self) -> Digest:
        return Digest.of_bytes(self.data)

    def files(self) -> dict[str, bytes]:
        """The files `imagekit render` commits in dockerfiles/NAME/, the Dockerfile first."""
        return {DOCKERFILE: self.data, **dict(self.generated)}

    def context_files(self) -> dict[str, bytes]:
        """Every file of the build context but the overlays: the committed files and the
        staged ones, by name. What a build keeps in its evidence and pins by sha256 in its
        record and provenance, so a record names the exact checker bytes that ran."""
        return {**self.files(), **dict(self.staged)}

    def context_sha256(self) -> dict[str, str]:
        """:meth:`context_files` by sha256 (hex): the ``rendered`` map of a build's record and
        of its provenance."""
        return {name: Digest.of_bytes(data).hex for name, data in self.context_files().items()}


@dataclass(frozen=True)
class RenderResult:
    """One plan's render; ``digest`` is None for a plan that cannot be rendered (``note``).

    ``not_rendered`` names the files found in the plan's folder under a rendered or staged name
    that its render does not produce: `render` removed them, `render --check` found them stale.
    """

    plan: str
    path: Path
    digest: Digest | None
    changed: bool
    note: str | None = None
    not_rendered: tuple[str, ...] = ()


def _quote(value: str) -> str:
    """A double-quoted Dockerfile word; '$' is escaped because ENV and LABEL expand it."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'


def base_name(ref: Reference, found_as: str | None) -> str:
    """The base's fully-qualified name for org.opencontainers.image.base.name."""
    return str(Reference(ref.registry, ref.repository, tag=found_as))


def _remove_packages(step: RemoveSystemPackages) -> str:
    names = " ".join(step.names)
    wanted = " ".join(f"-e {n}" for n in step.names)
    script = (
        "set -eu; "
        f"for p in {names}; do "
        "s=$(dpkg-query -W -f='${Status}' \"$p\" 2>/dev/null || true); "
        'if [ "$s" != "install ok installed" ]; then '
        f'echo "{PACKAGE_MARKER} not-installed name=$p" >&2; exit 1; fi; done; '
        f"extra=$(apt-get -s remove {names} | awk '/^Remv /{{print $2}}' | sed 's/:.*//' "
        f"| grep -vx {wanted} || true); "
        'if [ -n "$extra" ]; then '
        f'echo "{PACKAGE_MARKER} would-also-remove names=$(echo $extra)" >&2; exit 1; fi; '
        f"DEBIAN_FRONTEND=noninteractive apt-get remove -y {names}"
    )
    return f"RUN {script}"


def _pip_install(step: PipInstall) -> str:
    reqs = " ".join(shlex.quote(r) for r in step.canonical())
    script = (
        "set -eu; "
        f"if [ -s /run/secrets/{PIP_INDEX_SECRET} ]; then "
        f"PIP_INDEX_URL=$(cat /run/secrets/{PIP_INDEX_SECRET}); export PIP_INDEX_URL; fi; "
        f"if [ -s /run/secrets/{PIP_CA_SECRET} ]; then "
        f"export PIP_CERT=/run/secrets/{PIP_CA_SECRET}; fi; "
        "PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1 "
        f"python3 -m pip install --no-cache-dir {reqs}"
    )
    mounts = f"--mount=type=secret,id={PIP_INDEX_SECRET} --mount=type=secret,id={PIP_CA_SECRET}"
    return f"RUN {mounts} {script}"


def _pip_uninstall(step: PipUninstall) -> str:
    names = " ".join(step.names)
    script = (
        "set -eu; "
        f"for p in {names}; do "
        'if ! python3 -m pip show -q "$p" >/dev/null 2>&1; then '
        f'echo "{PACKAGE_MARKER} not-installed name=$p" >&2; exit 1; fi; done; '
        "PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1 "
        f"python3 -m pip uninstall -y {names}"
    )
    return f"RUN {script}"


# Where a destination may not land once the base's links are followed: the mounts and files
# the runtime puts over the image (imagekit.plans.steps.runtime_mounted holds the same list).
_MOUNTED = "/proc|/proc/*|/sys|/sys/*|/dev|/dev/*|/etc/hosts|/etc/hostname|/etc/resolv.conf"


def render_overlay(step: Overlay) -> list[str]:
    """The guard step and the COPY of one overlay.

    The guard first follows the base's links on the destination (``readlink -f``, as COPY
    follows them) and stops the build with ``IMAGEKIT_OVERLAY_BLOCKED path=... resolves=...``
    when they carry it under /proc, /sys or /dev or onto a file the runtime writes (the
    plan's own rules, held for the path as the image resolves it); a base without readlink
    cannot say, and is refused too. Then it checks what the overlay replaces.
    """
    path = step.destination
    resolved = (
        "command -v readlink >/dev/null || "
        f'{{ echo "{BLOCKED_MARKER} path=$p resolves=unknown(no-readlink)" >&2; exit 1; }}; '
        'r=$(readlink -f "$p" 2>/dev/null) || r=; '
        f'case "$r" in {_MOUNTED}) echo "{BLOCKED_MARKER} path=$p resolves=$r" >&2; exit 1;; '
        "esac; "
    )
    if step.replaces.absent:
        guard = (
            f"set -eu; p={path}; {resolved}"
            'if [ -e "$p" ] || [ -L "$p" ]; then '
            f'echo "{DRIFT_MARKER} path=$p expected=absent actual=present" >&2; exit 1; fi; '
            'echo "IMAGEKIT_OVERLAY_OK path=$p absent"'
        )
    else:
        guard = (
            f"set -eu; p={path}; want={step.replaces.sha256}; {resolved}"
            'if [ ! -f "$p" ]; then '
            f'echo "{DRIFT_MARKER} path=$p expected=sha256:$want actual=missing" >&2; exit 1; fi; '
            'got=$(sha256sum "$p" | cut -d " " -f 1); '
            'if [ "$got" != "$want" ]; then '
            f'echo "{DRIFT_MARKER} path=$p expected=sha256:$want actual=sha256:$got" >&2; '
            "exit 1; fi; "
            'echo "IMAGEKIT_OVERLAY_OK path=$p sha256:$got"'
        )
    flags = "".join(
        f"--{name}={value} "
        for name, value in (("chmod", step.mode), ("chown", step.owner))
        if value is not None
    )
    return [f"RUN {guard}", f"COPY {flags}{step.source} {path}"]


def assertion_spec(assertions: Assertions) -> bytes:
    """The plan's checks as the checker reads them: JSON with sorted keys, indented, one
    trailing newline, so the same plan always commits the same bytes, reviewable as a diff."""
    document = assertions.model_dump(mode="json")
    return (json.dumps(document, sort_keys=True, indent=2) + "\n").encode()


def assertion_checker() -> bytes:
    """The checker's exact bytes, read from the package (imagekit/plans/assert_checker.py).

    It is read, never imported: it runs in the image with the image's python3."""
    return resources.files("imagekit.plans").joinpath("assert_checker.py").read_bytes()


@dataclass(frozen=True)
class CheckerOutput:
    """What the checker printed, read back from its output: the checks that passed, those
    that failed, and whether it reached its closing line (it exits before it on a crash)."""

    passed: tuple[str, ...]
    failed: tuple[str, ...]
    finished: bool

    @classmethod
    def read(cls, stdout: str) -> CheckerOutput:
        def marked(marker: str) -> tuple[str, ...]:
            return tuple(m.group(1) for m in re.finditer(rf"^{marker} (.*)$", stdout, re.M))

        return cls(
            marked(ASSERT_PASS_MARKER),
            marked(ASSERT_FAIL_MARKER),
            ASSERTIONS_PASSED_MARKER in stdout,
        )


def _assertions_step() -> str:
    mounts = " ".join(
        f"--mount=type=bind,source={name},target={target}" for name, target in ASSERT_MOUNTS
    )
    return f"RUN {mounts} python3 {ASSERT_MOUNT} {ASSERT_SPEC_MOUNT}"


def _from_platform(loaded: LoadedPlan) -> str:
    """The plan's one platform; a plan of several builds each from the same Dockerfile, so its
    base is the build's target platform's image of the base index (BuildKit sets the
    argument per platform, on the engine's builds and on a daemon's multi-platform build)."""
    return "$TARGETPLATFORM" if loaded.multi_platform else loaded.plan.base.platform


def render(loaded: LoadedPlan) -> Rendered:
    """The Dockerfile for a loaded plan (with its base override, if it was loaded with one)."""
    plan = loaded.plan
    base = loaded.base
    lines = [
        f"# Rendered by `imagekit render {plan.name}` from the plan {plan.name}.yaml; "
        "do not edit by hand.",
        f"# plan sha256: {loaded.digest.hex}",
        f"FROM --platform={_from_platform(loaded)} {base}",
    ]
    sources: list[tuple[str, Path]] = []
    for step in plan.steps:
        if isinstance(step, RemoveSystemPackages):
            lines.append(_remove_packages(step))
        elif isinstance(step, PipInstall):
            lines.append(_pip_install(step))
        elif isinstance(step, PipUninstall):
            lines.append(_pip_uninstall(step))
        elif isinstance(step, Overlay):
            lines.extend(render_overlay(step))
            sources.append((step.source, loaded.overlay_dir / step.source))
        elif isinstance(step, Env):
            lines.append("ENV " + " ".join(f"{k}={_quote(v)}" for k, v in step.vars.items()))
        elif isinstance(step, Labels):
            lines.append("LABEL " + " ".join(f"{k}={_quote(v)}" for k, v in step.labels.items()))
        elif isinstance(step, Entrypoint):
            lines.append("ENTRYPOINT " + json.dumps(step.argv))
        elif isinstance(step, Cmd):
            lines.append("CMD " + json.dumps(step.argv))
    assert base.digest is not None  # noqa: S101 - LoadedPlan.base is always pinned
    labels = {
        "org.opencontainers.image.base.name": base_name(base, plan.base.found_as),
        "org.opencontainers.image.base.digest": str(base.digest),
        "io.imagekit.plan": plan.name,
        "io.imagekit.plan-sha256": loaded.digest.hex,
    }
    lines.append("LABEL " + " \\\n      ".join(f"{k}={_quote(v)}" for k, v in labels.items()))
    generated: list[tuple[str, bytes]] = []
    staged: list[tuple[str, bytes]] = []
    if not plan.assertions.empty:
        lines.append(
            f"# The plan's assertions ({ASSERT_SPEC} beside this file), run by imagekit's "
            f"checker, which every build stages as {ASSERT_CHECKER}."
        )
        lines.append(_assertions_step())
        generated.append((ASSERT_SPEC, assertion_spec(plan.assertions)))
        staged.append((ASSERT_CHECKER, assertion_checker()))
    return Rendered(
        plan=plan.name,
        dockerfile="\n".join(lines) + "\n",
        sources=tuple(sources),
        generated=tuple(generated),
        staged=tuple(staged),
    )


def folder_changes(rendered: Rendered, folder: Path) -> dict[str, bytes | None]:
    """What the plan's folder must become to hold exactly its render, by name: the bytes a
    rendered file must hold where its committed copy differs or is missing, and None for a file
    under a rendered or staged name that the render does not produce (the JSON of a plan that
    no longer asserts anything; a checker committed by an earlier imagekit: a staged file is
    never committed). Empty when the folder is up to date."""
    wanted = rendered.files()
    changes: dict[str, bytes | None] = {}
    for name in (*RENDERED_FILES, *STAGED_FILES):
        path = folder / name
        current = path.read_bytes() if path.exists() else None
        if current != wanted.get(name):
            changes[name] = wanted.get(name)
    return changes


def _result(rendered: Rendered, folder: Path, changes: dict[str, bytes | None]) -> RenderResult:
    unwanted = tuple(name for name, data in changes.items() if data is None)
    return RenderResult(
        rendered.plan, folder / DOCKERFILE, rendered.digest, bool(changes), not_rendered=unwanted
    )


def write_rendered(loaded: LoadedPlan) -> RenderResult:
    """Write the Dockerfile (and the checks' JSON) beside the overlay sources; report a change.

    A file the plan does not render is removed (and named in the result), so the folder holds
    exactly what the plan renders to and a build context or a commit never carries it.
    """
    rendered = render(loaded)
    folder = loaded.overlay_dir
    changes = folder_changes(rendered, folder)
    for name, data in changes.items():
        path = folder / name
        path.unlink(missing_ok=True)
        if data is not None:
            write_bytes(path, data)
    return _result(rendered, folder, changes)


def _unrenderable(
    workspace: Workspace, path: Path, exc: BaseDigestTruncated, *, check: bool
) -> RenderResult:
    folder = workspace.dockerfiles_dir / path.stem
    left = [n for n in (*RENDERED_FILES, *STAGED_FILES) if (folder / n).exists()]
    if not check:
        for name in left:
            (folder / name).unlink()
    note = "not rendered: its base digest is cut short; builds render it with --base"
    return RenderResult(path.stem, folder / DOCKERFILE, None, bool(left), note, tuple(left))


def render_plans(
    workspace: Workspace, name: str | None, *, check: bool = False
) -> list[RenderResult]:
    """Render one plan or every plan; with ``check`` write nothing and report stale files."""
    if name is not None:
        paths = [plan_path(workspace.plans_dir, name)]
    else:
        paths = sorted(workspace.plans_dir.glob("*.yaml"))
        if not paths:
            raise PlanError(f"no plans (*.yaml) in {workspace.plans_dir}")
    results: list[RenderResult] = []
    for path in paths:
        try:
            loaded = load_plan(path, dockerfiles_dir=workspace.dockerfiles_dir)
        except BaseDigestTruncated as exc:
            if name is not None:
                raise
            # Whole but for its base: there is nothing to render until every build names its
            # base with --base; rendered files left in its folder are stale.
            results.append(_unrenderable(workspace, path, exc, check=check))
            continue
        if check:
            rendered = render(loaded)
            changes = folder_changes(rendered, loaded.overlay_dir)
            results.append(_result(rendered, loaded.overlay_dir, changes))
        else:
            results.append(write_rendered(loaded))
    return results
