# The post-build assertions of the plan m3-cu13 (m3-cu13.yaml); do not edit by hand.
# `imagekit render m3-cu13` writes this file beside the Dockerfile, whose last step runs it
# through a BuildKit bind mount, so it is never in the image. Standard library only and
# Python 3.8-compatible: it runs with whatever python3 the base image has.
# ruff: noqa: E501
import importlib
import importlib.util
import json
import subprocess
import sys

SPEC = {
    "commands": [],
    "find_spec": [
        "nixl",
    ],
    "imports": [],
    "pip_check": True,
}

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
