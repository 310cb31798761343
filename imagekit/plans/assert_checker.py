#!/usr/bin/env python3
"""imagekit's assertion checker: a plan's post-build checks, run inside the image just built.

It runs in the image, with whatever python3 the base has, as the last step of the rendered
Dockerfile (imagekit.plans.render), or in a container of a pushed image (the registry
builder, a BuildKit daemon, several platforms: imagekit.builders.assemble.check)::

    python3 imagekit-assert.py imagekit-assert.json

The JSON file is the plan's ``assertions`` as ``imagekit render`` commits it beside the
Dockerfile (dockerfiles/NAME/imagekit-assert.json); this file is never committed per plan:
every build stages it from the package, so there is one checker and the build record pins the
exact bytes that ran. imagekit never imports it.

It prints one ``IMAGEKIT_ASSERT_PASS`` or ``IMAGEKIT_ASSERT_FAIL`` line a check (a detail
after ``: ``), then ``IMAGEKIT_ASSERTIONS_PASSED``, or ``IMAGEKIT_ASSERTIONS_REJECTED N
failed: ...`` and exit 1. Every check runs: one failure hides no other. imagekit reads these
lines back (imagekit.plans.render.CheckerOutput); without the closing line nothing passed.

Images ship old interpreters, so this file keeps to Python 3.8 and the standard library: no
``match``, no ``str.removeprefix``, no runtime-subscripted builtins.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
from typing import Any

USAGE = "usage: python3 imagekit-assert.py SPEC.json"


class Checks:
    """The verdicts so far: each printed as it comes, the failures kept for the last line."""

    def __init__(self) -> None:
        self.failed: list[str] = []

    def report(self, ok: bool, what: str, detail: str) -> None:
        line = ("IMAGEKIT_ASSERT_PASS " if ok else "IMAGEKIT_ASSERT_FAIL ") + what
        print(line + (": " + detail if detail else ""), flush=True)
        if not ok:
            self.failed.append(what)


def pip_check(checks: Checks) -> None:
    """``pip check`` of this interpreter, its own output passed through."""
    r = subprocess.run(  # noqa: S603 - this interpreter's pip
        [sys.executable, "-m", "pip", "check"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    print(r.stdout, end="", flush=True)
    checks.report(r.returncode == 0, "pip_check", f"exit {r.returncode}")


def find_spec(checks: Checks, name: str) -> None:
    """The module is found without being imported (its import may need a GPU)."""
    try:
        found = importlib.util.find_spec(name) is not None
        detail = "" if found else "find_spec returned None"
    except Exception as exc:
        found, detail = False, f"{type(exc).__name__}: {exc}"
    checks.report(found, "find_spec " + name, detail)


def import_module(checks: Checks, name: str) -> None:
    """The module imports; BaseException too, as a module's import may call sys.exit."""
    try:
        importlib.import_module(name)
        ok, detail = True, ""
    except BaseException as exc:
        ok, detail = False, f"{type(exc).__name__}: {exc}"
    checks.report(ok, "import " + name, detail)


def command(checks: Checks, argv: list[str], exit_code: int) -> None:
    """The plan's command exits as the plan says; one that cannot start fails."""
    what = "command " + json.dumps(argv)
    try:
        code = subprocess.run(argv).returncode  # noqa: S603 - the plan's own command
        checks.report(code == exit_code, what, f"exit {code}, expected {exit_code}")
    except OSError as exc:
        checks.report(False, what, f"{type(exc).__name__}: {exc}")


def run(spec: dict[str, Any]) -> int:
    """Every check of ``spec`` in the plan's order of kinds; 1 when any failed, else 0."""
    checks = Checks()
    if spec["pip_check"]:
        pip_check(checks)
    for name in spec["find_spec"]:
        find_spec(checks, name)
    for name in spec["imports"]:
        import_module(checks, name)
    for cmd in spec["commands"]:
        command(checks, cmd["argv"], cmd["exit_code"])
    if checks.failed:
        failed = "; ".join(checks.failed)
        print(f"IMAGEKIT_ASSERTIONS_REJECTED {len(checks.failed)} failed: {failed}")
        return 1
    print("IMAGEKIT_ASSERTIONS_PASSED")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(USAGE, file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as fh:
        spec = json.load(fh)
    return run(spec)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
