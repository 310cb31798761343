#!/usr/bin/env python3
"""imagekit's in-image probe: one file of standard-library Python, Python 3.8 and newer.

It is mounted read-only into the image under audit (or run against the current interpreter
with ``--host``) and prints exactly one JSON document on stdout. It decides nothing about the
overall status: the host turns the per-check results into CPU_PASS and friends, so an image
cannot talk its way into a pass by printing something clever.

Every check runs in its own process (a new process group), concurrently with the others and
with its own timeout: a check that hangs (an import that blocks, a CLI that waits on a GPU)
is killed and reported as TIMEOUT while the others finish. Captured output is capped at
16 MiB a stream and the cap is noted; bytes are decoded with errors="replace" so garbage or
non-UTF-8 output cannot break the report, and the document is written with ensure_ascii.

Images ship old interpreters, so this file keeps to what Python 3.8 has: no ``match``, no
``str.removeprefix``, no runtime-subscripted builtins, ``importlib.metadata`` read through
``metadata["Name"]`` (``Distribution.name`` came in 3.10).

Invocation (the runner builds it; ``--spec-json`` is what imagekit.audit.profiles produces)::

    python3 probe.py --spec-json '{"profile": {...}, "expected_paths": [...]}' [--host]
    python3 probe.py --inner CHECK        # one check, spec on stdin; used by the probe itself
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import csv
import fnmatch
import hashlib
import io
import json
import os
import platform
import re
import signal
import subprocess
import sys
import threading
import time
from typing import IO, Any, Callable

PROBE_VERSION = 1
OUTPUT_CAP = 16 * 1024 * 1024
RESULT_MARKER = "@@IMAGEKIT_CHECK_RESULT@@ "
DEFAULT_TIMEOUT_S = 120.0
PYTHON_PLACEHOLDER = "{python}"

PASS, FAIL, DEFERRED, SKIPPED, TIMEOUT = "PASS", "FAIL", "DEFERRED", "SKIPPED", "TIMEOUT"

_PROVES = {
    "versions": "Reads the installed version of each key distribution from its metadata "
    "(null when absent) and lists every installed distribution.",
    "pip-check": "Runs `pip check`: every installed distribution's declared requirements "
    "are installed at versions that satisfy them.",
    "find-spec": "Each asserted module can be located by importlib.util.find_spec (an entry "
    "point exists; the module is not imported).",
    "record": "Every file listed in each distribution's RECORD is present with the recorded "
    "sha256; files a plan overlaid are expected and named as such.",
    "torch": "torch's version, its CUDA version and the GPU arches its binaries were compiled "
    "for (read from the build's arch flags, no GPU needed) cover the required arches.",
    "av-roundtrip": "PyAV encodes 8 frames of 64x64 MPEG-4 into an in-memory MP4 and decodes "
    "8 frames of width 64 back.",  # the check says which frame path it took in its own text
    "model-sources": "The engine package ships the model source files the profile names.",
    "cli": "The command parses its arguments and its help lists the required flags.",
}


# --------------------------------------------------------------------------- process running


class Captured:
    """One stream read to the end, the first OUTPUT_CAP bytes kept, the total counted."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.kept = 0
        self.total = 0

    def feed(self, stream: IO[bytes]) -> None:
        while True:
            chunk = stream.read(65536)
            if not chunk:
                break
            self.total += len(chunk)
            room = OUTPUT_CAP - self.kept
            if room > 0:
                part = chunk[:room]
                self.chunks.append(part)
                self.kept += len(part)
        stream.close()

    def data(self) -> bytes:
        return b"".join(self.chunks)


def decode(data: bytes) -> tuple[str, bool]:
    """Text for the report and whether the bytes were valid UTF-8 (garbage never raises)."""
    try:
        return data.decode("utf-8"), True
    except UnicodeDecodeError:
        return data.decode("utf-8", errors="replace"), False


def run_process(
    argv: list[str], timeout_s: float, env: dict[str, str] | None = None, stdin: bytes | None = None
) -> dict[str, Any]:
    """Run argv in its own process group; kill the whole group when the timeout passes."""
    started = time.monotonic()
    full_env = dict(os.environ)
    full_env.update(env or {})
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=full_env,
            start_new_session=True,
        )
    except OSError as exc:
        return {
            "argv": argv,
            "exit_code": None,
            "timed_out": False,
            "spawn_error": "%s: %s" % (type(exc).__name__, exc),
            "stdout": b"",
            "stderr": b"",
            "stdout_total": 0,
            "stderr_total": 0,
            "duration_s": round(time.monotonic() - started, 3),
        }
    out, err = Captured(), Captured()
    readers = [
        threading.Thread(target=out.feed, args=(proc.stdout,), daemon=True),
        threading.Thread(target=err.feed, args=(proc.stderr,), daemon=True),
    ]
    for reader in readers:
        reader.start()
    if stdin is not None and proc.stdin is not None:
        try:
            proc.stdin.write(stdin)
            proc.stdin.close()
        except OSError:
            pass  # the child exited before reading its spec; its exit code tells why
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            proc.kill()
        proc.wait()
    for reader in readers:
        # A grandchild that left the group could hold a pipe open; never wait on it forever.
        reader.join(timeout=10)
    return {
        "argv": argv,
        "exit_code": proc.returncode,
        "timed_out": timed_out,
        "spawn_error": None,
        "stdout": out.data(),
        "stderr": err.data(),
        "stdout_total": out.total,
        "stderr_total": err.total,
        "duration_s": round(time.monotonic() - started, 3),
    }


