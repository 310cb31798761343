"""A small OSV export for PyPI, written by the tests, over what the demo image installs.

The demo image (tests/support/base_image.py plus manifests/demo.yaml) holds Debian
bookworm's pip 23.0.1, setuptools 66.1.1, wheel 0.38.4, numpy 1.24.2 and av 10.0.0 in
/usr/lib/python3/dist-packages, and six 1.16.0 pip-installed into
/usr/local/lib/python3.11/dist-packages. The records below are OSV records as OSV publishes
them (fields and ids from the PyPI advisory database and GitHub's), shortened: the versions
lists keep only the releases around the installed ones. Each plays one part:

- ``PYSEC-2023-228``: pip < 23.3 (CVE-2023-5752), affected by an ECOSYSTEM range;
- ``GHSA-mq26-g339-26xf``: GitHub's record of the same flaw, an alias of the one above: the
  two must come out as one finding;
- ``GHSA-cx63-2mw6-8hw5``: setuptools < 70.0.0 (CVE-2024-6345), here given by its explicit
  versions list only (OSV's records carry such a list beside their ranges; this one keeps
  only the list), so the match is by version and no fixed version is known from it;
- ``PYSEC-2022-43012``: setuptools < 65.5.1 (CVE-2022-40897), fixed below the installed
  66.1.1: must not be reported;
- ``PYSEC-2022-43017``: wheel < 0.38.1 (CVE-2022-40898), fixed below the installed 0.38.4;
- ``x_imagekit-test-withdrawn``: a record made up for these tests (the ``x_`` prefix is the
  schema's for ids outside the home databases, and its summary says so) that covers six
  1.16.0 but is withdrawn: must not be reported.

``CLEAN`` is the same export without the two affecting vulnerabilities. The m3-vllm image
(its plan on the vllm seed replica, Debian bookworm too) holds the same Debian pip and
setuptools, so the same records find it; a further image plugs in by adding its records to
``records()`` and its expectations to the integration test's list of subjects.
"""

from __future__ import annotations

import json
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

AFFECTING = ("PYSEC-2023-228", "GHSA-mq26-g339-26xf", "GHSA-cx63-2mw6-8hw5")


def stamp(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _pypi(name: str) -> dict[str, str]:
    return {"ecosystem": "PyPI", "name": name, "purl": f"pkg:pypi/{name}"}


def records(modified: datetime) -> list[dict[str, Any]]:
    """The export's records, every one modified at ``modified`` (which sets its age)."""
    m = stamp(modified)
    return [
        {
            "id": "PYSEC-2023-228",
            "modified": m,
            "published": "2023-10-25T18:17:00Z",
            "aliases": ["CVE-2023-5752"],
            "details": "When installing a package from a Mercurial VCS URL with pip prior to "
            "v23.3, the specified Mercurial revision could be used to inject arbitrary "
            "configuration options to the hg clone call.",
            "affected": [
                {
                    "package": _pypi("pip"),
                    "ranges": [
                        {"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "23.3"}]}
                    ],
                    "versions": ["22.3.1", "23.0", "23.0.1", "23.1", "23.2", "23.2.1"],
                }
            ],
            "severity": [
                {"type": "CVSS_V3", "score": "CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:N/I:L/A:N"}
            ],
            "references": [
                {"type": "FIX", "url": "https://github.com/pypa/pip/pull/12306"},
            ],
        },
        {
            "schema_version": "1.4.0",
            "id": "GHSA-mq26-g339-26xf",
            "modified": m,
            "published": "2023-10-25T18:30:25Z",
            "aliases": ["CVE-2023-5752"],
            "summary": "Command Injection in pip when used with Mercurial",
            "affected": [
                {
                    "package": _pypi("pip"),
                    "ranges": [
                        {"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "23.3"}]}
                    ],
                    "database_specific": {"source": "https://github.com/advisories"},
                }
            ],
            "references": [
                {"type": "ADVISORY", "url": "https://nvd.nist.gov/vuln/detail/CVE-2023-5752"}
            ],
            "database_specific": {
                "cwe_ids": ["CWE-77"],
                "severity": "MODERATE",
                "github_reviewed": True,
            },
        },
        {
            "schema_version": "1.4.0",
            "id": "GHSA-cx63-2mw6-8hw5",
            "modified": m,
            "published": "2024-07-15T00:30:47Z",
            "aliases": ["CVE-2024-6345"],
            "summary": "setuptools vulnerable to Command Injection via package URL",
            "affected": [
                {
                    "package": _pypi("setuptools"),
                    "versions": ["65.5.1", "65.6.0", "66.0.0", "66.1.0", "66.1.1", "69.5.1"],
                }
            ],
        },
        {
            "id": "PYSEC-2022-43012",
            "modified": m,
            "published": "2022-12-23T00:15:00Z",
            "aliases": ["CVE-2022-40897"],
            "details": "Python Packaging Authority (PyPA) setuptools before 65.5.1 allows "
            "remote attackers to cause a denial of service via HTML in a crafted package.",
            "affected": [
                {
                    "package": _pypi("setuptools"),
                    "ranges": [
                        {"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "65.5.1"}]}
                    ],
                    "versions": ["64.0.3", "65.0.0", "65.4.1", "65.5.0"],
                }
            ],
        },
        {
            "id": "PYSEC-2022-43017",
            "modified": m,
            "published": "2022-12-23T00:15:00Z",
            "aliases": ["CVE-2022-40898"],
            "details": "An issue discovered in Python Packaging Authority (PyPA) Wheel 0.37.1 "
            "and earlier allows remote attackers to cause a denial of service via attacker "
            "controlled input to wheel cli.",
            "affected": [
                {
                    "package": _pypi("wheel"),
                    "ranges": [
                        {"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "0.38.1"}]}
                    ],
                }
            ],
        },
        {
            "id": "x_imagekit-test-withdrawn",
            "modified": m,
            "published": "2024-01-02T00:00:00Z",
            "withdrawn": "2024-01-09T00:00:00Z",
            "summary": "Made up for imagekit's tests: a withdrawn advisory covering six 1.16.0",
            "credits": [{"name": "imagekit tests", "type": "OTHER"}],
            "affected": [
                {
                    "package": _pypi("six"),
                    "ranges": [
                        {"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "1.17.0"}]}
                    ],
                    "versions": ["1.16.0"],
                }
            ],
        },
    ]


def clean_records(modified: datetime) -> list[dict[str, Any]]:
    return [r for r in records(modified) if r["id"] not in AFFECTING]


def days_ago(days: float) -> datetime:
    return datetime.now(UTC) - timedelta(days=days)


def write_zip(path: Path, entries: list[dict[str, Any]]) -> Path:
    """The export as OSV publishes it: one ``<ID>.json`` a record in one zip."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for record in entries:
            archive.writestr(f"{record['id']}.json", json.dumps(record, indent=2))
    return path


def write_folder(path: Path, entries: list[dict[str, Any]]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for record in entries:
        (path / f"{record['id']}.json").write_text(json.dumps(record, indent=2))
    return path
