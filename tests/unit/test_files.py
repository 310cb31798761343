"""The one reader of the files users name: regular files only, read with a cap, never blocked
on; each refusal names the path and what it is."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from imagekit.errors import InputFileError
from imagekit.files import MAX_INPUT_BYTES, open_regular, read_regular


def test_a_regular_file_is_read_and_a_link_to_one_is_followed(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_bytes(b"version: 1\n")
    link = tmp_path / "link.yaml"
    link.symlink_to(path)
    assert read_regular(path, "policy file") == b"version: 1\n"
    assert read_regular(link, "policy file") == b"version: 1\n"


def test_a_fifo_is_refused_at_once_without_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    # Opening it for reading would wait for a writer forever; nothing here may block.
    with pytest.raises(InputFileError) as caught:
        read_regular(fifo, "policy file")
    assert caught.value.exit_code == 2 and caught.value.path == str(fifo)
    assert caught.value.message == f"{fifo}: the policy file is a FIFO, not a regular file"


def _socket(path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(path))  # the socket's name stays after it is closed


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (lambda p: p.symlink_to("/dev/zero"), "a character device (a symbolic link to /dev/zero)"),
        (lambda p: p.mkdir(), "a folder"),
        (_socket, "a socket"),
    ],
)
def test_what_is_no_regular_file_is_named(
    tmp_path: Path, make: Callable[[Path], None], kind: str
) -> None:
    path = tmp_path / "thing"
    make(path)
    with pytest.raises(InputFileError) as caught:
        open_regular(path, "key file")
    assert caught.value.message == f"{path}: the key file is {kind}, not a regular file"


def test_dev_zero_is_refused_before_a_byte_is_read() -> None:
    with pytest.raises(InputFileError, match="the key file is a character device"):
        read_regular(Path("/dev/zero"), "key file")


def test_a_file_over_the_cap_is_refused_from_its_size(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    with path.open("wb") as handle:
        handle.truncate(MAX_INPUT_BYTES + 1)  # sparse: nothing is written, nothing read
    with pytest.raises(InputFileError) as caught:
        read_regular(path, "plan file")
    assert caught.value.message == (
        f"{path}: the plan file is {MAX_INPUT_BYTES + 1} bytes, more than the 1 MiB imagekit "
        "reads of one"
    )
    assert read_regular(path, "plan file", limit=MAX_INPUT_BYTES + 1)[:1] == b"\0"


def test_reading_stops_at_the_cap_where_the_size_said_less() -> None:
    # /proc files say 0 bytes and hold more: the cap holds on what is read, not what is said.
    status = Path("/proc/self/status")
    assert status.stat().st_size == 0
    with pytest.raises(InputFileError, match=r"is more than 16 bytes \(it grew\)"):
        read_regular(status, "policy file", limit=16)


def test_a_missing_file_raises_the_system_s_error(tmp_path: Path) -> None:
    # The caller words it ("no such plan file", "cannot read the key file").
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "absent", "plan file")
