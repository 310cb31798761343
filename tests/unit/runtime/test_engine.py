"""How an image of a platform would run here: natively, emulated through binfmt, or not."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.refs import parse_platform
from imagekit.runtime.engine import BUILDX_ENV, buildx_wanted, execution_for, host_architecture

HANDLER = """enabled
interpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P
flags: {flags}
offset 0
magic 7f454c460201010000000000000000000200b700
"""


@pytest.fixture
def binfmt(tmp_path: Path) -> Path:
    (tmp_path / "status").write_text("enabled\n")
    return tmp_path


def _foreign() -> str:
    return "linux/arm64" if host_architecture() == "amd64" else "linux/amd64"


def test_the_host_platform_is_native(binfmt: Path) -> None:
    here = execution_for(parse_platform(f"linux/{host_architecture()}"), binfmt_dir=binfmt)
    assert here.how == "native" and here.runs and here.note.startswith("native (")


def test_a_registered_handler_with_the_f_flag_emulates(binfmt: Path) -> None:
    name = "qemu-aarch64" if host_architecture() == "amd64" else "qemu-x86_64"
    (binfmt / name).write_text(HANDLER.format(flags="PF"))
    emulated = execution_for(parse_platform(_foreign()), binfmt_dir=binfmt)
    assert emulated.how == "emulated" and emulated.note == f"emulated ({name})"


@pytest.mark.parametrize(
    ("setup", "words"),
    [
        ("none", "no qemu-"),
        ("no-f", "lacks the F flag"),
        ("disabled", "is disabled"),
    ],
)
def test_no_usable_handler_is_not_run(binfmt: Path, setup: str, words: str) -> None:
    name = "qemu-aarch64" if host_architecture() == "amd64" else "qemu-x86_64"
    if setup == "no-f":
        (binfmt / name).write_text(HANDLER.format(flags="P"))
    elif setup == "disabled":
        (binfmt / name).write_text(HANDLER.format(flags="PF").replace("enabled", "disabled", 1))
    impossible = execution_for(parse_platform(_foreign()), binfmt_dir=binfmt)
    assert impossible.how == "impossible" and not impossible.runs
    assert words in impossible.reason and impossible.note.startswith("NOT RUN: ")


def test_other_systems_and_unknown_architectures(binfmt: Path) -> None:
    assert execution_for(parse_platform("windows/amd64"), binfmt_dir=binfmt).how == "impossible"
    unknown = execution_for(parse_platform("linux/loong64"), binfmt_dir=binfmt)
    assert unknown.how == "impossible" and "no emulator is known" in unknown.reason


@pytest.mark.parametrize(
    ("value", "wanted"),
    [(None, True), ("1", True), ("", True), ("0", False), ("off", False), (" False ", False)],
)
def test_imagekit_docker_buildx_turns_buildx_off(
    monkeypatch: pytest.MonkeyPatch, value: str | None, wanted: bool
) -> None:
    if value is None:
        monkeypatch.delenv(BUILDX_ENV, raising=False)
    else:
        monkeypatch.setenv(BUILDX_ENV, value)
    assert buildx_wanted() is wanted


def test_a_docker_client_override_that_does_not_exist_is_engine_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # It was python-on-whales' ClientNotFoundError, a crash, before.
    from imagekit.errors import EngineUnavailable
    from imagekit.runtime.engine import connect

    monkeypatch.setenv("IMAGEKIT_DOCKER_CLIENT", "/nonexistent/docker")
    connect.cache_clear()
    try:
        with pytest.raises(EngineUnavailable, match="IMAGEKIT_DOCKER_CLIENT"):
            connect()
    finally:
        connect.cache_clear()
