"""The engine images a test made (under tags of its own), removed by name afterwards, the
containers a test left, and a pipeline run into fresh registries with the images it made
written down for that removal.

Removal is by reference, never by image ID: the engine is shared, and an ID can stand under
another test's tag too (the base image above all). A reference that is already gone (a stage
that did not run never made it) is not an error.
"""

from __future__ import annotations

import io
import secrets
import subprocess
import tarfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from imagekit.flows.pipeline import PipelineOptions, PipelineResult, run_pipeline
from imagekit.runtime.engine import Engine
from imagekit.workspace import Workspace
from tests.support.registries import RunningRegistry


def containers(engine: Engine, where: str) -> list[str]:
    """The IDs of the engine's containers, running or not, that ``where`` (a ``docker ps``
    filter: ``label=K=V``, ``ancestor=IMAGE``) selects."""
    listed = subprocess.run(
        [engine.client_path, "ps", "-aq", "--filter", where],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return listed.stdout.split()


@contextmanager
def removing(engine: Engine, *, force: bool = False) -> Iterator[list[str]]:
    """A list to append references to; each is removed (``rmi``, ``-f`` if asked) at the end."""
    refs: list[str] = []
    try:
        yield refs
    finally:
        flags = ["-f"] if force else []
        for ref in refs:
            subprocess.run(
                [engine.client_path, "rmi", *flags, ref], capture_output=True, check=False
            )


def new_tag(name: str, made: list[str]) -> str:
    """A tag of its own for this build of ``name`` (``imagekit-test/NAME:RANDOM``), put on
    MADE, the list of what the test removes."""
    tag = f"imagekit-test/{name}:{secrets.token_hex(4)}"
    made.append(tag)
    return tag


def remember_images(result_json: Mapping[str, Any], refs: list[str]) -> None:
    """Add what a pipeline run (its JSON document) left in the engine to ``refs``: the build's
    tag, the tag its push gave it, and the final pull's reference."""
    stages = {s["stage"]: s for s in result_json["stages"]}
    tag = stages["build"]["data"].get("tag")
    if tag:
        refs.append(tag)
        suffix = tag.rpartition(":")[2]
        refs.append(f"{result_json['registry']}:{suffix}")
    final = result_json.get("final_reference")
    if final:
        refs.append(str(final))


def pipeline_into_fresh_registries(
    workspace: Workspace,
    plan: str,
    base: str,
    make_registry: Callable[..., RunningRegistry],
    refs: list[str],
    *,
    profile: str | None = None,
) -> PipelineResult:
    """``run_pipeline`` of ``plan`` on ``base`` into a new push registry and a new mirror;
    what it made in the engine is added to ``refs``."""
    push_to, mirror_to = make_registry("none"), make_registry("none")
    result = run_pipeline(
        workspace,
        plan,
        PipelineOptions(
            registry=push_to.host, mirror=mirror_to.host, base_override=base, profile=profile
        ),
    )
    remember_images(result.to_json(), refs)
    return result


def merged_filesystem(
    engine: Engine, ref: str, pulled: list[str]
) -> dict[str, tarfile.TarInfo | bytes]:
    """The image's filesystem as the engine applies its layers (``docker export`` of a
    container made from it): path -> bytes for a regular file (its TarInfo at path#info),
    TarInfo for anything else. ``ref`` is added to ``pulled`` for removal afterwards."""
    pulled.append(ref)
    subprocess.run([engine.client_path, "pull", "-q", ref], check=True, capture_output=True)
    created = subprocess.run(
        [engine.client_path, "create", "--network", "none", ref, "/nothing"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    try:
        exported = subprocess.run(
            [engine.client_path, "export", created], check=True, capture_output=True
        ).stdout
    finally:
        subprocess.run([engine.client_path, "rm", created], capture_output=True, check=False)
    found: dict[str, tarfile.TarInfo | bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(exported)) as tar:
        for member in tar:
            name = member.name.rstrip("/")
            if member.isreg():
                data = tar.extractfile(member)
                found[name] = data.read() if data else b""
                found[name + "#info"] = member
            else:
                found[name] = member
    return found
