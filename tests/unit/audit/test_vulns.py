"""The vulnerability stage: never a pass when the service did not answer."""

from __future__ import annotations

import json
import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from imagekit.audit.osv import OsvDatabase, load_database
from imagekit.audit.vulns import fails, requirement_lines, scan
from tests.support.osv_export import clean_records, records, write_zip


def test_requirement_lines_keep_only_what_an_index_could_know() -> None:
    lines, left_out = requirement_lines(
        [
            ("Pillow", "11.3.0"),
            ("torch", "2.11.0+cu130"),
            ("weird", "1.0-debian"),
            ("pillow", "12.2.0"),
        ]
    )
    assert lines == ["pillow==11.3.0"]
    assert any("torch" in why and "local version" in why for why in left_out)
    assert any("weird" in why for why in left_out)
    assert any("second version" in why for why in left_out)


def test_offline_skips_and_says_so() -> None:
    result = scan([("pip", "23.0.1")], offline=True)
    assert result.status == "skipped"
    assert "--offline" in result.reason


def test_an_unreachable_service_is_unknown_with_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Real pip-audit, sent through a proxy port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(var, f"http://127.0.0.1:{port}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    result = scan([("pip", "23.0.1")], offline=False, timeout_s=300)
    assert result.status == "unknown"
    assert "pip-audit gave no report" in result.reason
    assert result.exit_code not in (None, 0)
    assert result.requirements == ("pip==23.0.1",)


# The offline path: the demo image's distributions against the tests' OSV export.
DEMO = [
    ("av", "10.0.0"),
    ("numpy", "1.24.2"),
    ("pip", "23.0.1"),
    ("setuptools", "66.1.1"),
    ("six", "1.16.0"),
    ("wheel", "0.38.4"),
]
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def _db(tmp_path: Path, entries: list[dict[str, Any]]) -> OsvDatabase:
    return load_database(write_zip(tmp_path / "all.zip", entries))


def test_findings_name_id_aliases_versions_and_location(tmp_path: Path) -> None:
    db = _db(tmp_path, records(NOW - timedelta(days=3)))
    where = {("pip", "23.0.1"): ("/usr/lib/python3/dist-packages",)}
    result = scan(DEMO, offline=True, database=db, locations=where, now=NOW)

    assert result.status == "findings"
    assert result.audited == 6 and result.not_audited == ()
    assert [(f.name, f.id, f.aliases, f.fix_versions) for f in result.findings] == [
        ("pip", "PYSEC-2023-228", ("CVE-2023-5752", "GHSA-mq26-g339-26xf"), ("23.3",)),
        ("setuptools", "CVE-2024-6345", ("GHSA-cx63-2mw6-8hw5",), ()),
    ]
    assert result.findings[0].locations == ("/usr/lib/python3/dist-packages",)
    assert "database of 2026-11-30, 3 days old" in result.reason
    assert result.source == "offline OSV export"
    assert result.database is not None and result.database["digest"].startswith("sha256:")
    # The evidence document is pip-audit's own JSON format.
    document = json.loads(result.stdout)
    assert {d["name"] for d in document["dependencies"]} == {n for n, _ in DEMO}
    assert (fails(result, "findings"), fails(result, "fixable"), fails(result, "never")) == (
        True, True, False,
    )  # fmt: skip


def test_clean_only_when_every_distribution_was_matched(tmp_path: Path) -> None:
    db = _db(tmp_path, clean_records(NOW - timedelta(days=3)))
    result = scan(DEMO, offline=False, database=db, now=NOW)
    assert result.status == "clean", result.reason
    assert result.reason == (
        "no known vulnerabilities in 6 distributions (the database of 2026-11-30, 3 days old)"
    )
    assert not fails(result, "findings")

    odd = scan([*DEMO, ("debianish", "1.0-debian")], offline=False, database=db, now=NOW)
    assert odd.status == "unknown"
    assert odd.not_audited == ("debianish: 1.0-debian is not a PEP 440 version",)


def test_an_advisory_with_only_a_git_range_is_unknown_never_clean(tmp_path: Path) -> None:
    git_only = {
        "id": "GHSA-only-git-range",
        "modified": "2026-11-30T08:15:00Z",
        "affected": [
            {
                "package": {"ecosystem": "PyPI", "name": "six"},
                "ranges": [
                    {
                        "type": "GIT",
                        "repo": "https://example.invalid/six.git",
                        "events": [{"introduced": "0"}, {"fixed": "c" * 40}],
                    }
                ],
            }
        ],
    }
    db = _db(tmp_path, [*clean_records(NOW - timedelta(days=3)), git_only])
    result = scan(DEMO, offline=False, database=db, now=NOW)
    assert result.status == "unknown", result.reason
    assert len(result.not_audited) == 1
    assert result.not_audited[0].startswith("six: 1.16.0 could not be matched: ")
    assert "GHSA-only-git-range" in result.not_audited[0]


def test_an_old_or_future_database_is_unknown_never_clean(tmp_path: Path) -> None:
    old = _db(tmp_path, clean_records(NOW - timedelta(days=45)))
    result = scan(DEMO, offline=False, database=old, now=NOW)
    assert result.status == "unknown"
    assert result.reason.startswith(
        "database of 2026-10-19, 45 days old, older than --vuln-db-max-age 30 days"
    )
    assert scan(DEMO, offline=False, database=old, max_age_days=60, now=NOW).status == "clean"

    future = _db(tmp_path, clean_records(NOW + timedelta(days=2)))
    assert scan(DEMO, offline=False, database=future, now=NOW).status == "unknown"


def test_findings_from_an_old_database_are_kept_and_still_fail(tmp_path: Path) -> None:
    old = _db(tmp_path, records(NOW - timedelta(days=45)))
    result = scan(DEMO, offline=False, database=old, now=NOW)
    assert result.status == "unknown"
    assert {f.id for f in result.findings} == {"PYSEC-2023-228", "CVE-2024-6345"}
    assert fails(result, "findings") and fails(result, "fixable")


def test_fixable_fails_only_on_findings_with_a_fixed_version(tmp_path: Path) -> None:
    only_listed = [r for r in records(NOW) if r["id"] != "PYSEC-2023-228" and "mq26" not in r["id"]]
    result = scan(DEMO, offline=False, database=_db(tmp_path, only_listed), now=NOW)
    assert [f.id for f in result.findings] == ["CVE-2024-6345"]
    assert fails(result, "findings") and not fails(result, "fixable")
