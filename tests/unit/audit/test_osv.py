"""The offline OSV database loaded: a zip or a folder, strictly, by one process or several."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from datetime import UTC, datetime
from pathlib import Path

import pytest

from imagekit.audit.osv import load_database
from imagekit.errors import VulnDatabaseError
from tests.support.osv_export import records, write_folder, write_zip
from tests.unit.audit.osv_records import MODIFIED, pkg, record

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


@pytest.fixture
def export(tmp_path: Path) -> Path:
    return write_zip(tmp_path / "all.zip", records(MODIFIED))


def test_the_zip_loads_with_its_digest_age_and_counts(export: Path) -> None:
    db = load_database(export)
    assert db.kind == "zip"
    assert db.digest == "sha256:" + hashlib.sha256(export.read_bytes()).hexdigest()
    assert (db.records, db.withdrawn) == (6, 1)
    assert db.newest_modified == MODIFIED
    assert db.describe(NOW) == "database of 2026-11-30, 3 days old"
    assert db.to_json(NOW)["age_source"] == "the newest modified timestamp among the records"
    assert db.entries("six") == []  # the withdrawn record is not indexed


def test_a_folder_loads_the_same_records_with_a_listing_digest(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "PyPI", records(MODIFIED))
    (folder / "modified_id.csv").write_text("not a record\n")
    db = load_database(folder)
    assert (db.kind, db.records, db.ignored_files) == ("folder", 6, ("modified_id.csv",))
    listing = "".join(
        f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n"
        for p in sorted(folder.glob("*.json"))
    )
    assert db.digest == "sha256:" + hashlib.sha256(listing.encode()).hexdigest()
    (folder / "PYSEC-2022-43012.json").write_text(
        (folder / "PYSEC-2022-43012.json").read_text().replace("65.5.1", "65.5.2")
    )
    assert load_database(folder).digest != db.digest  # a changed record is a new database


def _zip_with(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def test_what_is_not_an_osv_export_is_refused_naming_the_file(tmp_path: Path) -> None:
    good = json.dumps(records(MODIFIED)[0]).encode()
    cases = {
        "text.zip": (tmp_path / "text.zip", "not a zip file"),
        "empty.zip": (_zip_with(tmp_path / "empty.zip", {}), "holds no OSV records"),
        "readme.zip": (
            _zip_with(tmp_path / "readme.zip", {"a.json": good, "README.md": b"hi"}),
            "README.md: not an OSV record",
        ),
        "garbage.zip": (
            _zip_with(tmp_path / "garbage.zip", {"a.json": b"{nope"}),
            "a.json: not an OSV record: not JSON: Expecting property name",
        ),
        "list.zip": (_zip_with(tmp_path / "list.zip", {"a.json": b"[]"}), "a.json: not an OSV"),
        "npm.zip": (
            write_zip(
                tmp_path / "npm.zip",
                [record("GHSA-n", [{"package": {"ecosystem": "npm", "name": "left-pad"}}])],
            ),
            "1 OSV records, none for a PyPI package",
        ),
        "missing": (tmp_path / "missing.zip", "no such file or folder"),
    }
    (tmp_path / "text.zip").write_text("id,modified\n")
    for name, (path, complaint) in cases.items():
        with pytest.raises(VulnDatabaseError) as info:
            load_database(path)
        assert str(path) in info.value.message, name
        assert complaint in info.value.message, (name, info.value.message)
        assert info.value.exit_code == 2


@pytest.mark.parametrize("kind", ["a FIFO", "a character device"])
def test_a_vuln_db_that_is_neither_file_nor_folder_says_what_it_is(
    tmp_path: Path, kind: str
) -> None:
    """A FIFO or a device is there: "no such file" would send the user looking for a typo;
    it is named for what it is, bad input (2), and never opened (a FIFO would block)."""
    if kind == "a FIFO":
        path = tmp_path / "db.fifo"
        os.mkfifo(path)
    else:
        path = Path(os.devnull)
    with pytest.raises(VulnDatabaseError) as info:
        load_database(path)
    assert info.value.message == f"{path}: {kind}, not a file or folder"
    assert info.value.exit_code == 2
    assert "no such" not in info.value.message


def test_a_record_twice_in_a_folder_is_refused(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "db", records(MODIFIED))
    (folder / "copy").mkdir()
    (folder / "copy" / "again.json").write_text((folder / "PYSEC-2023-228.json").read_text())
    with pytest.raises(VulnDatabaseError, match="record PYSEC-2023-228 is also in"):
        load_database(folder)


_FORKED_LOAD = """
import json, sys
import imagekit.audit.osv as osv
from pathlib import Path
from imagekit.errors import VulnDatabaseError
osv.PARALLEL_FROM = 2
out = []
for arg in sys.argv[1:]:
    try:
        db = osv.load_database(Path(arg))
    except VulnDatabaseError as exc:
        out.append({"error": exc.message})
        continue
    out.append({"validated_by": db.validated_by, "records": db.records, "digest": db.digest,
                "bulk": [r["id"] for r, _ in db.entries("bulk-39")]})
print(json.dumps(out))
"""


def test_forked_validators_give_the_same_database_and_the_first_bad_record(
    tmp_path: Path,
) -> None:
    """Large exports are validated by one forked process a core: same result, same refusal.
    In a fresh interpreter, since a process with other threads (pytest's may) never forks."""
    entries = records(MODIFIED) + [
        record(f"PYSEC-BULK-{n}", [pkg(f"bulk-{n}", [{"introduced": "0"}, {"fixed": "2"}])])
        for n in range(40)
    ]
    path = write_zip(tmp_path / "all.zip", entries)
    alone = load_database(path)
    entries[-1]["affected"][0]["ranges"][0]["events"] = []  # in the second process's half
    entries[-3]["credits"] = [{"name": "x", "type": "FRIEND"}]
    bad = write_zip(tmp_path / "bad.zip", entries)
    proc = subprocess.run(
        [sys.executable, "-c", _FORKED_LOAD, str(path), str(bad)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    forked, refused = json.loads(proc.stdout)
    if (os.cpu_count() or 1) > 1:
        assert forked["validated_by"] > 1
    assert (forked["records"], forked["digest"]) == (alone.records, alone.digest)
    assert forked["bulk"] == ["PYSEC-BULK-39"]
