"""What the builders of a plan's rendered Dockerfile share before and while BuildKit runs it.

The engine (imagekit.builders.buildkit), a BuildKit daemon of the build's own
(imagekit.builders.remote) and a plan of several platforms (imagekit.builders.platforms) each keep
the rendered files in the build's evidence folder, stage a context of only those files and
the overlay files the Dockerfile copies, hand pip its CA bundle and package index as secret
mounts, and stream their client's output into the build log. One way each, here, so the
three cannot drift apart on what a build sees or what its log keeps.

The package index URL (``--index-url`` or $PIP_INDEX_URL) travels as the secret
``pip_index``, read from a 0600 file in the temporary folder next to the context (not in it):
a build argument would be recorded in the image's history (see imagekit.plans.render). It is
never on a command line, in the log header or in the ledger.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from imagekit.builders.options import BuildOptions
from imagekit.errors import UsageError
from imagekit.evidence import new_run_dir, write_bytes
from imagekit.plans.model import LoadedPlan
from imagekit.plans.render import PIP_CA_SECRET, PIP_INDEX_SECRET, Rendered
from imagekit.workspace import Workspace

DEFAULT_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
CA_ENV = "IMAGEKIT_PIP_CA"


def ca_bundle(options: BuildOptions) -> Path | None:
    """The CA bundle pip should trust inside RUN steps: flag, $IMAGEKIT_PIP_CA, host default."""
    if options.ca_bundle is not None:
        chosen = options.ca_bundle
    elif os.environ.get(CA_ENV):
        chosen = Path(os.environ[CA_ENV])
    elif DEFAULT_CA_BUNDLE.is_file():
        return DEFAULT_CA_BUNDLE
    else:
        return None
    if not chosen.is_file():
        raise UsageError(
            f"the CA bundle {chosen} is not a file",
            hint=f"give --ca-bundle PATH or set {CA_ENV} to a PEM bundle",
        )
    return chosen


@dataclass(frozen=True)
class PipSecrets:
    """What pip inside the build's RUN steps is given as secrets: the CA bundle it trusts and
    the package index it reads (``--index-url`` or $PIP_INDEX_URL), either possibly none."""

    ca: Path | None
    index_url: str | None

    @classmethod
    def of(cls, options: BuildOptions) -> PipSecrets:
        """The options' secrets; a CA bundle that is not a file is exit 2 before any build."""
        return cls(ca_bundle(options), options.index_url or os.environ.get("PIP_INDEX_URL") or None)


def new_build_dir(workspace: Workspace, loaded: LoadedPlan, rendered: Rendered) -> Path:
    """The build's evidence folder, holding the rendered and staged files it builds (from this
    render and this imagekit, not from the committed copies, so the evidence is what the build
    ran, the assertion checker included)."""
    run_dir = new_run_dir(workspace.evidence_dir, loaded.name)
    for name, data in rendered.context_files().items():
        write_bytes(run_dir / name, data)
    return run_dir


def stage_context(rendered: Rendered, into: Path) -> None:
    """Only the rendered files, the files staged from imagekit (the assertion checker) and the
    overlay files the Dockerfile copies go into the context.

    The rendered files come from this render, not from the committed copies, so a build runs
    exactly the checks of the plan it records; the checker comes from the package, never from
    the plan's folder, so a stale copy committed there cannot run.
    """
    for name, data in rendered.context_files().items():
        (into / name).write_bytes(data)
    for relative, source in rendered.sources:
        target = into / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        shutil.copymode(source, target)


@dataclass(frozen=True)
class Staged:
    """A build's temporary folder: the context in it, and the secret mounts beside it."""

    folder: Path
    context: Path
    #: ``id=NAME,src=PATH`` for each of pip's secrets given, as BuildKit's clients take them
    secrets: tuple[str, ...]


@contextmanager
def staged(rendered: Rendered, pip: PipSecrets) -> Iterator[Staged]:
    """The context staged in a temporary folder, removed on the way out (an interrupted
    build too); the index URL written to a 0600 file beside the context, never in it."""
    with tempfile.TemporaryDirectory(prefix="imagekit-build-") as tmp:
        folder = Path(tmp)
        context = folder / "context"
        context.mkdir()
        stage_context(rendered, context)
        mounts: list[tuple[str, Path]] = []
        if pip.ca is not None:
            mounts.append((PIP_CA_SECRET, pip.ca))
        if pip.index_url:
            index_file = folder / "pip-index-url"
            fd = os.open(index_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(pip.index_url)
            mounts.append((PIP_INDEX_SECRET, index_file))
        yield Staged(folder, context, tuple(f"id={name},src={path}" for name, path in mounts))


class Tee:
    """Stream build output to stderr and the evidence log, line by line, as it comes."""

    def __init__(self, log_file: TextIO, echo: TextIO) -> None:
        self.log_file = log_file
        self.echo = echo
        self.lines: list[str] = []

    def write(self, text: str) -> None:
        for line in text.splitlines():
            self.lines.append(line)
        self.log_file.write(text)
        self.log_file.flush()
        self.echo.write(text)
        self.echo.flush()

    def stream(self, cmd: list[str], *, env: dict[str, str] | None = None) -> None:
        """Run a BuildKit client (:func:`stream_client`), its output into this log."""
        for line in stream_client(cmd, env=env or {}):
            self.write(line.decode("utf-8", errors="replace"))


def stream_client(cmd: list[str], *, env: dict[str, str]) -> Iterator[bytes]:
    """The client's output lines (stderr, where BuildKit writes, merged into stdout).

    DockerException with the last lines when it exits non-zero. However the reading stops
    (an interrupt, an error in the caller), a client still running is stopped: SIGTERM first,
    on which it cancels the build, then SIGKILL.
    """
    proc = subprocess.Popen(  # noqa: S603 - the engine's client, fixed arguments, no shell
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, **env}
    )
    tail: list[bytes] = []
    try:
        assert proc.stdout is not None  # noqa: S101 - stdout=PIPE
        for line in iter(proc.stdout.readline, b""):
            tail = [*tail[-49:], line]
            yield line
        code = proc.wait()
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    if code != 0:
        from python_on_whales.exceptions import DockerException

        raise DockerException(cmd, code, stderr=b"".join(tail))