def render_output(proc: dict[str, Any]) -> dict[str, Any]:
    """The JSON-safe view of a process's output, with the cap and any bad bytes noted."""
    stdout, out_ok = decode(proc["stdout"])
    stderr, err_ok = decode(proc["stderr"])
    notes = []
    for name, total in (("stdout", proc["stdout_total"]), ("stderr", proc["stderr_total"])):
        if total > OUTPUT_CAP:
            notes.append("%s capped: kept the first %d of %d bytes" % (name, OUTPUT_CAP, total))
    if not out_ok:
        notes.append("stdout was not valid UTF-8: decoded with replacement characters")
    if not err_ok:
        notes.append("stderr was not valid UTF-8: decoded with replacement characters")
    return {
        "command": proc["argv"],
        "exit_code": proc["exit_code"],
        "stdout": stdout,
        "stderr": stderr,
        "stdout_bytes": proc["stdout_total"],
        "stderr_bytes": proc["stderr_total"],
        "output_capped": proc["stdout_total"] > OUTPUT_CAP or proc["stderr_total"] > OUTPUT_CAP,
        "output_notes": notes,
        "duration_s": proc["duration_s"],
    }


# --------------------------------------------------------------------------- the checks


def check_result(
    name: str,
    kind: str,
    status: str,
    reason: str,
    proc: dict[str, Any] | None,
    data: dict[str, Any] | None = None,
    proves: str | None = None,
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "status": status,
        "reason": reason,
        "proves": proves or _PROVES.get(kind, ""),
        "data": data or {},
    }
    if proc is not None:
        result.update(render_output(proc))
    else:
        result.update(
            {
                "command": [],
                "exit_code": None,
                "stdout": "",
                "stderr": "",
                "stdout_bytes": 0,
                "stderr_bytes": 0,
                "output_capped": False,
                "output_notes": [],
                "duration_s": 0.0,
            }
        )
    return result


