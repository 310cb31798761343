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
- the plan's assertions as the last RUN step: a standard-library Python checker that prints
  one ``IMAGEKIT_ASSERT_PASS``/``IMAGEKIT_ASSERT_FAIL`` line a check and exits 1 if any failed.
  The checker is its own file beside the Dockerfile (dockerfiles/NAME/imagekit-assert.py, the
  plan's checks embedded as a Python literal), rendered and committed with it, and the step
  reaches it through a BuildKit bind mount from the build context
  (``RUN --mount=type=bind,source=imagekit-assert.py,target=/tmp/imagekit-assert.py``): it is
  never copied into a layer, and the build log and image history show one short RUN line
  instead of the whole script (BuildKit echoes every RUN line into the log). The bind mount
  is in the Dockerfile frontend built into BuildKit, so it too needs no ``# syntax=`` line.
  The target sits in /tmp, a folder every image has: Docker 20.10's BuildKit removes a file's
  mount point afterwards but keeps any folder it had to create for it, which would leave an
  empty folder in the image and show up as a change in `imagekit nightly`.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagekit.errors import BaseDigestTruncated, PlanError
from imagekit.evidence import write_bytes
from imagekit.plans.load import load_plan, plan_path
from imagekit.plans.model import Assertions, LoadedPlan
from imagekit.plans.steps import (
    RENDERED_FILES,
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

DOCKERFILE, ASSERT_SCRIPT = RENDERED_FILES
ASSERT_MOUNT = "/tmp/imagekit-assert.py"  # noqa: S108 - a mount point inside the image
PIP_CA_SECRET = "pip_ca"  # noqa: S105 - the id of a secret mount, not a secret
PIP_INDEX_SECRET = "pip_index"  # noqa: S105 - the id of a secret mount, not a secret
DRIFT_MARKER = "IMAGEKIT_OVERLAY_DRIFT"
BLOCKED_MARKER = "IMAGEKIT_OVERLAY_BLOCKED"
# What the assertion checker prints per check and at the end; CheckerOutput reads them back
# (the registry builder, imagekit.build.assemble.check, from the container's output).
ASSERT_PASS_MARKER = "IMAGEKIT_ASSERT_PASS"  # noqa: S105 - a marker, not a password
ASSERT_FAIL_MARKER = "IMAGEKIT_ASSERT_FAIL"
ASSERTIONS_PASSED_MARKER = "IMAGEKIT_ASSERTIONS_PASSED"
PACKAGE_MARKER = "IMAGEKIT_PACKAGES"

# The in-build assertion checker, after the plan's SPEC. Standard library only and Python
# 3.8-compatible, because it runs with whatever python3 the base image has. Every check runs
# (one failure does not hide the next); the exit status is 1 when any failed.
_CHECKER_HEAD = """\
# The post-build assertions of the plan {name} ({name}.yaml); do not edit by hand.
# `imagekit render {name}` writes this file beside the Dockerfile, whose last step runs it
# through a BuildKit bind mount, so it is never in the image. Standard library only and
# Python 3.8-compatible: it runs with whatever python3 the base image has.
# ruff: noqa: E501
import importlib
import importlib.util
import json
import subprocess
import sys

"""
_CHECKER = """\
failed = []


def report(ok, what, detail):
    line = ("IMAGEKIT_ASSERT_PASS " if ok else "IMAGEKIT_ASSERT_FAIL ") + what
    print(line + (": " + detail if detail else ""), flush=True)
    if not ok:
        failed.append(what)


if SPEC["pip_check"]:
    r = subprocess.run(  # noqa: S603 - this interpreter's pip
        [sys.executable, "-m", "pip", "check"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    print(r.stdout, end="", flush=True)
    report(r.returncode == 0, "pip_check", f"exit {r.returncode}")
for name in SPEC["find_spec"]:
    try:
        found = importlib.util.find_spec(name) is not None
        detail = "" if found else "find_spec returned None"
    except Exception as exc:
        found, detail = False, f"{type(exc).__name__}: {exc}"
    report(found, "find_spec " + name, detail)
for name in SPEC["imports"]:
    try:
        importlib.import_module(name)
        ok, detail = True, ""
    except BaseException as exc:
        ok, detail = False, f"{type(exc).__name__}: {exc}"
    report(ok, "import " + name, detail)
for cmd in SPEC["commands"]:
    what = "command " + json.dumps(cmd["argv"])
    try:
        code = subprocess.run(cmd["argv"]).returncode  # noqa: S603 - the plan's own command
        report(code == cmd["exit_code"], what, f"exit {code}, expected {cmd['exit_code']}")
    except OSError as exc:
        report(False, what, f"{type(exc).__name__}: {exc}")
if failed:
    print(f"IMAGEKIT_ASSERTIONS_REJECTED {len(failed)} failed: {'; '.join(failed)}")
    sys.exit(1)
print("IMAGEKIT_ASSERTIONS_PASSED")
"""


@dataclass(frozen=True)
class Rendered:
    """A Dockerfile's text, the files rendered beside it, and the overlay files it copies.

    ``generated`` holds the rendered files other than the Dockerfile (name -> bytes; today
    only the assertion checker, when the plan has assertions); ``sources`` the overlay files
    (relative source -> file) its COPYs need. All of them go into the build context.
    """

    plan: str
    dockerfile: str
    sources: tuple[tuple[str, Path], ...]
    generated: tuple[tuple[str, bytes], ...] = ()

    @property
    def data(self) -> bytes:
        return self.dockerfile.encode()

    @property
    def digest(self) -> Digest:
        return Digest.of_bytes(self.data)

    def files(self) -> dict[str, bytes]:
        """Every rendered file by its name in dockerfiles/NAME/, the Dockerfile first."""
        return {DOCKERFILE: self.data, **dict(self.generated)}


@dataclass(frozen=True)
class RenderResult:
    """One plan's render; ``digest`` is None for a plan that cannot be rendered (``note``)."""

    plan: str
    path: Path
    digest: Digest | None
    changed: bool
    note: str | None = None


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


def _str_literal(value: str) -> str:
    """repr, in double quotes where repr picks single ones (as ``ruff format`` would write)."""
    text = repr(value)
    # repr picks single quotes unless the text has a ' and no "; so here it has neither.
    if text.startswith("'") and '"' not in value:
        return '"' + text[1:-1] + '"'
    return text


def _literal(value: Any, indent: str = "") -> str:
    """A Python literal of JSON-shaped data, one item a line with keys sorted: reviewable."""
    inner = indent + "    "
    if isinstance(value, dict):
        items = [f"{inner}{_str_literal(k)}: {_literal(value[k], inner)},\n" for k in sorted(value)]
        return "{\n" + "".join(items) + indent + "}" if items else "{}"
    if isinstance(value, list):
        items = [f"{inner}{_literal(v, inner)},\n" for v in value]
        return "[\n" + "".join(items) + indent + "]" if items else "[]"
    if isinstance(value, str):
        return _str_literal(value)
    if isinstance(value, (bool, int)) or value is None:
        return repr(value)  # deterministic for these types
    raise TypeError(f"not JSON-shaped: {type(value).__name__}")


def assertion_checker(name: str, assertions: Assertions) -> bytes:
    """The checker file for a plan's assertions: header, the plan's SPEC, the fixed checker."""
    spec = _literal(assertions.model_dump(mode="json"))
    head = _CHECKER_HEAD.format(name=name)
    return f"{head}SPEC = {spec}\n\n{_CHECKER}".encode()


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
    mount = f"--mount=type=bind,source={ASSERT_SCRIPT},target={ASSERT_MOUNT}"
    return f"RUN {mount} python3 {ASSERT_MOUNT}"


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
    if not plan.assertions.empty:
        lines.append(f"# The plan's assertions: {ASSERT_SCRIPT} beside this file.")
        lines.append(_assertions_step())
        generated.append((ASSERT_SCRIPT, assertion_checker(plan.name, plan.assertions)))
    return Rendered(
        plan=plan.name,
        dockerfile="\n".join(lines) + "\n",
        sources=tuple(sources),
        generated=tuple(generated),
    )


def _stale(rendered: Rendered, folder: Path) -> list[str]:
    """The rendered files whose committed copy differs (or exists though it should not)."""
    wanted = rendered.files()
    stale = []
    for name in RENDERED_FILES:
        path = folder / name
        current = path.read_bytes() if path.exists() else None
        if current != wanted.get(name):
            stale.append(name)
    return stale


def write_rendered(loaded: LoadedPlan) -> RenderResult:
    """Write the Dockerfile (and the checker) beside the overlay sources; report a change.

    A checker left from an earlier render of a plan that no longer has assertions is removed,
    so the folder holds exactly what the plan renders to.
    """
    rendered = render(loaded)
    target = loaded.overlay_dir / DOCKERFILE
    stale = _stale(rendered, loaded.overlay_dir)
    wanted = rendered.files()
    for name in stale:
        path = loaded.overlay_dir / name
        path.unlink(missing_ok=True)
        if name in wanted:
            write_bytes(path, wanted[name])
    return RenderResult(rendered.plan, target, rendered.digest, changed=bool(stale))


def _unrenderable(
    workspace: Workspace, path: Path, exc: BaseDigestTruncated, *, check: bool
) -> RenderResult:
    folder = workspace.dockerfiles_dir / path.stem
    left = [folder / n for n in RENDERED_FILES if (folder / n).exists()]
    if not check:
        for stale in left:
            stale.unlink()
    note = "not rendered: its base digest is cut short; builds render it with --base"
    return RenderResult(path.stem, folder / DOCKERFILE, None, bool(left), note)


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
            target = loaded.overlay_dir / DOCKERFILE
            stale = bool(_stale(rendered, loaded.overlay_dir))
            results.append(RenderResult(rendered.plan, target, rendered.digest, stale))
        else:
            results.append(write_rendered(loaded))
    return results
