"""The offline OSV database: strict loading, OSV's evaluation rules, aliases merged once."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version
from pip_audit._service.interface import ResolvedDependency, SkippedDependency

from imagekit.audit.osv import OfflineOsvService, OsvDatabase, load_database
from imagekit.errors import VulnDatabaseError
from tests.support.osv_export import records, stamp, write_folder, write_zip

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
MODIFIED = datetime(2026, 11, 30, 8, 15, tzinfo=UTC)


@pytest.fixture
def export(tmp_path: Path) -> Path:
    return write_zip(tmp_path / "all.zip", records(MODIFIED))


def _query(db: OsvDatabase, name: str, version: str) -> tuple[Any, list[Any]]:
    return OfflineOsvService(db).query(ResolvedDependency(name=name, version=Version(version)))


def _ids(db: OsvDatabase, name: str, version: str) -> list[tuple[str, set[str], list[str]]]:
    dep, results = _query(db, name, version)
    assert isinstance(dep, ResolvedDependency), dep
    return [(r.id, set(r.aliases), [str(v) for v in r.fix_versions]) for r in results]


def _record(rid: str, affected: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
    return {"id": rid, "modified": stamp(MODIFIED), "affected": affected, **more}


def _pkg(name: str, *ranges: list[dict[str, str]], versions: list[str] | None = None) -> Any:
    entry: dict[str, Any] = {
        "package": {"ecosystem": "PyPI", "name": name},
        "ranges": [{"type": "ECOSYSTEM", "events": events} for events in ranges],
    }
    if versions is not None:
        entry["versions"] = versions
    return entry


def _db(tmp_path: Path, *entries: dict[str, Any]) -> OsvDatabase:
    return load_database(write_zip(tmp_path / "db.zip", list(entries)))


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


def test_range_match_with_aliases_merged_into_one_finding(export: Path) -> None:
    db = load_database(export)
    # PYSEC-2023-228 and GHSA-mq26-g339-26xf are one flaw (CVE-2023-5752): reported once.
    assert _ids(db, "pip", "23.0.1") == [
        ("PYSEC-2023-228", {"CVE-2023-5752", "GHSA-mq26-g339-26xf"}, ["23.3"])
    ]
    assert _ids(db, "pip", "23.3rc1") != []  # a pre-release of the fix is before it
    assert _ids(db, "pip", "23.3") == []
    assert _ids(db, "pip", "24.0") == []


def test_explicit_versions_list_matches_by_pep_440_equality(export: Path) -> None:
    db = load_database(export)
    assert _ids(db, "setuptools", "66.1.1") == [
        ("CVE-2024-6345", {"GHSA-cx63-2mw6-8hw5"}, [])  # listed only; no fix named
    ]
    assert _ids(db, "setuptools", "66.0") == _ids(db, "setuptools", "66.0.0")  # 66.0 == 66.0.0
    assert _ids(db, "setuptools", "70.0.0") == []


def test_fixed_below_the_installed_version_and_withdrawn_are_not_reported(export: Path) -> None:
    db = load_database(export)
    assert _ids(db, "wheel", "0.38.4") == []
    assert _ids(db, "wheel", "0.38.0") == [("PYSEC-2022-43017", {"CVE-2022-40898"}, ["0.38.1"])]
    assert _ids(db, "six", "1.16.0") == []
    # setuptools 66.1.1 is past PYSEC-2022-43012's fix: only the listed version matched.
    assert [i for i, _, _ in _ids(db, "setuptools", "66.1.1")] == ["CVE-2024-6345"]


def test_names_are_compared_as_pep_503_says(tmp_path: Path) -> None:
    db = _db(tmp_path, _record("PYSEC-1", [_pkg("Zope.Interface", [{"introduced": "0"}])]))
    assert _ids(db, "zope-interface", "5.0") and _ids(db, "ZOPE__interface", "5.0")
    assert _ids(db, "zopeinterface", "5.0") == []


def test_last_affected_limit_and_several_ranges(tmp_path: Path) -> None:
    db = _db(
        tmp_path,
        _record("PYSEC-LA", [_pkg("a", [{"introduced": "1.0"}, {"last_affected": "1.2"}])]),
        _record("PYSEC-LIM", [_pkg("b", [{"introduced": "0"}, {"limit": "2.0"}])]),
        _record(
            "PYSEC-TWO",
            [
                _pkg(
                    "c",
                    [{"introduced": "3.0"}, {"fixed": "3.2.5"}],
                    [{"fixed": "1.0.2"}, {"introduced": "1.0.0"}],  # unsorted, as OSV allows
                )
            ],
        ),
    )
    assert [bool(_ids(db, "a", v)) for v in ("0.9", "1.0", "1.2", "1.2.1")] == [
        False, True, True, False,
    ]  # fmt: skip
    assert [bool(_ids(db, "b", v)) for v in ("1.9", "2.0", "3.0")] == [True, False, False]
    assert [bool(_ids(db, "c", v)) for v in ("0.9", "1.0.1", "1.0.2", "2.0", "3.1", "3.2.5")] == [
        False, True, False, False, True, False,
    ]  # fmt: skip
    assert _ids(db, "c", "3.1")[0][2] == ["3.2.5"]


def test_a_local_version_is_matched_as_its_public_release(export: Path) -> None:
    assert [i for i, _, _ in _ids(load_database(export), "pip", "23.0.1+cu128")] == [
        "PYSEC-2023-228"
    ]


def test_aliases_merge_transitively(tmp_path: Path) -> None:
    rng = [{"introduced": "0"}]
    db = _db(
        tmp_path,
        _record("GHSA-aaaa-aaaa-aaaa", [_pkg("d", rng)], aliases=["CVE-1"]),
        _record("GHSA-bbbb-bbbb-bbbb", [_pkg("d", rng)], aliases=["CVE-2"]),
        _record("PYSEC-9", [_pkg("d", rng)], aliases=["CVE-1", "CVE-2"]),
        _record("GHSA-cccc-cccc-cccc", [_pkg("d", rng)]),
    )
    found = _ids(db, "d", "1.0")
    assert sorted(i for i, _, _ in found) == ["GHSA-cccc-cccc-cccc", "PYSEC-9"]
    merged = next(a for i, a, _ in found if i == "PYSEC-9")
    assert merged == {"CVE-1", "CVE-2", "GHSA-aaaa-aaaa-aaaa", "GHSA-bbbb-bbbb-bbbb"}


def test_other_ecosystems_are_not_matched(tmp_path: Path) -> None:
    npm = {"package": {"ecosystem": "npm", "name": "e"}, "versions": ["1.0"]}
    db = _db(tmp_path, _record("GHSA-x", [npm, _pkg("f", [{"introduced": "0"}])]))
    assert _ids(db, "e", "1.0") == []


def test_a_range_that_cannot_be_compared_skips_the_distribution(tmp_path: Path) -> None:
    db = _db(tmp_path, _record("PYSEC-OLD", [_pkg("g", [{"introduced": "0"}, {"fixed": "r42"}])]))
    dep, results = _query(db, "g", "1.0")
    assert isinstance(dep, SkippedDependency) and results == []
    assert "PYSEC-OLD" in dep.skip_reason and "'r42'" in dep.skip_reason


def _git(*events: dict[str, str]) -> dict[str, Any]:
    return {"type": "GIT", "repo": "https://example.invalid/g.git", "events": list(events)}


@pytest.mark.parametrize("versions", [None, []])
def test_a_git_range_without_a_versions_list_is_unknown_naming_the_record(
    tmp_path: Path, versions: list[str] | None
) -> None:
    """A GIT range names commits; without the versions list OSV puts beside it, imagekit
    cannot say whether the installed release is among them: skipped, never clean."""
    entry: dict[str, Any] = {
        "package": {"ecosystem": "PyPI", "name": "g"},
        "ranges": [_git({"introduced": "0"}, {"fixed": "b" * 40})],
    }
    if versions is not None:
        entry["versions"] = versions
    db = _db(tmp_path, _record("GHSA-git-only-range", [entry]))
    dep, results = _query(db, "g", "1.0")
    assert isinstance(dep, SkippedDependency) and results == []
    assert "GHSA-git-only-range" in dep.skip_reason and "GIT" in dep.skip_reason


def test_a_git_range_beside_a_versions_list_is_decided_by_the_list(tmp_path: Path) -> None:
    entry = {
        "package": {"ecosystem": "PyPI", "name": "g"},
        "ranges": [_git({"introduced": "0"}, {"fixed": "b" * 40})],
        "versions": ["0.9"],
    }
    db = _db(tmp_path, _record("GHSA-git-listed", [entry]))
    assert _ids(db, "g", "1.0") == []
    assert [i for i, _, _ in _ids(db, "g", "0.9")] == ["GHSA-git-listed"]


def test_every_documented_optional_field_is_accepted(tmp_path: Path) -> None:
    full = _record(
        "GHSA-full-full-full",
        [
            {
                "package": {"ecosystem": "PyPI", "name": "h", "purl": "pkg:pypi/h"},
                "severity": None,
                "ranges": [
                    {
                        "type": "GIT",
                        "repo": "https://example.invalid/h.git",
                        "events": [{"introduced": "0"}, {"limit": "a" * 40}],
                    },
                    {
                        "type": "SEMVER",
                        "events": [{"introduced": "1.0.0"}, {"fixed": "1.0.2"}],
                        "database_specific": {"note": "x"},
                    },
                ],
                "versions": ["1.0.0"],
                "ecosystem_specific": {"affects": ["h.core"]},
                "database_specific": {"source": "x"},
            }
        ],
        schema_version="1.7.0",
        published=stamp(MODIFIED),
        aliases=None,
        related=["CVE-0000-0001"],
        upstream=["CVE-0000-0002"],
        summary="s",
        details="d",
        severity=[
            {
                "type": "CVSS_V4",
                "score": "CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N",
            }
        ],
        references=[{"type": "DISCUSSION", "url": "https://example.invalid/d"}],
        credits=[{"name": "n", "contact": ["mailto:n@example.invalid"], "type": "FINDER"}],
        database_specific={"any": {"thing": 1}},
    )
    assert [i for i, _, _ in _ids(_db(tmp_path, full), "h", "1.0.1")] == ["GHSA-full-full-full"]


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        (lambda r: r.update(vulnerable=True), "vulnerable: Extra inputs are not permitted"),
        (lambda r: r.pop("modified"), "modified: Field required"),
        (lambda r: r.update(modified="2026-11-30 08:15:00"), "modified: String should match"),
        (
            lambda r: r["affected"][0]["ranges"][0]["events"].append(
                {"introduced": "1", "fixed": "2"}
            ),
            "exactly one of introduced, fixed",
        ),
        (
            lambda r: r["affected"][0]["ranges"][0]["events"].append({"last_affected": "2"}),
            "fixed or last_affected events, not both",
        ),
        (
            lambda r: r["affected"][0]["ranges"][0].update(type="NUMERIC"),
            "affected.0.ranges.0.type",
        ),
        (lambda r: r["affected"][0]["package"].update(version="1"), "package.version"),
        (lambda r: r.update(schema_version="2.0.0"), "is not OSV 1.x"),
    ],
)
def test_a_record_that_does_not_parse_is_exit_2_naming_the_file(
    tmp_path: Path, change: Any, complaint: str
) -> None:
    entries = records(MODIFIED)
    bad = next(r for r in entries if r["id"] == "PYSEC-2023-228")
    change(bad)
    path = write_zip(tmp_path / "all.zip", entries)
    with pytest.raises(VulnDatabaseError) as info:
        load_database(path)
    assert info.value.exit_code == 2
    assert info.value.message.startswith(f"{path}!PYSEC-2023-228.json: not an OSV record: ")
    assert complaint in info.value.message


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
                [_record("GHSA-n", [{"package": {"ecosystem": "npm", "name": "left-pad"}}])],
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
        _record(f"PYSEC-BULK-{n}", [_pkg(f"bulk-{n}", [{"introduced": "0"}, {"fixed": "2"}])])
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
    assert "PYSEC-BULK-37.json: not an OSV record: credits.0.type" in refused["error"]
