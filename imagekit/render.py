"""Render a plan into a Dockerfile: deterministic text, reviewed as a diff when committed.

The same plan bytes (and base) always give the same Dockerfile bytes: nothing here reads the
clock, the host or the environment. The output uses only the Dockerfile frontend built into
BuildKit (no ``# syntax=`` line, which would make every build pull a frontend image), and:

- ``FROM --platform=P repo@sha256:...``: the base is content, never a tag;
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
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from imagekit.errors import PlanError
from imagekit.evidence import write_bytes
from imagekit.plan import (
    Assertions,
    Cmd,
    Entrypoint,
    Env,
    Labels,
    LoadedPlan,
    Overlay,
    PipInstall,
    RemoveSystemPackages,
    load_plan,
    plan_path,
)
from imagekit.refs import Digest, Reference
from imagekit.workspace import Workspace

DOCKERFILE = "Dockerfile"
PIP_CA_SECRET = "pip_ca"  # noqa: S105 - the id of a secret mount, not a secret
PIP_INDEX_SECRET = "pip_index"  # noqa: S105 - the id of a secret mount, not a secret
DRIFT_MARKER = "IMAGEKIT_OVERLAY_DRIFT"
ASSERT_FAIL_MARKER = "IMAGEKIT_ASSERT_FAIL"
ASSERT_PASS_MARKER = "IMAGEKIT_ASSERT_PASS"  # noqa: S105 - a log marker
PACKAGE_MARKER = "IMAGEKIT_PACKAGES"

# The in-build assertion checker. Standard library only and Python 3.8-compatible, because it
# runs with whatever python3 the base image has. Every check runs (one failure does not hide
# the next); the exit status is 1 when any failed.
_CHECKER = """\
import importlib, importlib.util, json, subprocess, sys
spec = SPEC
failed = []
def report(ok, what, detail):
    line = ("IMAGEKIT_ASSERT_PASS " if ok else "IMAGEKIT_ASSERT_FAIL ") + what
    print(line + (": " + detail if detail else ""), flush=True)
    if not ok:
        failed.append(what)
if spec["pip_check"]:
    r = subprocess.run([sys.executable, "-m", "pip", "check"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True)
    print(r.stdout, end="", flush=True)
    report(r.returncode == 0, "pip_check", "exit %d" % r.returncode)
for name in spec["find_spec"]:
    try:
        found = importlib.util.find_spec(name) is not None
        detail = "" if found else "find_spec returned None"
    except Exception as exc:
        found, detail = False, "%s: %s" % (type(exc).__name__, exc)
    report(found, "find_spec " + name, detail)
for name in spec["imports"]:
    try:
        importlib.import_module(name)
        ok, detail = True, ""
    except BaseException as exc:
        ok, detail = False, "%s: %s" % (type(exc).__name__, exc)
    report(ok, "import " + name, detail)
for cmd in spec["commands"]:
    what = "command " + json.dumps(cmd["argv"])
    try:
        code = subprocess.run(cmd["argv"]).returncode
        report(code == cmd["exit_code"], what, "exit %d, expected %d" % (code, cmd["exit_code"]))
    except OSError as exc:
        report(False, what, "%s: %s" % (type(exc).__name__, exc))
if failed:
    print("IMAGEKIT_ASSERTIONS_REJECTED %d failed: %s" % (len(failed), "; ".join(failed)))
    sys.exit(1)
print("IMAGEKIT_ASSERTIONS_PASSED")
"""


@dataclass(frozen=True)
class Rendered:
    """A Dockerfile's text and the overlay files (relative source -> file) its COPYs need."""

    plan: str
    dockerfile: str
    sources: tuple[tuple[str, Path], ...]

    @property
    def data(self) -> bytes:
        return self.dockerfile.encode()

    @property
    def digest(self) -> Digest:
        return Digest.of_bytes(self.data)


@dataclass(frozen=True)
class RenderResult:
    plan: str
    path: Path
    digest: Digest
    changed: bool


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


def _overlay(step: Overlay) -> list[str]:
    path = step.destination
    if step.replaces.absent:
        guard = (
            f"set -eu; p={path}; "
            'if [ -e "$p" ] || [ -L "$p" ]; then '
            f'echo "{DRIFT_MARKER} path=$p expected=absent actual=present" >&2; exit 1; fi; '
            'echo "IMAGEKIT_OVERLAY_OK path=$p absent"'
        )
    else:
        guard = (
            f"set -eu; p={path}; want={step.replaces.sha256}; "
            'if [ ! -f "$p" ]; then '
            f'echo "{DRIFT_MARKER} path=$p expected=sha256:$want actual=missing" >&2; exit 1; fi; '
            'got=$(sha256sum "$p" | cut -d " " -f 1); '
            'if [ "$got" != "$want" ]; then '
            f'echo "{DRIFT_MARKER} path=$p expected=sha256:$want actual=sha256:$got" >&2; '
            "exit 1; fi; "
            'echo "IMAGEKIT_OVERLAY_OK path=$p sha256:$got"'
        )
    return [f"RUN {guard}", f"COPY {step.source} {path}"]


def _assertions(assertions: Assertions) -> str:
    data = json.loads(json.dumps(assertions.model_dump(mode="json"), sort_keys=True))
    # A Python literal (str, int, bool, list, dict in sorted order): repr is deterministic.
    program = f"SPEC = {data!r}\n{_CHECKER}"
    return "RUN " + json.dumps(["python3", "-c", program])


def render(loaded: LoadedPlan) -> Rendered:
    """The Dockerfile for a loaded plan (with its base override, if it was loaded with one)."""
    plan = loaded.plan
    base = loaded.base
    lines = [
        f"# Rendered by `imagekit render {plan.name}` from the plan {plan.name}.yaml; "
        "do not edit by hand.",
        f"# plan sha256: {loaded.digest.hex}",
        f"FROM --platform={plan.base.platform} {base}",
    ]
    sources: list[tuple[str, Path]] = []
    for step in plan.steps:
        if isinstance(step, RemoveSystemPackages):
            lines.append(_remove_packages(step))
        elif isinstance(step, PipInstall):
            lines.append(_pip_install(step))
        elif isinstance(step, Overlay):
            lines.extend(_overlay(step))
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
    if not plan.assertions.empty:
        lines.append(_assertions(plan.assertions))
    return Rendered(plan=plan.name, dockerfile="\n".join(lines) + "\n", sources=tuple(sources))


def write_rendered(loaded: LoadedPlan) -> RenderResult:
    """Write dockerfiles/NAME/Dockerfile beside the overlay sources; report if it changed."""
    rendered = render(loaded)
    target = loaded.overlay_dir / DOCKERFILE
    old = target.read_bytes() if target.exists() else None
    if old == rendered.data:
        return RenderResult(rendered.plan, target, rendered.digest, changed=False)
    target.unlink(missing_ok=True)
    digest = write_bytes(target, rendered.data)
    return RenderResult(rendered.plan, target, digest, changed=True)


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
        loaded = load_plan(path, dockerfiles_dir=workspace.dockerfiles_dir)
        if check:
            rendered = render(loaded)
            target = loaded.overlay_dir / DOCKERFILE
            current = target.read_bytes() if target.exists() else None
            results.append(
                RenderResult(rendered.plan, target, rendered.digest, current != rendered.data)
            )
        else:
            results.append(write_rendered(loaded))
    return results
