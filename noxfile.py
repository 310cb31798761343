"""The one entry point for checks: make targets and CI call these sessions.

Sessions run in the project's .venv (made by scripts/setup-host.sh) instead of building their
own: the machines here reach only the package index, and one environment keeps the tests and
the type check on the same pinned versions.
"""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "none"
nox.options.sessions = ["lint", "typecheck", "tests"]


@nox.session
def lint(session: nox.Session) -> None:
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    session.run("mypy", "--strict", "imagekit")


@nox.session
def tests(session: nox.Session) -> None:
    session.run("pytest", "-q", "-ra", "--durations=15", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    session.run("python", "-m", "bench.run", *session.posargs)
