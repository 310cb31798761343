"""Where a project's plans, rendered contexts, evidence and ledger live.

Every stage takes a Workspace instead of guessing paths, so tests (and users with several
projects) move all of it with environment variables or flags, and nothing writes into a
checkout by accident.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Workspace:
    root: Path
    plans_dir: Path
    dockerfiles_dir: Path
    evidence_dir: Path
    ledger_path: Path

    @classmethod
    def from_env(cls, root: Path | None = None) -> Workspace:
        """Defaults below ``root`` (the current directory), each overridable by IMAGEKIT_*."""
        base = Path(os.environ.get("IMAGEKIT_ROOT", root or Path.cwd()))

        def pick(var: str, default: Path) -> Path:
            value = os.environ.get(var)
            return Path(value) if value else default

        return cls(
            root=base,
            plans_dir=pick("IMAGEKIT_PLANS_DIR", base / "manifests"),
            dockerfiles_dir=pick("IMAGEKIT_DOCKERFILES_DIR", base / "dockerfiles"),
            evidence_dir=pick("IMAGEKIT_EVIDENCE_DIR", base / "evidence"),
            ledger_path=pick("IMAGEKIT_LEDGER", base / "manifests" / "ledger.jsonl"),
        )
