"""The OSV schema, read strictly: every documented field taken, anything else refused by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from imagekit.audit.osv import load_database
from imagekit.errors import VulnDatabaseError
from tests.support.osv_export import records, stamp, write_zip
from tests.unit.audit.osv_records import MODIFIED, ids, load, record


def test_every_documented_optional_field_is_accepted(tmp_path: Path) -> None:
    full = record(
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
    assert [i for i, _, _ in ids(load(tmp_path, full), "h", "1.0.1")] == ["GHSA-full-full-full"]


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
