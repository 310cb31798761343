"""The new image's config and manifest, made from the base's own documents.

The config is the base config's JSON with only what the plan says changed. It is read with
every field kept (the pydantic models read only the fields imagekit needs, and Docker's legacy
fields, vendors' extensions and fields of specs yet to come must survive a build), refused
when a key appears twice in one object or a number is not finite (either would make its
meaning depend on the reader), and changed in place:

- ``created`` and each new history entry: the build's epoch;
- ``config.Env``: a variable the plan sets replaces the base's in place, else is appended
  (what ENV does); ``config.Labels``: the plan's labels, then imagekit's four (the base's
  name and digest, the plan and its sha256), as the engine path's LABEL lines;
- ``config.Entrypoint`` / ``config.Cmd``: as ENTRYPOINT and CMD do; an ENTRYPOINT clears a
  CMD the base set unless the plan sets one too (Docker's documented rule);
- ``rootfs.diff_ids``: the overlay layer's diffID appended, and one history entry for it
  (plus an ``empty_layer`` entry for each metadata step), when the base keeps a history.

The manifest is in the base's own media-type family (a Docker schema 2 base gives a schema 2
image, an OCI base an OCI one), with the base's layer descriptors copied as they were, urls
and annotations included, and the OCI base annotations
(https://github.com/opencontainers/image-spec/blob/main/annotations.md) on an OCI manifest.
Everything is serialised compactly with keys in the order read, so the same inputs give the
same bytes.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from imagekit import jsondoc
from imagekit.builders.assemble.layer import LayerBlob
from imagekit.errors import ImageContentError
from imagekit.plans.steps import Cmd, Entrypoint, Env, Labels, Overlay, Step
from imagekit.refs import Digest, Platform
from imagekit.registry.manifest import (
    DOCKER_MANIFEST,
    DOCKER_MANIFEST_LIST,
    OCI_INDEX,
    OCI_MANIFEST,
)
from imagekit.registry.transport import MAX_MANIFEST_BYTES

OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
DOCKER_LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
BASE_NAME = "org.opencontainers.image.base.name"
BASE_DIGEST = "org.opencontainers.image.base.digest"
HISTORY_COMMENT = "imagekit build --builder registry"


def load_document(data: bytes, what: str, *, registry: str, repository: str) -> dict[str, Any]:
    """A JSON object with every field kept; refused when ambiguous."""

    # Fetched by digest: these are the base's own bytes, so a refusal is about its content.
    def refused(problem: str) -> ImageContentError:
        return ImageContentError(
            f"{registry}/{repository}: the base {what} {problem}",
            registry=registry,
            repository=repository,
        )

    try:
        document = jsondoc.loads(data, limit=MAX_MANIFEST_BYTES)
    except jsondoc.JsonRefused as exc:
        raise refused(f"cannot be edited safely: {exc}") from None
    if not isinstance(document, dict):
        raise refused("is not a JSON object")
    return document


def dump(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


def rfc3339(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class ConfigChanges:
    """What a registry build changes in the base config."""

    steps: Sequence[Step]
    imagekit_labels: dict[str, str]
    epoch: int
    layer: LayerBlob | None
    layer_history: str  # created_by of the overlay layer's history entry


def _set_env(env: list[str], key: str, value: str) -> None:
    for i, item in enumerate(env):
        if item.partition("=")[0] == key:
            env[i] = f"{key}={value}"
            return
    env.append(f"{key}={value}")


def edit_config(base: dict[str, Any], changes: ConfigChanges) -> dict[str, Any]:
    """The new config: the base's (a copy), changed only where the plan says."""
    document: dict[str, Any] = copy.deepcopy(base)
    created = rfc3339(changes.epoch)
    document["created"] = created
    config = document.get("config")
    if not isinstance(config, dict):
        config = {}
        document["config"] = config
    history = document.get("history")
    keep_history = isinstance(history, list)
    entries: list[dict[str, Any]] = []
    cmd_set = False
    layer_logged = False
    for step in changes.steps:
        if isinstance(step, Overlay):
            if not layer_logged and changes.layer is not None:
                entries.append(
                    {"created": created, "created_by": changes.layer_history,
                     "comment": HISTORY_COMMENT}
                )  # fmt: skip
                layer_logged = True
            continue
        if isinstance(step, Env):
            env = config.get("Env")
            env = list(env) if isinstance(env, list) else []
            for key, value in step.vars.items():
                _set_env(env, key, value)
            config["Env"] = env
            what = "ENV " + " ".join(f"{k}={v}" for k, v in step.vars.items())
        elif isinstance(step, Labels):
            labels = config.get("Labels")
            labels = dict(labels) if isinstance(labels, dict) else {}
            labels.update(step.labels)
            config["Labels"] = labels
            what = "LABEL " + " ".join(f"{k}={v}" for k, v in step.labels.items())
        elif isinstance(step, Entrypoint):
            config["Entrypoint"] = list(step.argv)
            if not cmd_set:
                config["Cmd"] = None
            what = "ENTRYPOINT " + json.dumps(step.argv)
        elif isinstance(step, Cmd):
            config["Cmd"] = list(step.argv)
            cmd_set = True
            what = "CMD " + json.dumps(step.argv)
        else:  # pragma: no cover - the builder refuses other steps first
            raise TypeError(f"{type(step).__name__} is not a registry build step")
        entries.append(
            {"created": created, "created_by": what, "comment": HISTORY_COMMENT,
             "empty_layer": True}
        )  # fmt: skip
    labels = config.get("Labels")
    labels = dict(labels) if isinstance(labels, dict) else {}
    labels.update(changes.imagekit_labels)
    config["Labels"] = labels
    entries.append(
        {"created": created, "created_by": "LABEL " + " ".join(
            f"{k}={v}" for k, v in changes.imagekit_labels.items()),
         "comment": HISTORY_COMMENT, "empty_layer": True}
    )  # fmt: skip
    if changes.layer is not None:
        rootfs = document.get("rootfs")
        if not isinstance(rootfs, dict) or not isinstance(rootfs.get("diff_ids"), list):
            raise ValueError("the base config has no rootfs.diff_ids list")
        rootfs["diff_ids"] = [*rootfs["diff_ids"], str(changes.layer.diff_id)]
    if keep_history:
        assert isinstance(history, list)  # noqa: S101 - checked above
        document["history"] = [*history, *entries]
    return document


