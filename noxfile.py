"""The one entry point for checks: make targets and CI call these sessions.

Sessions run in the project's .venv (made by scripts/setup-host.sh) instead of building their
own: the machines here reach only the package index, and one environment keeps the tests and
the type check on the same pinned versions.
"""

from __future__ import annotations

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


@nox.session
def tests(session: nox.Session) -> None:
    session.run(PY, "-m", "pytest", "-q", "-ra", "--durations=15", *session.posargs)


BENCHMARKS = {"mirror": "bench.run", "assemble": "bench.assemble"}


@nox.session
def bench(session: nox.Session) -> None:
    """Every benchmark, or the one named first (`nox -s bench -- assemble --scale 0.1`)."""
    args = list(session.posargs)
    names = [args.pop(0)] if args and args[0] in BENCHMARKS else list(BENCHMARKS)
    for name in names:
        session.run(PY, "-m", BENCHMARKS[name], *args)
