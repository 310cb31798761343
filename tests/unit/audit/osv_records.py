"""OSV records and databases the offline OSV tests build: one record, one affected package,
a database loaded from them, and what a lookup in it finds."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from packaging.version import Version
from pip_audit._service.interface import ResolvedDependency

from imagekit.audit.osv import OsvDatabase, load_database
from imagekit.audit.osv_match import OfflineOsvService
from tests.support.osv_export import stamp, write_zip

MODIFIED = datetime(2026, 11, 30, 8, 15, tzinfo=UTC)


def query(db: OsvDatabase, name: str, version: str) -> tuple[Any, list[Any]]:
    return OfflineOsvService(db).query(ResolvedDependency(name=name, version=Version(version)))


def ids(db: OsvDatabase, name: str, version: str) -> list[tuple[str, set[str], list[str]]]:
    dep, results = query(db, name, version)
    assert isinstance(dep, ResolvedDependency), dep
    return [(r.id, set(r.aliases), [str(v) for v in r.fix_versions]) for r in results]


def record(rid: str, affected: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
    return {"id": rid, "modified": stamp(MODIFIED), "affected": affected, **more}


def pkg(name: str, *ranges: list[dict[str, str]], versions: list[str] | None = None) -> Any:
    entry: dict[str, Any] = {
        "package": {"ecosystem": "PyPI", "name": name},
        "ranges": [{"type": "ECOSYSTEM", "events": events} for events in ranges],
    }
    if versions is not None:
        entry["versions"] = versions
    return entry


def load(tmp_path: Path, *entries: dict[str, Any]) -> OsvDatabase:
    return load_database(write_zip(tmp_path / "db.zip", list(entries)))
