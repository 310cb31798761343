"""The overlay guard's hard cases, each on a base written layer by layer into a real registry.

Where the result is checked, the real engine pulls it and ``docker export`` gives the merged
filesystem as overlay2 applied the layers (whiteouts included), so the layer rules are
checked against the engine's, not against our own reading of them.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from imagekit.builders.assemble import AssembleOptions, AssembleResult, assemble_plan
from imagekit.cli.build_cmd import command as build_command
from imagekit.errors import BuildFailed, ImageContentError, PlanError, RegistryError
from imagekit.ledger import read_records
from imagekit.runtime.engine import Engine
from imagekit.workspace import Workspace
from tests.integration.builders.assemble.conftest import PlanWriter
from tests.support.engine_refs import merged_filesystem
from tests.support.images import Blob, M, Writer
from tests.support.media_types import DOCKER_FOREIGN, DOCKER_GZIP, OCI_NONDIST_GZIP
from tests.support.registries import RunningRegistry

pytestmark = pytest.mark.integration


def hexdigest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


Build = Callable[..., AssembleResult]


@pytest.fixture
def build(workspace: Workspace, registry: RunningRegistry, cache_dir: Path) -> Build:
    def run(name: str, **options: Any) -> AssembleResult:
        push = options.pop("push", f"{registry.host}/imagekit-test/out-{name}")
        return assemble_plan(
            workspace, name, AssembleOptions(push=push, cache_dir=cache_dir, **options)
        )

    return run


def overlay(source: str, destination: str, **replaces: Any) -> dict[str, Any]:
    return {"kind": "overlay", "source": source, "destination": destination, "replaces": replaces}


def test_a_destination_under_a_whited_out_folder(
    writer: Writer, write_plan: PlanWriter, build: Build, engine: Engine, created_refs: list[str]
) -> None:
    old = b"old config\n"
    base = writer.image(
        "imagekit-test/wh",
        "1",
        [
            Blob.gzip([M("opt", "dir"), M("opt/app", "dir"), M("opt/app/old.conf", data=old)]),
            Blob.gzip([M("opt", "dir"), M("opt/app", "whiteout")]),
            Blob.gzip([M("srv", "dir"), M("srv/top.txt", data=b"top\n")]),
        ],
    )
    write_plan(
        "wh-new", base.reference, [overlay("new.conf", "/opt/app/new.conf", absent=True)],
        {"new.conf": b"new\n"},
    )  # fmt: skip
    result = build("wh-new")
    check = result.guard[0]
    assert check.verdict == "ok" and check.found == "absent"
    # Decided by the layer that whited the folder out; the bottom layer was never read.
    assert check.resolution.final.layer == 1
    assert [u.how for u in result.layers] == ["not needed", "read", "read"]
    assert check.resolution.missing == ("opt/app",)
    files = merged_filesystem(engine, result.pushed, created_refs)
    assert files["opt/app/new.conf"] == b"new\n"
    assert "opt/app/old.conf" not in files

    # The file the layer deleted is missing, not the one the overlay was written for.
    write_plan(
        "wh-old", base.reference,
        [overlay("old.conf", "/opt/app/old.conf", sha256=hexdigest(old))], {"old.conf": b"x"},
    )  # fmt: skip
    with pytest.raises(BuildFailed) as info:
        build("wh-old")
    assert info.value.reason == "overlay-drift"
    assert f"expected=sha256:{hexdigest(old)} actual=missing" in info.value.message


def test_an_opaque_folder_above_the_guarded_file(
    writer: Writer, write_plan: PlanWriter, build: Build, engine: Engine, created_refs: list[str]
) -> None:
    first = b"x = 1\n"
    base = writer.image(
        "imagekit-test/opq",
        "1",
        [
            Blob.gzip([M("etc/app", "dir"), M("etc/app/x.conf", data=first),
                       M("etc/app/keep.conf", data=b"keep\n")]),
            Blob.gzip([M("etc/app", "dir"), M("etc/app", "opaque"),
                       M("etc/app/y.conf", data=b"y\n")]),
        ],
    )  # fmt: skip
    write_plan(
        "opq-drift", base.reference,
        [overlay("x.conf", "/etc/app/x.conf", sha256=hexdigest(first))], {"x.conf": b"x = 2\n"},
    )  # fmt: skip
    with pytest.raises(BuildFailed) as info:
        build("opq-drift")
    assert "actual=missing" in info.value.message
    write_plan(
        "opq-absent", base.reference, [overlay("x.conf", "/etc/app/x.conf", absent=True)],
        {"x.conf": b"x = 2\n"},
    )  # fmt: skip
    result = build("opq-absent")
    assert result.guard[0].resolution.final.layer == 1
    # The first build indexed layer 1; this one reads nothing.
    assert [u.how for u in result.layers] == ["not needed", "cached"]
    files = merged_filesystem(engine, result.pushed, created_refs)
    assert files["etc/app/x.conf"] == b"x = 2\n" and files["etc/app/y.conf"] == b"y\n"
    assert "etc/app/keep.conf" not in files


def test_a_guarded_path_that_is_a_symlink_or_a_hard_link(
    writer: Writer, write_plan: PlanWriter, build: Build, engine: Engine, created_refs: list[str]
) -> None:
    real, shared = b"def f(): return 1\n", b"shared\n"
    base = writer.image(
        "imagekit-test/links",
        "1",
        [
            Blob.gzip([
                M("usr", "dir"), M("usr/lib", "dir"), M("usr/lib/tool", "dir"),
                M("usr/lib/tool/real.py", data=real),
                M("usr/lib/tool/link.py", "symlink", link="real.py"),
                M("lib", "symlink", link="usr/lib"),
                M("opt/h", "dir"), M("opt/h/a", data=shared),
                M("opt/h/b", "hardlink", link="opt/h/a"),
                M("opt/dangling", "symlink", link="/nowhere"),
            ]),
        ],
    )  # fmt: skip
    steps = [
        # /lib -> usr/lib and link.py -> real.py: checked and written where COPY would write.
        overlay("real.py", "/lib/tool/link.py", sha256=hexdigest(real)),
        overlay("b", "/opt/h/b", sha256=hexdigest(shared)),
    ]
    write_plan("links", base.reference, steps, {"real.py": b"def f(): return 2\n", "b": b"new\n"})
    result = build("links")
    symlinked, hardlinked = result.guard
    assert symlinked.verdict == "ok" and symlinked.written == "/usr/lib/tool/real.py"
    assert symlinked.resolution.links == (("lib", "usr/lib"), ("usr/lib/tool/link.py", "real.py"))
    assert hardlinked.verdict == "ok" and hardlinked.found == f"sha256:{hexdigest(shared)}"
    assert any("hard link to /opt/h/a" in note for note in hardlinked.notes)
    files = merged_filesystem(engine, result.pushed, created_refs)
    assert files["usr/lib/tool/real.py"] == b"def f(): return 2\n"
    link = files["usr/lib/tool/link.py"]
    assert isinstance(link, tarfile.TarInfo) and link.issym() and link.linkname == "real.py"
    assert files["opt/h/b"] == b"new\n" and files["opt/h/a"] == shared

    # absent means no entry at all: a dangling symbolic link is there ([ -L p ]).
    write_plan(
        "dangling", base.reference, [overlay("b", "/opt/dangling", absent=True)], {"b": b"x"}
    )
    with pytest.raises(BuildFailed) as info:
        build("dangling")
    assert "expected=absent actual=present (symlink:/nowhere)" in info.value.message


def test_a_destination_whose_parent_is_a_file(
    writer: Writer, write_plan: PlanWriter, build: Build, workspace: Workspace
) -> None:
    base = writer.image(
        "imagekit-test/parent", "1", [Blob.gzip([M("etc", "dir"), M("etc/hostname", data=b"h\n")])]
    )
    write_plan(
        "parent", base.reference, [overlay("x", "/etc/hostname/x", absent=True)], {"x": b"x"}
    )
    with pytest.raises(BuildFailed) as info:
        build("parent")
    assert info.value.exit_code == 1 and info.value.reason == "destination-blocked"
    assert "actual=sha256:" in info.value.message and "at /etc/hostname" in info.value.message
    records = read_records(workspace.ledger_path)
    assert [(r.kind, r.details["reason"]) for r in records] == [
        ("rejected-build", "destination-blocked")
    ]


def test_a_plan_file_with_a_mode_and_an_owner(
    writer: Writer, write_plan: PlanWriter, build: Build, engine: Engine, created_refs: list[str]
) -> None:
    base = writer.image("imagekit-test/mode", "1", [Blob.gzip([M("opt", "dir", mode=0o711)])])
    step = overlay("tool.sh", "/opt/new/tool.sh", absent=True) | {"mode": "0750", "owner": "12:34"}
    write_plan("mode", base.reference, [step], {"tool.sh": (b"#!/bin/sh\n", 0o644)})
    result = build("mode")
    files = merged_filesystem(engine, result.pushed, created_refs)
    info = files["opt/new/tool.sh#info"]
    assert isinstance(info, tarfile.TarInfo)
    assert (info.mode & 0o7777, info.uid, info.gid) == (0o750, 12, 34)
    # A folder COPY creates belongs to the --chown owner; one that exists keeps the base's.
    new, opt = files["opt/new"], files["opt"]
    assert isinstance(new, tarfile.TarInfo) and (new.mode & 0o7777, new.uid, new.gid) == (
        0o755,
        12,
        34,
    )
    assert isinstance(opt, tarfile.TarInfo) and (opt.mode & 0o7777, opt.uid) == (0o711, 0)


def test_an_overlay_source_that_is_a_symlink(
    writer: Writer, write_plan: PlanWriter, build: Build, workspace: Workspace
) -> None:
    base = writer.image("imagekit-test/srclink", "1", [Blob.gzip([M("opt", "dir")])])
    write_plan("srclink", base.reference, [overlay("via", "/opt/x", absent=True)], {"real": b"r\n"})
    (workspace.dockerfiles_dir / "srclink" / "via").symlink_to("real")
    with pytest.raises(PlanError) as info:
        build("srclink")
    assert info.value.exit_code == 2 and "symbolic link via" in info.value.message
    assert "follow: true" in (info.value.hint or "")
    write_plan(
        "srclink", base.reference, [overlay("via", "/opt/x", absent=True) | {"follow": True}]
    )
    result = build("srclink")
    assert result.layer is not None and result.layer.files == 1


def test_a_base_config_with_fields_our_models_do_not_know(
    writer: Writer, write_plan: PlanWriter, build: Build
) -> None:
    layer = Blob.gzip([M("opt", "dir")], media_type=DOCKER_GZIP)
    unknown = {
        "container_config": {"Hostname": "abc", "Cmd": ["/bin/sh", "-c", "#(nop) x"]},
        "docker_version": "20.10.24",
        "moby.buildkit.buildinfo.v1": "eyJmcm9udGVuZCI6ImRvY2tlcmZpbGUudjAifQ==",
        "os.features": ["x"],
        "x-vendor": {"nested": [1, 2.5, None, {"deep": True}], "ünïcode": "✓"},
        "config": {
            "Env": ["PATH=/usr/bin", "KEEP=1"],
            "Cmd": ["/bin/sh"],
            "Healthcheck": {"Test": ["CMD", "true"], "Interval": 30000000000},
            "StopSignal": "SIGTERM",
            "OnBuild": None,
            "ArgsEscaped": True,
            "Labels": {"base.label": "kept"},
        },
    }
    base = writer.image("imagekit-test/fields", "1", [layer], docker=True, config=unknown)
    steps = [
        overlay("f", "/opt/f", absent=True),
        {"kind": "env", "vars": {"PATH": "/opt:/usr/bin", "NEW": "2"}},
        {"kind": "entrypoint", "argv": ["/opt/f"]},
    ]
    write_plan("fields", base.reference, steps, {"f": (b"#!/bin/sh\n", 0o755)})
    result = build("fields")
    assert result.manifest_media_type == "application/vnd.docker.distribution.manifest.v2+json"
    manifest = json.loads(
        writer.get_manifest("imagekit-test/out-fields", result.tag.rpartition(":")[2]).content
    )
    assert manifest["config"]["mediaType"] == "application/vnd.docker.container.image.v1+json"
    assert manifest["layers"][-1]["mediaType"] == DOCKER_GZIP
    before = json.loads(base.config)
    after = json.loads(writer.get_blob("imagekit-test/out-fields", result.config_digest))
    for key in ("container_config", "docker_version", "moby.buildkit.buildinfo.v1",
                "os.features", "x-vendor", "architecture", "os"):  # fmt: skip
        assert after[key] == before[key], key
    for key in ("Healthcheck", "StopSignal", "OnBuild", "ArgsEscaped"):
        assert key in after["config"] and after["config"][key] == before["config"][key], key
    assert after["config"]["Env"] == ["PATH=/opt:/usr/bin", "KEEP=1", "NEW=2"]
    assert after["config"]["Entrypoint"] == ["/opt/f"]
    assert after["config"]["Cmd"] is None  # ENTRYPOINT clears the base's CMD, as in Docker
    assert after["config"]["Labels"]["base.label"] == "kept"
    assert after["rootfs"]["diff_ids"][:-1] == before["rootfs"]["diff_ids"]
    assert after["history"][: len(before["history"])] == before["history"]
    assert set(before) <= set(after) and set(before["config"]) <= set(after["config"])


def test_foreign_and_non_distributable_layers(
    writer: Writer,
    write_plan: PlanWriter,
    build: Build,
    make_registry: Callable[..., RunningRegistry],
    registry: RunningRegistry,
) -> None:
    # A registry that accepts foreign layers' URLs, and one (the session's) that does not.
    mirror = make_registry("none", allow_urls=True)
    writer = Writer(mirror.host)
    urls = ("https://example.invalid/layers/windows-base.tar.gz",)
    foreign = Blob.gzip([M("Files", "dir"), M("Files/a.dll", data=b"MZ")], DOCKER_FOREIGN)
    foreign = Blob(foreign.tar, foreign.blob, DOCKER_FOREIGN, urls)
    top = Blob.gzip([M("app", "dir"), M("app/x.txt", data=b"one\n")], DOCKER_GZIP)
    # The registry holds the foreign blob (distribution 2.8 accepts no manifest otherwise),
    # as a private mirror would; its URLs are never followed.
    base = writer.image("imagekit-test/foreign", "1", [foreign, top], docker=True)
    write_plan(
        "foreign", base.reference, [overlay("x", "/app/x.txt", sha256=hexdigest(b"one\n"))],
        {"x": b"two\n"},
    )  # fmt: skip
    result = build("foreign", push=f"{mirror.host}/imagekit-test/out-foreign")
    assert [u.how for u in result.layers] == ["not needed", "read"]
    manifest = json.loads(
        writer.get_manifest("imagekit-test/out-foreign", result.manifest_digest).content
    )
    assert manifest["layers"][:2] == json.loads(base.manifest)["layers"]  # urls and all
    assert result.push.blobs_mounted == 2 and result.push.blobs_skipped == 0

    # The guard reads a non-distributable layer from the registry when it must decide there.
    nondist = Blob.gzip([M("etc", "dir"), M("etc/lic.txt", data=b"L\n")], OCI_NONDIST_GZIP)
    base2 = writer.image("imagekit-test/nondist", "1", [nondist])
    write_plan(
        "nondist", base2.reference, [overlay("x", "/etc/lic.txt", sha256=hexdigest(b"L\n"))],
        {"x": b"M\n"},
    )  # fmt: skip
    nondist_build = build("nondist", push=f"{mirror.host}/imagekit-test/out-nondist")
    assert [u.how for u in nondist_build.layers] == ["read"]
    assert nondist_build.push.blobs_mounted == 1

    # Another registry: the foreign layer is never uploaded there. One that accepts URLs
    # takes the manifest without the blob (clients fetch it from its URLs) ...
    other = make_registry("none", allow_urls=True)
    elsewhere = build("foreign", push=f"{other.host}/imagekit-test/foreign")
    assert elsewhere.manifest_digest == result.manifest_digest
    assert elsewhere.push.blobs_skipped == 1 and elsewhere.push.blobs_uploaded == 3
    with Writer(other.host) as there:
        head = there.http.head(f"/v2/imagekit-test/foreign/blobs/{foreign.digest}")
    assert head.status_code == 404
    # ... and one that does not refuses it, which the error explains.
    with pytest.raises(RegistryError) as info:
        build("foreign")
    assert "non-distributable base layers were not uploaded" in info.value.message
    with Writer(registry.host) as session:
        listed = session.http.get("/v2/imagekit-test/out-foreign/tags/list")
    assert listed.status_code == 404 or not listed.json().get("tags")  # no tag was put
    writer.close()


def test_a_zstd_base_layer(
    writer: Writer,
    write_plan: PlanWriter,
    build: Build,
    registry: RunningRegistry,
    cache_dir: Path,
) -> None:
    module = b"VERSION = 1\n"
    base = writer.image(
        "imagekit-test/zstd",
        "1",
        [
            Blob.gzip([M("usr", "dir"), M("usr/lib", "dir")]),
            Blob.zstd([M("usr/lib/pkg", "dir"), M("usr/lib/pkg/mod.py", data=module)]),
        ],
    )
    write_plan(
        "zstd", base.reference,
        [overlay("mod.py", "/usr/lib/pkg/mod.py", sha256=hexdigest(module))],
        {"mod.py": b"VERSION = 2\n"},
    )  # fmt: skip
    result = build("zstd")
    assert [u.how for u in result.layers] == ["not needed", "read"]
    stats = result.layers[1].stats
    assert stats is not None and stats.uncompressed_bytes == len(base.layers[1].tar)
    manifest = json.loads(
        writer.get_manifest("imagekit-test/out-zstd", result.manifest_digest).content
    )
    assert manifest["layers"][1]["mediaType"] == "application/vnd.oci.image.layer.v1.tar+zstd"
    # The overlay's own layer is gzip, which every engine can pull.
    assert manifest["layers"][2]["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"

    # The command line, for people: what was pushed, the guard, the assertions, the log.
    shown = CliRunner().invoke(
        build_command,
        ["zstd", "--push", f"{registry.host}/imagekit-test/out-zstd", "--tag", "cli"],
        env={"IMAGEKIT_CACHE_DIR": str(cache_dir)},
    )
    assert shown.exit_code == 0, shown.stderr[-2000:]
    lines = shown.stdout.splitlines()  # auto chose the registry: overlays only, and --push
    assert lines[0] == f"built zstd through the registry: {result.pushed}"
    assert f"tag: {registry.host}/imagekit-test/out-zstd:cli" in lines
    assert any(line.startswith("guard: path=/usr/lib/pkg/mod.py") and line.endswith("(ok)")
               for line in lines)  # fmt: skip
    assert "assertions: none: the plan has no assertions" in lines


@pytest.mark.parametrize(
    ("link", "mount"),
    [("/proc/self", "proc"), ("../../sys/kernel", "sys"), ("/dev", "dev")],
)
def test_a_destination_that_resolves_under_a_kernel_mount_is_refused(
    writer: Writer,
    write_plan: PlanWriter,
    build: Build,
    workspace: Workspace,
    link: str,
    mount: str,
) -> None:
    """The plan says /usr/local/bin/new.sh; the base makes /usr/local/bin a link into /proc
    (or /sys, /dev): the rule against those mounts holds for the path as the image resolves
    it, so nothing is written under them (the file would never show in a container)."""
    base = writer.image(
        f"imagekit-test/into-{mount}",
        "1",
        [
            Blob.gzip([
                M("usr", "dir"), M("usr/local", "dir"),
                M("usr/local/bin", "symlink", link=link),
                M(mount, "dir"),
            ]),
        ],
    )  # fmt: skip
    write_plan(
        f"into-{mount}",
        base.reference,
        [overlay("new.sh", "/usr/local/bin/new.sh", absent=True)],
        {"new.sh": b"#!/bin/sh\n"},
    )
    with pytest.raises(BuildFailed) as info:
        build(f"into-{mount}")
    assert info.value.exit_code == 1 and info.value.reason == "destination-blocked"
    assert f"is under /{mount}" in info.value.message, info.value.message
    assert "/usr/local/bin is a symbolic link to" in " ".join(info.value.last_lines)
    records = read_records(workspace.ledger_path)
    assert [(r.kind, r.details["reason"]) for r in records] == [
        ("rejected-build", "destination-blocked")
    ]


@pytest.mark.parametrize(
    ("lie", "said"),
    [
        ({"size": 1}, "says {size} bytes, the registry serves {served}"),
        (
            {"mediaType": "application/vnd.oci.image.layer.v1.tar+zstd"},
            "says zstd (application/vnd.oci.image.layer.v1.tar+zstd), the registry serves gzip "
            "bytes",
        ),
        (
            {"mediaType": "application/vnd.oci.image.layer.v1.tar"},
            "says none (application/vnd.oci.image.layer.v1.tar), the registry serves gzip bytes",
        ),
    ],
)
def test_a_base_whose_manifest_lies_about_a_cached_layer_is_refused(
    writer: Writer,
    write_plan: PlanWriter,
    build: Build,
    lie: dict[str, Any],
    said: str,
) -> None:
    """The layer's index is in the cache (an honest base with the same layer was built on
    first): the cache says what the layer holds, never whether a manifest describing it is
    honest. The descriptor is held to what the registry serves on every build, and a lie is
    a no (exit 1) before anything is pushed, never copied into the new manifest."""
    layer = Blob.gzip([M("opt", "dir"), M("opt/a", data=b"a\n")])
    honest = writer.image("imagekit-test/honest", "1", [layer])
    write_plan("honest", honest.reference, [overlay("x", "/opt/x", absent=True)], {"x": b"x"})
    build("honest")  # indexes the layer
    manifest = json.loads(honest.manifest)
    descriptor = manifest["layers"][0]
    served = descriptor["size"]
    if "size" in lie:
        descriptor["size"] = served + lie["size"]
    else:
        descriptor.update(lie)
    body = json.dumps(manifest).encode()
    digest = writer.manifest("imagekit-test/honest", "lying", body, manifest["mediaType"])
    lying = f"{writer.host}/imagekit-test/honest@{digest}"
    write_plan("lying", lying, [overlay("x", "/opt/x", absent=True)], {"x": b"x"})
    with pytest.raises(ImageContentError) as info:
        build("lying")
    assert info.value.exit_code == 1
    assert "layer 0" in info.value.message and layer.digest in info.value.message
    assert said.format(size=served + 1, served=served) in info.value.message, info.value.message


def test_a_base_with_a_truncated_layer_or_a_config_that_is_not_json_is_a_named_no(
    writer: Writer,
    write_plan: PlanWriter,
    workspace: Workspace,
    registry: RunningRegistry,
    cache_dir: Path,
) -> None:
    """The registry served these bytes and their digests hold; what they are is wrong. Like a
    wrong diffID, that is a check that said no (exit 1, named), never "could not finish"."""
    whole = Blob.gzip([M("opt", "dir"), M("opt/a", data=b"a\n" * 4096)])
    cut = Blob(whole.tar, whole.blob[:-12], whole.media_type)  # the gzip trailer cut off
    truncated = writer.image("imagekit-test/cut", "1", [cut])
    not_json = writer.image(
        "imagekit-test/notjson", "1", [whole], config_bytes=b"<html>not a config</html>"
    )
    for name, base, said in (
        ("cut", truncated, "truncated gzip stream"),
        ("notjson", not_json, "malformed image config"),
    ):
        write_plan(name, base.reference, [overlay("x", "/opt/a", absent=True)], {"x": b"x"})
        result = CliRunner().invoke(
            build_command,
            [name, "--builder", "registry", "--push", f"{registry.host}/imagekit-test/o-{name}"],
            env={"IMAGEKIT_ROOT": str(workspace.root), "IMAGEKIT_CACHE_DIR": str(cache_dir)},
        )
        assert result.exit_code == 1, result.output
        assert said in result.stderr, result.stderr


def test_a_large_file_is_hashed_when_guarded_and_read_again_when_reached_through_a_link(
    writer: Writer, write_plan: PlanWriter, build: Build
) -> None:
    """An index hashes small files and the overlays' own destinations, not every large file
    (the third sha256 pass over every byte, which the cold guard paid for nothing); a large
    file met through a link is hashed by reading its layer again, and the verdict is the same
    as if every file had been hashed."""
    big = bytes(range(256)) * 8192  # 2 MiB: over HASHED_UP_TO
    base = writer.image(
        "imagekit-test/big",
        "1",
        [
            Blob.gzip([
                M("opt", "dir"), M("opt/big.bin", data=big), M("opt/other.bin", data=big[::-1]),
                M("opt/alias.bin", "symlink", link="big.bin"),
                M("opt/hard.bin", "hardlink", link="opt/other.bin"),
            ]),
            Blob.gzip([M("srv", "dir"), M("srv/top.txt", data=b"top\n")]),
        ],
    )  # fmt: skip
    size = len(base.layers[0].blob)

    # Reached through a symbolic link: the destination is opt/alias.bin, the file big.bin.
    write_plan("via-link", base.reference,
               [overlay("x", "/opt/alias.bin", sha256=hexdigest(big))], {"x": b"x\n"})  # fmt: skip
    linked = build("via-link")
    assert linked.guard[0].verdict == "ok" and linked.guard[0].found == f"sha256:{hexdigest(big)}"
    assert linked.guard[0].written == "/opt/big.bin"
    bottom, top = linked.layers
    # The bottom layer read twice (the second time hashing every file); the top one, whose
    # files are all small, once.
    assert bottom.how == "read" and bottom.stats is not None
    assert bottom.stats.compressed_bytes == 2 * size
    assert top.how == "read" and top.stats is not None
    assert top.stats.compressed_bytes == len(base.layers[1].blob)

    # The same through a hard link, the content wrong: drift names what the file holds.
    write_plan("via-hardlink", base.reference,
               [overlay("x", "/opt/hard.bin", sha256=hexdigest(big))], {"x": b"x\n"})  # fmt: skip
    with pytest.raises(BuildFailed) as info:
        build("via-hardlink")
    assert info.value.reason == "overlay-drift"
    assert f"actual=sha256:{hexdigest(big[::-1])}" in info.value.message


def test_a_large_guarded_file_is_read_once_and_its_index_serves_the_next_build(
    writer: Writer, write_plan: PlanWriter, build: Build
) -> None:
    big = b"\x01\x02" * (1 << 20)  # 2 MiB
    base = writer.image(
        "imagekit-test/big-direct",
        "1",
        [Blob.gzip([M("opt", "dir"), M("opt/big.bin", data=big),
                    M("opt/other.bin", data=big[::-1])])],
    )  # fmt: skip
    write_plan("direct", base.reference,
               [overlay("x", "/opt/big.bin", sha256=hexdigest(big))], {"x": b"x\n"})  # fmt: skip
    direct = build("direct")
    assert direct.guard[0].verdict == "ok"
    (use,) = direct.layers
    assert use.how == "read" and use.stats is not None
    assert use.stats.compressed_bytes == len(base.layers[0].blob)  # once
    # The index left other.bin unhashed; a plan guarding it reads the layer again, then
    # the complete index serves every later build.
    other = [overlay("x", "/opt/other.bin", sha256=hexdigest(big[::-1]))]
    write_plan("other", base.reference, other, {"x": b"x\n"})
    first = build("other")
    assert first.guard[0].verdict == "ok" and [u.how for u in first.layers] == ["read"]
    again = build("other")
    assert again.guard[0].verdict == "ok" and [u.how for u in again.layers] == ["cached"]
