"""Matching against the offline OSV database: OSV's evaluation rules, aliases merged once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pip_audit._service.interface import SkippedDependency

from imagekit.audit.osv import load_database
from tests.support.osv_export import records, write_zip
from tests.unit.audit.osv_records import MODIFIED, ids, load, pkg, query, record


@pytest.fixture
def export(tmp_path: Path) -> Path:
    return write_zip(tmp_path / "all.zip", records(MODIFIED))


def test_range_match_with_aliases_merged_into_one_finding(export: Path) -> None:
    db = load_database(export)
    # PYSEC-2023-228 and GHSA-mq26-g339-26xf are one flaw (CVE-2023-5752): reported once.
    assert ids(db, "pip", "23.0.1") == [
        ("PYSEC-2023-228", {"CVE-2023-5752", "GHSA-mq26-g339-26xf"}, ["23.3"])
    ]
    assert ids(db, "pip", "23.3rc1") != []  # a pre-release of the fix is before it
    assert ids(db, "pip", "23.3") == []
    assert ids(db, "pip", "24.0") == []


def test_explicit_versions_list_matches_by_pep_440_equality(export: Path) -> None:
    db = load_database(export)
    assert ids(db, "setuptools", "66.1.1") == [
        ("CVE-2024-6345", {"GHSA-cx63-2mw6-8hw5"}, [])  # listed only; no fix named
    ]
    assert ids(db, "setuptools", "66.0") == ids(db, "setuptools", "66.0.0")  # 66.0 == 66.0.0
    assert ids(db, "setuptools", "70.0.0") == []


def test_fixed_below_the_installed_version_and_withdrawn_are_not_reported(export: Path) -> None:
    db = load_database(export)
    assert ids(db, "wheel", "0.38.4") == []
    assert ids(db, "wheel", "0.38.0") == [("PYSEC-2022-43017", {"CVE-2022-40898"}, ["0.38.1"])]
    assert ids(db, "six", "1.16.0") == []
    # setuptools 66.1.1 is past PYSEC-2022-43012's fix: only the listed version matched.
    assert [i for i, _, _ in ids(db, "setuptools", "66.1.1")] == ["CVE-2024-6345"]


def test_names_are_compared_as_pep_503_says(tmp_path: Path) -> None:
    db = load(tmp_path, record("PYSEC-1", [pkg("Zope.Interface", [{"introduced": "0"}])]))
    assert ids(db, "zope-interface", "5.0") and ids(db, "ZOPE__interface", "5.0")
    assert ids(db, "zopeinterface", "5.0") == []


def test_last_affected_limit_and_several_ranges(tmp_path: Path) -> None:
    db = load(
        tmp_path,
        record("PYSEC-LA", [pkg("a", [{"introduced": "1.0"}, {"last_affected": "1.2"}])]),
        record("PYSEC-LIM", [pkg("b", [{"introduced": "0"}, {"limit": "2.0"}])]),
        record(
            "PYSEC-TWO",
            [
                pkg(
                    "c",
                    [{"introduced": "3.0"}, {"fixed": "3.2.5"}],
                    [{"fixed": "1.0.2"}, {"introduced": "1.0.0"}],  # unsorted, as OSV allows
                )
            ],
        ),
    )
    assert [bool(ids(db, "a", v)) for v in ("0.9", "1.0", "1.2", "1.2.1")] == [
        False, True, True, False,
    ]  # fmt: skip
    assert [bool(ids(db, "b", v)) for v in ("1.9", "2.0", "3.0")] == [True, False, False]
    assert [bool(ids(db, "c", v)) for v in ("0.9", "1.0.1", "1.0.2", "2.0", "3.1", "3.2.5")] == [
        False, True, False, False, True, False,
    ]  # fmt: skip
    assert ids(db, "c", "3.1")[0][2] == ["3.2.5"]


def test_a_local_version_is_matched_as_its_public_release(export: Path) -> None:
    assert [i for i, _, _ in ids(load_database(export), "pip", "23.0.1+cu128")] == [
        "PYSEC-2023-228"
    ]


def test_aliases_merge_transitively(tmp_path: Path) -> None:
    rng = [{"introduced": "0"}]
    db = load(
        tmp_path,
        record("GHSA-aaaa-aaaa-aaaa", [pkg("d", rng)], aliases=["CVE-1"]),
        record("GHSA-bbbb-bbbb-bbbb", [pkg("d", rng)], aliases=["CVE-2"]),
        record("PYSEC-9", [pkg("d", rng)], aliases=["CVE-1", "CVE-2"]),
        record("GHSA-cccc-cccc-cccc", [pkg("d", rng)]),
    )
    found = ids(db, "d", "1.0")
    assert sorted(i for i, _, _ in found) == ["GHSA-cccc-cccc-cccc", "PYSEC-9"]
    merged = next(a for i, a, _ in found if i == "PYSEC-9")
    assert merged == {"CVE-1", "CVE-2", "GHSA-aaaa-aaaa-aaaa", "GHSA-bbbb-bbbb-bbbb"}


def test_other_ecosystems_are_not_matched(tmp_path: Path) -> None:
    npm = {"package": {"ecosystem": "npm", "name": "e"}, "versions": ["1.0"]}
    db = load(tmp_path, record("GHSA-x", [npm, pkg("f", [{"introduced": "0"}])]))
    assert ids(db, "e", "1.0") == []


def test_a_range_that_cannot_be_compared_skips_the_distribution(tmp_path: Path) -> None:
    db = load(
        tmp_path,
        record("PYSEC-OLD", [pkg("g", [{"introduced": "0"}, {"fixed": "r42"}])]),
    )
    dep, results = query(db, "g", "1.0")
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
    db = load(tmp_path, record("GHSA-git-only-range", [entry]))
    dep, results = query(db, "g", "1.0")
    assert isinstance(dep, SkippedDependency) and results == []
    assert "GHSA-git-only-range" in dep.skip_reason and "GIT" in dep.skip_reason


def test_a_git_range_beside_a_versions_list_is_decided_by_the_list(tmp_path: Path) -> None:
    entry = {
        "package": {"ecosystem": "PyPI", "name": "g"},
        "ranges": [_git({"introduced": "0"}, {"fixed": "b" * 40})],
        "versions": ["0.9"],
    }
    db = load(tmp_path, record("GHSA-git-listed", [entry]))
    assert ids(db, "g", "1.0") == []
    assert [i for i, _, _ in ids(db, "g", "0.9")] == ["GHSA-git-listed"]
