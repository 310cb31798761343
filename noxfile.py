"""The one entry point for checks: make targets and CI call these sessions.

Sessions run in the project's .venv (made by scripts/setup-host.sh) instead of building their
own: the machines here reach only the package index, and one environment keeps the tests and
the type check on the same pinned versions.
"""

from __future__ import annotations

import os
import sys

import nox

# The interpreter running nox is the project's .venv one; calling tools through it (instead
# of whatever `python` or `pytest` comes first on PATH) keeps every session in that venv.
PY = sys.executable

nox.options.default_venv_backend = "none"
nox.options.sessions = ["lint", "typecheck", "tests"]


@nox.session
def lint(session: nox.Session) -> None:
    session.run(PY, "-m", "ruff", "check", ".")
    session.run(PY, "-m", "ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    session.run(PY, "-m", "mypy", "--strict", "imagekit")
    # The tests too, but for the stand-in packages they install into images: those mimic
    # other projects' modules (torch, vllm) and would shadow the real names for mypy.
    session.run(
        PY, "-m", "mypy", "--strict", "tests", "--exclude", "tests/(fixtures|support/replica_pkgs)/"
    )


@nox.session
def tests(session: nox.Session) -> None:
    """The whole suite on IMAGEKIT_TEST_WORKERS workers (2 by default; 0 runs it in this one
    process). Most of a test's time is spent waiting on the engine, BuildKit and registries,
    so two workers on two cores finish the suite in about two thirds of the time; each test
    file stays whole on one worker (the units and their order: tests/conftest.py)."""
    workers = os.environ.get("IMAGEKIT_TEST_WORKERS", "2")
    # -n 0 keeps xdist loaded (tests/conftest.py implements one of its hooks) and runs here.
    spread = ["-n", workers, "--dist", "loadfile", "--no-loadscope-reorder"]
    session.run(PY, "-m", "pytest", "-q", "-ra", "--durations=15", *spread, *session.posargs)


#: `nox -s bench` runs every benchmark; `nox -s bench -- NAME [ARGS]` runs one, with its args.
BENCHMARKS = {
    "mirror": "bench.run",
    "osv": "bench.osv",
    "assemble": "bench.assemble",
    "ledger": "bench.ledger",
    "attest": "bench.attest",
    "remote": "bench.remote",
    "peers": "bench.peers",
}


@nox.session
def bench(session: nox.Session) -> None:
    """Every benchmark, or the one named first (`nox -s bench -- assemble --scale 0.1`)."""
    args = list(session.posargs)
    if args and args[0] in BENCHMARKS:
        session.run(PY, "-m", BENCHMARKS[args[0]], *args[1:])
        return
    session.run(PY, "-m", BENCHMARKS["mirror"], *args)  # plain args: the mirror's, as before
    session.run(PY, "-m", BENCHMARKS["osv"])
    session.run(PY, "-m", BENCHMARKS["assemble"])
    session.run(PY, "-m", BENCHMARKS["ledger"])
    session.run(PY, "-m", BENCHMARKS["attest"])
    session.run(PY, "-m", BENCHMARKS["remote"])
    session.run(PY, "-m", BENCHMARKS["peers"])