def run_inner(name: str, kind: str, spec: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Run one of this file's own checks in a child process and read its result line."""
    argv = [sys.executable, os.path.abspath(__file__), "--inner", kind]
    proc = run_process(argv, timeout_s, stdin=json.dumps(spec).encode())
    if proc["timed_out"]:
        return check_result(
            name, kind, TIMEOUT, "killed after %ss without finishing" % timeout_s, proc
        )
    if proc["spawn_error"]:
        return check_result(name, kind, FAIL, "could not start: " + proc["spawn_error"], proc)
    text, _ = decode(proc["stdout"])
    found: dict[str, Any] | None = None
    for line in text.splitlines():
        if line.startswith(RESULT_MARKER):
            try:
                found = json.loads(line[len(RESULT_MARKER) :])
            except ValueError:
                found = None
    if found is None or proc["exit_code"] != 0:
        return check_result(
            name,
            kind,
            FAIL,
            "the check process exited %s without a result" % proc["exit_code"],
            proc,
        )
    # Keep only the human lines in stdout; the structured result goes to data.
    proc["stdout"] = "\n".join(
        line for line in text.splitlines() if not line.startswith(RESULT_MARKER)
    ).encode("utf-8")
    return check_result(
        name,
        kind,
        str(found["status"]),
        str(found["reason"]),
        proc,
        found.get("data"),
        found.get("proves"),  # a check that chose its path says which one it tested
    )


_REQUIRES_MISSING = re.compile(
    r"^(?P<dist>\S+) (?P<version>\S+) requires (?P<requirement>.+), which is not installed\.$"
)
_HAS_REQUIREMENT = re.compile(
    r"^(?P<dist>\S+) (?P<version>\S+) has requirement (?P<requirement>.+), "
    r"but you have (?P<installed_name>\S+) (?P<installed_version>\S+)\.$"
)
_EXTENSION = re.compile(r"\.(so(\.[\w.]+)?|pyd)$")
_BUILD_SCRIPTS = re.compile(r"^scripts-\d+\.\d+/[^/]+$")
_OS_SITE = re.compile(r"^/usr/lib/python3(\.\d+)?/dist-packages(/|$)")
_NOT_SUPPORTED = re.compile(r"^(?P<dist>\S+) (?P<version>\S+) is not supported on this platform$")


# The problem each explained line names; a pattern without a group leaves that field None.
_PIP_CHECK_PROBLEMS = (
    (_REQUIRES_MISSING, "missing"),
    (_HAS_REQUIREMENT, "version-conflict"),
    (_NOT_SUPPORTED, "unsupported-platform"),
)


def _pip_check_conflict(line: str) -> dict[str, Any] | None:
    """One pip check line as a structured conflict; None when no pattern explains it."""
    for pattern, problem in _PIP_CHECK_PROBLEMS:
        m = pattern.match(line)
        if m:
            groups = m.groupdict()
            installed = groups.get("installed_name")
            return {
                "distribution": groups["dist"],
                "version": groups["version"],
                "requirement": groups.get("requirement"),
                "problem": problem,
                "installed": (
                    "%s %s" % (installed, groups["installed_version"]) if installed else None
                ),
            }
    return None


def parse_pip_check(text: str) -> tuple[list[dict[str, Any]], list[str]]:
    """pip check's lines as structured conflicts, plus the lines no pattern explained."""
    conflicts: list[dict[str, Any]] = []
    unparsed: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line == "No broken requirements found.":
            continue
        conflict = _pip_check_conflict(line)
        if conflict is None:
            unparsed.append(line)
        else:
            conflicts.append(conflict)
    return conflicts, unparsed


def check_pip(spec: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    argv = [sys.executable, "-m", "pip", "check"]
    env = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1", "PYTHONWARNINGS": "ignore"}
    proc = run_process(argv, timeout_s, env=env)
    if proc["timed_out"]:
        return check_result("pip-check", "pip-check", TIMEOUT, "killed after %ss" % timeout_s, proc)
    if proc["spawn_error"]:
        return check_result("pip-check", "pip-check", FAIL, proc["spawn_error"], proc)
    stdout, _ = decode(proc["stdout"])
    stderr, _ = decode(proc["stderr"])
    conflicts, unparsed = parse_pip_check(stdout)
    data = {"conflicts": conflicts, "unparsed_lines": unparsed}
    if "No module named pip" in stderr:
        if "pip-check" in (spec.get("profile") or {}).get("if_installed", []):
            return check_result(
                "pip-check",
                "pip-check",
                SKIPPED,
                "pip is not installed in this Python; the profile checks it only where it is",
                proc,
                data,
            )
        return check_result(
            "pip-check", "pip-check", FAIL, "pip is not installed in this Python", proc, data
        )
    if proc["exit_code"] == 0 and not conflicts and not unparsed:
        return check_result(
            "pip-check", "pip-check", PASS, "No broken requirements found.", proc, data
        )
    if conflicts:
        reason = "%d broken requirement(s): %s" % (
            len(conflicts),
            "; ".join(
                "%s %s needs %s (%s)"
                % (
                    c["distribution"],
                    c["version"],
                    c["requirement"],
                    c["installed"] or c["problem"],
                )
                for c in conflicts
            ),
        )
    else:
        reason = "pip check exited %s" % proc["exit_code"]
    return check_result("pip-check", "pip-check", FAIL, reason, proc, data)


HELP_ALL = "--help=all"
# How a CLI refuses `--help=all`: argparse's help action takes no value ("ignored explicit
# argument 'all'"), argparse without such an option, click, optparse. Only these count as a
# refusal; any other failure of `--help=all` stays a failure.
_HELP_ALL_REFUSED = re.compile(
    r"ignored explicit argument '?all'?"
    r"|unrecognized arguments?:.*--help=all"
    r"|no such option:? '?--help"
    r"|(unknown|unrecognized) option:? '?--help=all"
    r"|option '?--help'? does not take a value"
)


def _plain_help(command: list[str]) -> list[str]:
    """The command asking for `--help` where it asked for `--help=all` (inside a -c too)."""
    return [part.replace(HELP_ALL, "--help") for part in command]


def _flag_listed(flag: str, text: str) -> bool:
    return re.search(r"(?<![\w-])" + re.escape(flag) + r"(?![\w-])", text) is not None


def check_cli(probe: dict[str, Any], default_timeout: float) -> dict[str, Any]:
    """A CLI probe, with its declared environmental failure and fallback if it has one.

    A command that asks for `--help=all` (vLLM's whole help; plain `--help` prints only the
    groups) falls back to `--help` only when the CLI refuses `--help=all` itself, and the
    check then says in its scope that the help it read was the plain one.
    """
    name = "cli:" + str(probe["name"])
    timeout_s = float(probe.get("timeout_s") or default_timeout)
    flags = [str(f) for f in probe.get("flags", [])]
    proves = "`%s` parses its arguments and its help lists %s." % (
        " ".join(probe["command"]),
        ", ".join(flags) or "no particular flag",
    )
    refusals: list[dict[str, Any]] = []

    def attempt(
        command: list[str], env: dict[str, str], want: list[str]
    ) -> tuple[dict[str, Any], str | None, str]:
        argv = [sys.executable if part == PYTHON_PLACEHOLDER else part for part in command]
        proc = run_process(argv, timeout_s, env=env)
        if proc["timed_out"]:
            return proc, TIMEOUT, "killed after %ss" % timeout_s
        if proc["spawn_error"]:
            return proc, FAIL, "could not start: " + proc["spawn_error"]
        text = decode(proc["stdout"])[0] + "\n" + decode(proc["stderr"])[0]
        if proc["exit_code"] != 0:
            return proc, FAIL, "exited %s" % proc["exit_code"]
        missing = [f for f in want if not _flag_listed(f, text)]
        if missing:
            return proc, FAIL, "help does not list " + ", ".join(missing)
        return proc, None, "help lists " + (", ".join(want) or "(no flags required)")

    def attempt_help(
        command: list[str], env: dict[str, str], want: list[str]
    ) -> tuple[dict[str, Any], str | None, str]:
        """attempt(), retried with `--help` when (and only when) `--help=all` is refused."""
        proc, failure, reason = attempt(command, env, want)
        if failure != FAIL or proc["exit_code"] in (0, None):
            return proc, failure, reason
        if not any(HELP_ALL in part for part in command):
            return proc, failure, reason
        text = decode(proc["stdout"])[0] + "\n" + decode(proc["stderr"])[0]
        if not _HELP_ALL_REFUSED.search(text):
            return proc, failure, reason
        refused = render_output(proc)
        refused["reason"] = reason
        refusals.append(refused)
        proc, failure, reason = attempt(_plain_help(command), env, want)
        return proc, failure, "`--help=all` refused, read `--help`: " + reason

    def scoped(data: dict[str, Any]) -> tuple[dict[str, Any], str]:
        data["help_read"] = (
            "--help"
            if refusals
            else (HELP_ALL if any(HELP_ALL in part for part in probe["command"]) else "as given")
        )
        if not refusals:
            return data, proves
        data["help_all_refused"] = refusals
        return data, proves + (
            " The CLI refused `--help=all` (its output is kept), so the help read is plain "
            "`--help`'s, which may list fewer flags than the whole help."
        )

    proc, failure, reason = attempt_help(
        list(probe["command"]), dict(probe.get("env") or {}), flags
    )
    if failure is None:
        data, scope = scoped({"flags": flags})
        return check_result(name, "cli", PASS, reason, proc, data, scope)
    envfail = probe.get("environmental_failure")
    text = decode(proc["stdout"])[0] + "\n" + decode(proc["stderr"])[0]
    if failure == FAIL and envfail and re.search(str(envfail["pattern"]), text):
        fallback = envfail["fallback"]
        fb_flags = [str(f) for f in fallback.get("flags") or flags]
        fb_proc, fb_failure, fb_reason = attempt_help(
            list(fallback["command"]), dict(fallback.get("env") or {}), fb_flags
        )
        raw = render_output(proc)
        raw["reason"] = reason
        data, scope = scoped(
            {
                "flags": fb_flags,
                "environmental_failure_pattern": envfail["pattern"],
                "environmental_failure_note": envfail.get("note", ""),
                "raw_failure": raw,
                "fallback_reason": fb_reason,
            }
        )
        if fb_failure is None:
            status, why = (
                DEFERRED,
                (
                    "raw command failed with the known environmental failure %r (kept); the "
                    "fallback passed: %s; GPU CLI deferred" % (envfail["pattern"], fb_reason)
                ),
            )
        else:
            status, why = (
                fb_failure,
                (
                    "raw command failed with %r and the fallback failed too: %s"
                    % (envfail["pattern"], fb_reason)
                ),
            )
        return check_result(name, "cli", status, why, fb_proc, data, scope)
    data, scope = scoped({"flags": flags})
    return check_result(name, "cli", failure, reason, proc, data, scope)


# --------------------------------------------------------------------------- inner checks


def emit(status: str, reason: str, data: dict[str, Any], proves: str | None = None) -> None:
    result: dict[str, Any] = {"status": status, "reason": reason, "data": data}
    if proves is not None:
        result["proves"] = proves
    sys.stdout.write(RESULT_MARKER + json.dumps(result, ensure_ascii=True) + "\n")
    sys.stdout.flush()


def _dist_name(dist: Any) -> str:
    return str(dist.metadata["Name"] or "")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def inner_versions(spec: dict[str, Any]) -> None:
    import importlib.metadata as md

    inventory: list[dict[str, Any]] = []
    by_name: dict[str, str] = {}
    for dist in md.distributions():
        name = _dist_name(dist)
        if not name:
            continue
        version = str(dist.version)
        inventory.append({"name": name, "version": version, "location": str(dist.locate_file(""))})
        by_name.setdefault(_canonical(name), version)
    profile = spec["profile"]
    wanted = [str(n) for n in profile.get("distributions", [])]
    required = [str(n) for n in profile.get("required_distributions", [])]
    versions = {n: by_name.get(_canonical(n)) for n in wanted + required}
    for key, found in sorted(versions.items()):
        print("%s %s" % (key, found if found is not None else "(absent)"))
    inventory.sort(key=lambda d: (_canonical(d["name"]), d["version"]))
    missing = [n for n in required if versions.get(n) is None]
    data = {"versions": versions, "required": required, "inventory": inventory}
    if missing:
        emit(FAIL, "required distribution(s) not installed: " + ", ".join(missing), data)
    else:
        emit(PASS, "%d distributions installed; key versions read" % len(inventory), data)


def inner_find_spec(spec: dict[str, Any]) -> None:
    import importlib.util

    modules = [str(m) for m in spec["profile"].get("modules", [])]
    found: dict[str, Any] = {}
    for module in modules:
        try:
            ms = importlib.util.find_spec(module)
        except (ImportError, ValueError) as exc:
            found[module] = {"found": False, "error": "%s: %s" % (type(exc).__name__, exc)}
        else:
            if ms is None:
                found[module] = {"found": False, "error": None}
            else:
                found[module] = {"found": True, "origin": ms.origin}
        print("find_spec(%r) -> %s" % (module, "found" if found[module]["found"] else "None"))
    missing = [m for m in modules if not found[m]["found"]]
    if not modules:
        emit(SKIPPED, "the profile asserts no modules", {"modules": found})
    elif missing:
        emit(FAIL, "find_spec found no module for: " + ", ".join(missing), {"modules": found})
    else:
        emit(PASS, "all %d asserted modules found" % len(modules), {"modules": found})


def _record_digest(path: str, algorithm: str) -> tuple[str, str]:
    """The file's digest as RECORD writes it (urlsafe base64, no padding), and in hex.

    Some Debian packages (bookworm's python3-blinker) ship a RECORD with hex digests; the
    same bytes hashed the same way match either spelling.
    """
    h = hashlib.new(algorithm)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode("ascii"), h.hexdigest()


class _RecordCheck:
    """Every distribution's RECORD hashed, each difference sorted by what it means."""

    def __init__(self, expected: set[str]) -> None:
        self.expected = expected  # the planned overlays' real paths
        self.expected_seen: set[str] = set()
        self.differ: list[dict[str, Any]] = []
        self.missing: list[dict[str, Any]] = []
        self.missing_bytecode = 0
        self.overlaid: list[dict[str, Any]] = []
        self.no_record: list[str] = []
        self.checked_dists = 0
        self.checked_files = 0
        self.os_managed: list[str] = []
        self.packaging_changes: list[dict[str, Any]] = []
        self.not_applied: list[dict[str, Any]] = []

    def distribution(self, dist: Any) -> None:
        """Hash the files one distribution's RECORD lists; without a RECORD it is noted."""
        name = _dist_name(dist)
        text = dist.read_text("RECORD")
        if text is None:
            self.no_record.append("%s %s" % (name, dist.version))
            return
        # Debian/Ubuntu packages keep the wheel's RECORD but strip the extension modules and
        # move the scripts out of the package; those two changes are the packager's, listed
        # apart. Every other file (the Python sources) must still match.
        from_os = dist.read_text("INSTALLER") is None and bool(
            _OS_SITE.match(str(dist.locate_file("")))
        )
        if from_os:
            self.os_managed.append("%s %s" % (name, dist.version))
        self.checked_dists += 1
        for row in csv.reader(io.StringIO(text)):
            if not row or len(row) < 2 or not row[1]:
                continue  # RECORD itself, and files pip leaves unhashed
            if row[1].partition("=")[0] in hashlib.algorithms_available:
                self._file(dist, name, row[0], row[1], from_os)

    def _file(self, dist: Any, name: str, rel: str, hash_field: str, from_os: bool) -> None:
        algorithm, _, want = hash_field.partition("=")
        path = str(dist.locate_file(rel))
        real = os.path.realpath(path)
        entry = {"distribution": name, "version": dist.version, "path": rel, "file": real}
        if not os.path.exists(path):
            if "__pycache__" in rel and rel.endswith(".pyc"):
                self.missing_bytecode += 1
            elif from_os and (rel.startswith("../") or _BUILD_SCRIPTS.match(rel)):
                # Scripts: moved to /usr/bin, or recorded under the build's scripts-3.X/
                # folder (bookworm's python3-distro); either way the packager's doing.
                entry["change"] = "moved by the OS package"
                self.packaging_changes.append(entry)
            else:
                self.missing.append(entry)
            return
        self.checked_files += 1
        try:
            got, got_hex = _record_digest(path, algorithm)
        except OSError as exc:
            entry["error"] = str(exc)
            self.differ.append(entry)
            return
        if want not in (got, got_hex):
            entry["recorded"] = hash_field
            entry["actual"] = "%s=%s" % (algorithm, got)
            if real in self.expected:
                self.expected_seen.add(real)
                self.overlaid.append(entry)
            elif from_os and _EXTENSION.search(rel):
                entry["change"] = "stripped by the OS package"
                self.packaging_changes.append(entry)
            else:
                self.differ.append(entry)
        elif real in self.expected:
            # A planned overlay whose file still has the original's hash was not applied.
            entry["problem"] = "planned overlay not applied: file matches the original"
            self.expected_seen.add(real)
            self.not_applied.append(entry)

    def print_lines(self) -> None:
        """One human line a file that differs, is missing, or is (or is not) overlaid."""
        for label, entries in (
            ("DIFFERS", self.differ),
            ("MISSING", self.missing),
            ("OVERLAID (expected)", self.overlaid),
            ("OVERLAY NOT APPLIED", self.not_applied),
        ):
            for entry in entries:
                print("%s %s: %s" % (label, entry["distribution"], entry["path"]))

    def data(self) -> dict[str, Any]:
        return {
            "checked_distributions": self.checked_dists,
            "checked_files": self.checked_files,
            "differ": self.differ,
            "missing": self.missing,
            "expected_overlays": self.overlaid,
            "expected_paths_not_in_any_record": sorted(self.expected - self.expected_seen),
            "missing_bytecode_files": self.missing_bytecode,
            "distributions_without_record": sorted(self.no_record),
            "distributions_managed_by_os_packages": sorted(self.os_managed),
            "os_packaging_changes": self.packaging_changes,
            "overlays_not_applied": self.not_applied,
        }

    def verdict(self) -> tuple[str, str]:
        """The check's status and its reason, which says what was hashed."""
        summary = "%d files of %d distributions hashed" % (self.checked_files, self.checked_dists)
        if self.no_record:
            summary += "; %d distributions have no RECORD and were not verified" % len(
                self.no_record
            )
        if self.packaging_changes:
            summary += "; %d files stripped or moved by OS packages (%s), listed apart" % (
                len(self.packaging_changes),
                ", ".join(sorted({e["distribution"] for e in self.packaging_changes})),
            )
        parts = []
        for label, entries in (
            ("differ from RECORD", self.differ),
            ("missing", self.missing),
            ("planned overlay not applied (file still matches RECORD)", self.not_applied),
        ):
            if entries:
                parts.append(
                    label
                    + ": "
                    + ", ".join("%s:%s" % (e["distribution"], e["path"]) for e in entries[:20])
                    + (" and %d more" % (len(entries) - 20) if len(entries) > 20 else "")
                )
        if parts:
            return FAIL, "; ".join(parts) + " (" + summary + ")"
        if self.checked_dists == 0:
            return SKIPPED, "no installer-written RECORD to verify (" + summary + ")"
        if self.overlaid:
            summary += "; %d expected overlay(s) differ as planned" % len(self.overlaid)
        return PASS, summary


def inner_record(spec: dict[str, Any]) -> None:
    import importlib.metadata as md

    check = _RecordCheck({os.path.realpath(str(p)) for p in spec.get("expected_paths", [])})
    for dist in md.distributions():
        check.distribution(dist)
    check.print_lines()
    status, reason = check.verdict()
    emit(status, reason, check.data())


def _arch_flags(torch: Any) -> tuple[list[str], str]:
    """The arches torch was compiled for, without needing a GPU.

    torch.cuda.get_arch_list() returns [] whenever CUDA is not available (no GPU in the
    container), so read the build's arch flags behind it first.
    """
    getter = getattr(getattr(torch, "_C", None), "_cuda_getArchFlags", None)
    if callable(getter):
        flags = getter()
        if flags:
            return [str(a) for a in str(flags).split()], "torch._C._cuda_getArchFlags()"
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and hasattr(cuda, "get_arch_list"):
        return [str(a) for a in cuda.get_arch_list()], "torch.cuda.get_arch_list()"
    return [], "none"


def covers(arch_list: list[str], major: int, minor: int) -> bool:
    """Whether compiled arches run on a device of this compute capability: sm_XY machine code
    on the same major at minor >= Y (sm_90a only on 9.0); compute_XY PTX on any device at or
    above XY (JIT)."""
    cap = major * 10 + minor
    for arch in arch_list:
        match = re.match(r"^(sm|compute)_(\d+)([a-z]?)$", arch)
        if not match:
            continue
        value = int(match.group(2))
        amaj, amin = divmod(value, 10)
        if match.group(1) == "sm":
            if match.group(3):
                if value == cap:
                    return True
            elif amaj == major and amin <= minor:
                return True
        elif value <= cap:
            return True
    return False


def inner_torch(spec: dict[str, Any]) -> None:
    import importlib.util

    req = spec["profile"].get("torch") or {}
    required = bool(req.get("required"))
    arches = [str(a) for a in req.get("arches", [])]
    if importlib.util.find_spec("torch") is None:
        status = FAIL if required or arches else SKIPPED
        reason = "torch is not installed" + (
            " but the profile requires it"
            if status == FAIL
            else " and the profile does not require it"
        )
        emit(status, reason, {"installed": False})
        return
    import torch  # type: ignore[import-not-found,unused-ignore]

    version = str(getattr(torch, "__version__", None))
    cuda_version = getattr(getattr(torch, "version", None), "cuda", None)
    arch_list, source = _arch_flags(torch)
    print("torch %s cuda %s arches %s (%s)" % (version, cuda_version, " ".join(arch_list), source))
    data: dict[str, Any] = {
        "installed": True,
        "version": version,
        "cuda": cuda_version,
        "arch_list": arch_list,
        "arch_list_source": source,
        "required_arches": arches,
    }
    problems: list[str] = []
    compiled = set(arch_list)
    absent = [a for a in arches if a not in compiled and a + "a" not in compiled]
    if arches and cuda_version is None:
        problems.append(
            "torch %s is a CPU-only build (torch.version.cuda is None): required arch(es) %s "
            "cannot be present" % (version, ", ".join(arches))
        )
    elif absent:
        problems.append(
            "compiled arch list [%s] lacks required %s" % (" ".join(arch_list), ", ".join(absent))
        )
    if spec.get("host"):
        devices: list[dict[str, Any]] = []
        available = False
        try:
            available = bool(torch.cuda.is_available())
            for index in range(torch.cuda.device_count() if available else 0):
                major, minor = torch.cuda.get_device_capability(index)
                devices.append(
                    {
                        "index": index,
                        "name": str(torch.cuda.get_device_name(index)),
                        "capability": "%d.%d" % (major, minor),
                        "covered_by_compiled_arches": covers(arch_list, major, minor),
                    }
                )
                print(
                    "device %d %s capability %d.%d covered=%s"
                    % (
                        index,
                        devices[-1]["name"],
                        major,
                        minor,
                        devices[-1]["covered_by_compiled_arches"],
                    )
                )
        except RuntimeError as exc:
            data["device_error"] = str(exc)
            problems.append("could not query the GPU: %s" % exc)
        data["cuda_available"] = available
        data["devices"] = devices
        uncovered = [d for d in devices if not d["covered_by_compiled_arches"]]
        if uncovered:
            problems.append(
                "compiled arches do not cover device capability "
                + ", ".join(d["capability"] for d in uncovered)
            )
        if spec["profile"].get("torch", {}).get("require_gpu") and not devices:
            problems.append("no CUDA device is visible to torch on this host")
    if problems:
        emit(FAIL, "; ".join(problems), data)
    else:
        emit(
            PASS,
            "torch %s, CUDA %s, arches %s%s"
            % (
                version,
                cuda_version,
                " ".join(arch_list) or "(none)",
                "; required %s present" % ", ".join(arches) if arches else "",
            ),
            data,
        )


_AV_FRAMES, _AV_SIZE, _AV_TOLERANCE = 8, 64, 24


def _av_frames_numpy(av: Any, numpy: Any) -> list[Any]:
    """The frames as video loaders hand them to PyAV: RGB numpy arrays, from_ndarray."""
    frames = []
    for i in range(_AV_FRAMES):
        array = numpy.full((_AV_SIZE, _AV_SIZE, 3), (i * 30) % 256, dtype=numpy.uint8)
        frames.append(av.VideoFrame.from_ndarray(array, format="rgb24"))
    return frames


def _av_frames_planes(av: Any) -> list[Any]:
    """The frames written plane by plane as raw bytes (no numpy needed)."""
    frames = []
    for i in range(_AV_FRAMES):
        frame = av.VideoFrame(_AV_SIZE, _AV_SIZE, "yuv420p")
        for index, plane in enumerate(frame.planes):
            plane.update(bytes([(i * 30 + index * 60) % 256]) * plane.buffer_size)
        frames.append(frame)
    return frames


def inner_av(spec: dict[str, Any]) -> None:
    """Encode 8 frames to an in-memory MP4 and decode them back.

    Where numpy is installed the frames go in as loaders make them (numpy arrays through
    VideoFrame.from_ndarray) and come back as arrays (to_ndarray), each frame's grey level
    compared with the one written; without numpy they are raw plane bytes. The check's scope
    (``proves``) names the path it took.
    """
    import importlib.util

    if importlib.util.find_spec("av") is None:
        if "av-roundtrip" in (spec.get("profile") or {}).get("if_installed", []):
            why = "PyAV (module av) is not installed; the profile checks it only where it is"
            emit(SKIPPED, why, {"installed": False})
            return
        emit(FAIL, "PyAV (module av) is not installed: no video decode path", {"installed": False})
        return
    import fractions

    import av  # type: ignore[import-not-found,unused-ignore]

    numpy: Any = None
    if importlib.util.find_spec("numpy") is not None:
        import importlib

        numpy = importlib.import_module("numpy")  # loaders' path; a broken numpy fails here
    if numpy is not None:
        path = "numpy"
        proves = (
            "PyAV encodes 8 frames of 64x64 made from numpy arrays (VideoFrame.from_ndarray, "
            "rgb24, as video loaders hand them over) as MPEG-4 into an in-memory MP4, decodes "
            "8 frames of width 64 back as numpy arrays (to_ndarray) with each frame's grey "
            "level within %d of the one written." % _AV_TOLERANCE
        )
        frames_in = _av_frames_numpy(av, numpy)
    else:
        path = "raw-planes"
        proves = (
            "PyAV encodes 8 frames of 64x64 written as raw yuv420p plane bytes (numpy is not "
            "installed, so the loaders' numpy path, VideoFrame.from_ndarray, was not tested) "
            "as MPEG-4 into an in-memory MP4 and decodes 8 frames of width 64 back."
        )
        frames_in = _av_frames_planes(av)
    buf = io.BytesIO()
    out = av.open(buf, mode="w", format="mp4")
    stream = out.add_stream("mpeg4", rate=_AV_FRAMES)
    stream.width = _AV_SIZE
    stream.height = _AV_SIZE
    stream.pix_fmt = "yuv420p"
    for i, frame in enumerate(frames_in):
        frame.pts = i
        frame.time_base = fractions.Fraction(1, _AV_FRAMES)
        for packet in stream.encode(frame):
            out.mux(packet)
    for packet in stream.encode():
        out.mux(packet)
    out.close()
    size = len(buf.getvalue())
    buf.seek(0)
    inp = av.open(buf, mode="r")
    frames = list(inp.decode(video=0))
    inp.close()
    widths = sorted({f.width for f in frames})
    data: dict[str, Any] = {
        "av_version": str(av.__version__),
        "path": path,
        "numpy_version": str(numpy.__version__) if numpy is not None else None,
        "mp4_bytes": size,
        "frames": len(frames),
        "widths": widths,
    }
    problems = []
    if len(frames) != _AV_FRAMES or widths != [_AV_SIZE]:
        problems.append(
            "decoded %d frames of widths %s, expected %d of width %d"
            % (len(frames), widths, _AV_FRAMES, _AV_SIZE)
        )
    if numpy is not None:
        levels = []
        shapes = set()
        for frame in frames:
            array = frame.to_ndarray(format="rgb24")
            shapes.add(tuple(int(n) for n in array.shape))
            levels.append(int(round(float(array.mean()))))
        data["shapes"] = sorted(list(s) for s in shapes)
        data["grey_levels"] = levels
        wanted = [(i * 30) % 256 for i in range(_AV_FRAMES)]
        off = [
            "frame %d: %d for %d" % (i, levels[i], wanted[i])
            for i in range(min(len(levels), len(wanted)))  # zip(strict=) is 3.10+
            if abs(levels[i] - wanted[i]) > _AV_TOLERANCE
        ]
        if shapes != {(_AV_SIZE, _AV_SIZE, 3)}:
            problems.append("to_ndarray gave shapes %s, expected (64, 64, 3)" % sorted(shapes))
        if off and not problems:
            problems.append("decoded grey levels differ from those written: " + ", ".join(off))
    how = (
        "through numpy %s (from_ndarray/to_ndarray)" % numpy.__version__
        if numpy is not None
        else "raw plane bytes, numpy not installed"
    )
    if not problems:
        print("AV_ROUNDTRIP_PASS %d" % len(frames))
        emit(
            PASS,
            "AV_ROUNDTRIP_PASS 8 (PyAV %s, %d-byte MP4, %s)" % (av.__version__, size, how),
            data,
            proves,
        )
    else:
        print("AV_ROUNDTRIP_FAIL %d" % len(frames))
        emit(FAIL, "; ".join(problems) + " (" + how + ")", data, proves)


def inner_model_sources(spec: dict[str, Any]) -> None:
    import importlib.util

    wanted = spec["profile"].get("model_sources", [])
    results: list[dict[str, Any]] = []
    for item in wanted:
        package, pattern = str(item["package"]), str(item["glob"])
        try:
            ms = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            ms = None
        roots = list(ms.submodule_search_locations or []) if ms is not None else []
        matches: list[str] = []
        for root in roots:
            for dirpath, _dirs, files in os.walk(root):
                for fname in files:
                    rel = os.path.relpath(os.path.join(dirpath, fname), root)
                    if fnmatch.fnmatch(rel.lower(), pattern.lower()) or fnmatch.fnmatch(
                        fname.lower(), pattern.lower()
                    ):
                        matches.append(os.path.join(dirpath, fname))
        matches.sort()
        for m in matches:
            print("%s: %s" % (package, m))
        results.append(
            {"package": package, "glob": pattern, "package_found": bool(roots), "matches": matches}
        )
    if not wanted:
        emit(SKIPPED, "the profile names no model source files", {"sources": results})
        return
    empty = [r for r in results if not r["matches"]]
    if empty:
        emit(
            FAIL,
            "no file matches "
            + ", ".join(
                "%s in %s%s"
                % (r["glob"], r["package"], "" if r["package_found"] else " (package absent)")
                for r in empty
            ),
            {"sources": results},
        )
    else:
        emit(
            PASS,
            "; ".join("%s: %d file(s)" % (r["glob"], len(r["matches"])) for r in results),
            {"sources": results},
        )


_INNER: dict[str, Callable[[dict[str, Any]], None]] = {
    "versions": inner_versions,
    "find-spec": inner_find_spec,
    "record": inner_record,
    "torch": inner_torch,
    "av-roundtrip": inner_av,
    "model-sources": inner_model_sources,
}


# --------------------------------------------------------------------------- orchestration


def plan_checks(spec: dict[str, Any]) -> list[tuple[str, Callable[[], dict[str, Any]]]]:
    profile = spec["profile"]
    timeouts = dict(profile.get("timeouts") or {})
    default = float(timeouts.get("default", DEFAULT_TIMEOUT_S))

    def limit(kind: str) -> float:
        return float(timeouts.get(kind, default))

    checks: list[tuple[str, Callable[[], dict[str, Any]]]] = []
    switched_off = {
        "av-roundtrip": not profile.get("video", True),
        "record": not profile.get("record", True),
    }
    for kind in ("versions", "find-spec", "record", "torch", "av-roundtrip", "model-sources"):
        if switched_off.get(kind):
            checks.append(
                (
                    kind,
                    lambda kind=kind: check_result(  # type: ignore[misc]
                        kind, kind, SKIPPED, "the profile turns this check off", None
                    ),
                )
            )
            continue
        checks.append(
            (kind, lambda kind=kind: run_inner(kind, kind, spec, limit(kind)))  # type: ignore[misc]
        )
    if profile.get("pip_check", True):
        checks.insert(1, ("pip-check", lambda: check_pip(spec, limit("pip-check"))))
    else:
        off = check_result(
            "pip-check", "pip-check", SKIPPED, "the profile turns this check off", None
        )
        checks.insert(1, ("pip-check", lambda: off))
    checks.extend(
        ("cli:" + str(probe["name"]), lambda probe=probe: check_cli(probe, limit("cli")))  # type: ignore[misc]
        for probe in profile.get("cli", [])
    )
    return checks


def run_all(spec: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    checks = plan_checks(spec)
    results: dict[str, dict[str, Any]] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(checks))) as pool:
        futures = {pool.submit(fn): name for name, fn in checks}
        for future in concurrent.futures.as_completed(futures):
            name = futures[future]
            try:
                results[name] = future.result()
            except Exception as exc:  # noqa: BLE001 - one broken check must not hide the others
                results[name] = check_result(
                    name,
                    name.split(":")[0],
                    FAIL,
                    "probe error: %s: %s" % (type(exc).__name__, exc),
                    None,
                )
    return {
        "probe_version": PROBE_VERSION,
        "mode": "host" if spec.get("host") else "container",
        "profile": spec["profile"].get("name"),
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
        },
        "platform": {"machine": platform.machine(), "system": platform.system()},
        "environment": {
            k: os.environ.get(k)
            for k in (
                "CUDA_VISIBLE_DEVICES",
                "NVIDIA_VISIBLE_DEVICES",
                "HF_HUB_OFFLINE",
                "TRANSFORMERS_OFFLINE",
            )
        },
        "output_cap_bytes": OUTPUT_CAP,
        "duration_s": round(time.monotonic() - started, 3),
        "checks": [results[name] for name, _ in checks],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="imagekit in-image probe")
    parser.add_argument("--spec-json", help="the audit spec as JSON")
    parser.add_argument("--spec-file", help="read the audit spec from this JSON file")
    parser.add_argument("--host", action="store_true", help="also query the GPU (host mode)")
    parser.add_argument("--inner", choices=sorted(_INNER), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inner:
        _INNER[args.inner](json.loads(sys.stdin.read()))
        return 0
    if args.spec_json:
        spec = json.loads(args.spec_json)
    elif args.spec_file:
        with open(args.spec_file, encoding="utf-8") as fh:
            spec = json.load(fh)
    else:
        parser.error("give --spec-json or --spec-file")
    spec["host"] = bool(args.host or spec.get("host"))
    report = run_all(spec)
    sys.stdout.write(json.dumps(report, ensure_ascii=True, sort_keys=True) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
