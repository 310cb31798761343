"""Evidence folders are new every run and files are never overwritten."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.evidence import file_digest, new_run_dir, safe_name, write_bytes, write_json
from imagekit.refs import Digest


def test_run_dirs_are_always_new(tmp_path: Path) -> None:
    first = new_run_dir(tmp_path, "demo", "sha256:" + "a" * 64)
    second = new_run_dir(tmp_path, "demo", "sha256:" + "a" * 64)
    assert first != second
    assert first.parent == second.parent
    assert first.parent.name == "sha256_" + "a" * 64


def test_safe_name_cannot_climb_out() -> None:
    assert "/" not in safe_name("../../etc/passwd")
    assert not safe_name("..").startswith(".")


def test_written_files_are_hashed_and_never_overwritten(tmp_path: Path) -> None:
    digest = write_bytes(tmp_path / "a.log", b"raw failure\n")
    assert digest == Digest.of_bytes(b"raw failure\n") == file_digest(tmp_path / "a.log")
    with pytest.raises(FileExistsError):
        write_bytes(tmp_path / "a.log", b"later success\n")
    assert (tmp_path / "a.log").read_bytes() == b"raw failure\n"
    json_digest = write_json(tmp_path / "r.json", {"b": 1, "a": 2})
    assert (tmp_path / "r.json").read_text() == '{\n  "a": 2,\n  "b": 1\n}\n'
    assert json_digest == file_digest(tmp_path / "r.json")
