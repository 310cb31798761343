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
    def at(cls, root: Path) -> Workspace:
        """The design card's layout below ``root``, ignoring the environment."""
        return cls(
            root=root,
            plans_dir=root / "manifests",
            dockerfiles_dir=root / "dockerfiles",
            evidence_dir=root / "evidence",
            ledger_path=root / "manifests" / "ledger.jsonl",
        )

    @classmethod
    def from_env(cls, root: Path | None = None) -> Workspace:
        """Defaults below ``root`` (the current directory), each overridable by IMAGEKIT_*."""
        default = cls.at(Path(os.environ.get("IMAGEKIT_ROOT", root or Path.cwd())))

        def pick(var: str, fallback: Path) -> Path:
            value = os.environ.get(var)
            return Path(value) if value else fallback

        return cls(
            root=default.root,
            plans_dir=pick("IMAGEKIT_PLANS_DIR", default.plans_dir),
            dockerfiles_dir=pick("IMAGEKIT_DOCKERFILES_DIR", default.dockerfiles_dir),
            evidence_dir=pick("IMAGEKIT_EVIDENCE_DIR", default.evidence_dir),
            ledger_path=pick("IMAGEKIT_LEDGER", default.ledger_path),
        )