def layer_media_type(manifest_media_type: str) -> str:
    return DOCKER_LAYER_GZIP if manifest_media_type == DOCKER_MANIFEST else OCI_LAYER_GZIP


def image_manifest(
    base: dict[str, Any],
    media_type: str,
    *,
    config_media_type: str,
    config: bytes,
    layer: LayerBlob | None,
    annotations: dict[str, str],
) -> bytes:
    """The new manifest: the base's layers as they were, then the overlay layer."""
    document: dict[str, Any] = {"schemaVersion": 2}
    if "mediaType" in base or media_type == DOCKER_MANIFEST:
        document["mediaType"] = media_type
    document["config"] = {
        "mediaType": config_media_type,
        "digest": str(Digest.of_bytes(config)),
        "size": len(config),
    }
    layers = list(base.get("layers") or [])
    if layer is not None:
        layers.append(
            {"mediaType": layer_media_type(media_type), "digest": str(layer.digest),
             "size": layer.size}
        )  # fmt: skip
    document["layers"] = layers
    if media_type == OCI_MANIFEST and annotations:
        document["annotations"] = dict(annotations)
    return dump(document)


def image_index(manifest: bytes, media_type: str, platform: Platform) -> tuple[bytes, str]:
    """An index (or Docker manifest list) holding the one manifest; (bytes, media type)."""
    index_type = DOCKER_MANIFEST_LIST if media_type == DOCKER_MANIFEST else OCI_INDEX
    entry_platform: dict[str, str] = {
        "architecture": platform.architecture,
        "os": platform.os,
    }
    if platform.variant:
        entry_platform["variant"] = platform.variant
    document = {
        "schemaVersion": 2,
        "mediaType": index_type,
        "manifests": [
            {
                "mediaType": media_type,
                "digest": str(Digest.of_bytes(manifest)),
                "size": len(manifest),
                "platform": entry_platform,
            }
        ],
    }
    return dump(document), index_type
