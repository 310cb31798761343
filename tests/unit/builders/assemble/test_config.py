"""The config and manifest a registry build writes: the base's, changed only where the plan says."""

from __future__ import annotations

import json
from typing import Any

import pytest

from imagekit.builders.assemble.config import (
    ConfigChanges,
    dump,
    edit_config,
    image_index,
    image_manifest,
    load_document,
)
from imagekit.builders.assemble.layer import LayerBlob
from imagekit.errors import ImageContentError
from imagekit.plans.steps import Cmd, Entrypoint, Env, Labels, Overlay, Replaces
from imagekit.refs import Digest, Platform

LAYER = LayerBlob(Digest("sha256:" + "1" * 64), Digest("sha256:" + "2" * 64), 100, 10240, 1, 2)
LABELS = {"io.imagekit.plan": "p", "io.imagekit.plan-sha256": "3" * 64}


def _base() -> dict[str, Any]:
    return load_document(
        json.dumps(
            {
                "architecture": "arm64",
                "variant": "v8",
                "os": "linux",
                "created": "2025-01-01T00:00:00Z",
                "x-vendor": {"n": [1, 2.5, None]},
                "config": {"Env": ["PATH=/usr/bin", "A=1"], "Cmd": ["python3"],
                           "Healthcheck": {"Test": ["NONE"]}, "Labels": {"base": "1"}},
                "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "a" * 64]},
                "history": [{"created_by": "base"}],
            }
        ).encode(),
        "config",
        registry="r",
        repository="x",
    )  # fmt: skip


def _overlay() -> Overlay:
    return Overlay(kind="overlay", source="f", destination="/opt/f", replaces=Replaces(absent=True))


def _changes(*steps: Any, layer: LayerBlob | None = LAYER) -> ConfigChanges:
    return ConfigChanges(list(steps), LABELS, 0, layer, "COPY /opt/f")


def test_only_what_the_plan_says_changes() -> None:
    base = _base()
    after = edit_config(
        base,
        _changes(
            _overlay(),
            Env(kind="env", vars={"A": "2", "B": "3"}),
            Labels(kind="labels", labels={"team": "serving"}),
        ),
    )
    assert base["config"]["Env"] == ["PATH=/usr/bin", "A=1"]  # the base is not touched
    assert after["config"]["Env"] == ["PATH=/usr/bin", "A=2", "B=3"]  # replaced in place
    assert after["config"]["Labels"] == {"base": "1", "team": "serving", **LABELS}
    assert after["config"]["Cmd"] == ["python3"] and after["config"]["Healthcheck"]
    assert after["x-vendor"] == {"n": [1, 2.5, None]} and after["variant"] == "v8"
    assert after["rootfs"]["diff_ids"] == ["sha256:" + "a" * 64, str(LAYER.diff_id)]
    assert after["created"] == "1970-01-01T00:00:00Z"
    history = after["history"]
    assert history[0] == {"created_by": "base"}
    layers = [h for h in history if not h.get("empty_layer")]
    assert len(layers) == 2 and layers[1]["created_by"] == "COPY /opt/f"
    assert list(after) == list(base)  # no field lost, the order kept


def test_entrypoint_clears_the_base_cmd_unless_the_plan_sets_one() -> None:
    entry = Entrypoint(kind="entrypoint", argv=["/launch"])
    cleared = edit_config(_base(), _changes(entry))
    assert cleared["config"]["Entrypoint"] == ["/launch"] and cleared["config"]["Cmd"] is None
    kept = edit_config(_base(), _changes(Cmd(kind="cmd", argv=["--serve"]), entry))
    assert kept["config"]["Cmd"] == ["--serve"]
    after = edit_config(_base(), _changes(entry, Cmd(kind="cmd", argv=["--x"])))
    assert after["config"]["Cmd"] == ["--x"]


def test_a_config_without_history_or_config_section() -> None:
    base = {"architecture": "amd64", "os": "linux", "config": None,
            "rootfs": {"type": "layers", "diff_ids": []}}  # fmt: skip
    after = edit_config(base, _changes(_overlay()))
    assert "history" not in after and after["config"]["Labels"] == LABELS
    assert edit_config(base, _changes(layer=None))["rootfs"]["diff_ids"] == []


@pytest.mark.parametrize(
    "text",
    [b'{"a": 1, "a": 2}', b'{"a": NaN}', b'{"a": 1e999}', b"[1]", b"\xff"],
)
def test_ambiguous_documents_are_refused(text: bytes) -> None:
    with pytest.raises(ImageContentError, match="cannot be edited safely|not a JSON object"):
        load_document(text, "config", registry="r", repository="x")


def test_manifest_families_and_the_index() -> None:
    config = dump({"a": 1})
    foreign = "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"
    base_layers = [
        {"mediaType": foreign, "digest": "sha256:" + "b" * 64, "size": 5, "urls": ["https://x/y"]}
    ]
    docker = json.loads(
        image_manifest(
            {"schemaVersion": 2, "layers": base_layers},
            "application/vnd.docker.distribution.manifest.v2+json",
            config_media_type="application/vnd.docker.container.image.v1+json",
            config=config,
            layer=LAYER,
            annotations={"org.opencontainers.image.base.name": "r/x"},
        )
    )
    assert docker["mediaType"] == "application/vnd.docker.distribution.manifest.v2+json"
    assert docker["layers"][0] == base_layers[0]  # urls kept
    assert docker["layers"][1]["mediaType"] == "application/vnd.docker.image.rootfs.diff.tar.gzip"
    assert "annotations" not in docker  # schema 2 has none
    oci = json.loads(
        image_manifest(
            {"schemaVersion": 2, "layers": [], "annotations": {"base": "only"}},
            "application/vnd.oci.image.manifest.v1+json",
            config_media_type="application/vnd.oci.image.config.v1+json",
            config=config,
            layer=LAYER,
            annotations={"org.opencontainers.image.base.name": "r/x"},
        )
    )
    assert "mediaType" not in oci  # the base named none, so neither do we
    assert oci["annotations"] == {"org.opencontainers.image.base.name": "r/x"}
    assert oci["layers"][0]["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"
    body, kind = image_index(dump(oci), "application/vnd.oci.image.manifest.v1+json",
                             Platform("linux", "arm64", "v8"))  # fmt: skip
    index = json.loads(body)
    assert kind == "application/vnd.oci.image.index.v1+json" == index["mediaType"]
    assert index["manifests"][0]["platform"] == {"architecture": "arm64", "os": "linux",
                                                 "variant": "v8"}  # fmt: skip
    _, listed = image_index(b"{}", "application/vnd.docker.distribution.manifest.v2+json",
                            Platform("linux", "amd64"))  # fmt: skip
    assert listed == "application/vnd.docker.distribution.manifest.list.v2+json"
