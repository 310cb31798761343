"""Reading ctr's output: tables cut at their header's columns, the pull log, labels, JSON.

The inputs are real outputs of Debian's ctr 1.6.20 (tests/fixtures/containerd/README.md);
the integration tests check the same reading against a running containerd.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.errors import ContainerdError, ContainerdUnavailable
from imagekit.refs import Digest, Platform
from imagekit.runtime.containerd import (
    SnapshotInfo,
    connect,
    parse_cri_status,
    parse_images,
    parse_labels,
    parse_pull_log,
    parse_server_version,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "containerd"
INDEX = Digest("sha256:f3b58f24ea4e57273cc54c02e7e4dbb6bb3f468a54d3e18297b42007035bcc69")
MANIFEST = Digest("sha256:b93e22418aa0f169ad9c99d9192dc9b9d9944c3b8884f13a3b16703b38ab592e")
CONFIG = Digest("sha256:471da08780d2e0db10b322ebeb032ec83afbf9627f319a76e3a1a502a82f8bc1")
CHAIN = Digest("sha256:8be8edbd3e9837ac0a82932777862c7938bd510f7a3fed3a21ee4583fa162030")
REPO = "127.0.0.1:56397/exp/multi"


def _text(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_images_table_is_cut_at_the_header_columns() -> None:
    records = {r.name: r for r in parse_images(_text("images-ls.txt"))}
    assert set(records) == {f"{REPO}@{INDEX}", f"{REPO}@{MANIFEST}", str(CONFIG)}
    index = records[f"{REPO}@{INDEX}"]
    assert (index.media_type, index.target) == ("application/vnd.oci.image.index.v1+json", INDEX)
    # The CRI plugin's record of the image ID points at the newest pull of that config.
    assert records[str(CONFIG)].target == MANIFEST
    assert records[f"{REPO}@{MANIFEST}"].media_type.endswith("manifest.v1+json")


def test_a_row_that_does_not_line_up_is_refused() -> None:
    lines = _text("images-ls.txt").splitlines()
    shifted = "\n".join([lines[0], lines[1].replace(" application", "application", 1)])
    with pytest.raises(ContainerdError, match="does not line up"):
        parse_images(shifted)
    with pytest.raises(ContainerdError, match="printed nothing"):
        parse_images("")


def test_an_empty_images_table_has_no_records() -> None:
    assert parse_images("REF TYPE DIGEST SIZE PLATFORMS LABELS \n") == ()


def test_pull_log_gives_platform_and_chain_id() -> None:
    pulled = parse_pull_log(_text("ctr-pull.out"))
    assert pulled.platform == Platform("linux", "amd64")
    assert pulled.unpacked == MANIFEST and pulled.chain_id == CHAIN
    assert "\x1b[" not in pulled.log and "image chain ID" in pulled.log
    nothing = parse_pull_log("done: 5ms\n")
    assert (nothing.platform, nothing.unpacked, nothing.chain_id) == (None, None, None)


def test_labels_of_the_config_name_its_snapshot() -> None:
    labels = parse_labels(_text("content-ls-config.txt"), CONFIG)
    assert labels["containerd.io/gc.ref.snapshot.overlayfs"] == CHAIN
    assert parse_labels(_text("content-ls-config.txt"), MANIFEST) == {}


def test_snapshot_info_and_versions() -> None:
    info = SnapshotInfo.model_validate_json(_text("snapshot-info.json"))
    assert (info.Kind, info.Name) == ("Committed", CHAIN)
    assert parse_server_version(_text("version.txt")) == "1.6.20~ds1"
    assert parse_server_version("Client:\n  Version:  1.6.20\n") is None
    assert parse_cri_status(_text("plugins-ls.txt")) == "ok"
    assert parse_cri_status("TYPE ID PLATFORMS STATUS\n") == "absent"


def test_no_socket_is_unavailable_with_how_to_start_it(tmp_path: Path) -> None:
    with pytest.raises(ContainerdUnavailable) as caught:
        connect(str(tmp_path / "containerd.sock"))
    assert caught.value.exit_code == 3
    assert caught.value.hint is not None and "start containerd" in caught.value.hint
