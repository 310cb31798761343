"""What every benchmark writes the same way: the machine it ran on, the results as JSON and
the Markdown summary's first sentence and closing line.

The figures are single runs on a shared machine; the summaries say so, and how to reproduce.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

NOTE = "shared 2-core VM, other engineers building and testing at the same time"
SIDE_BY_SIDE = "Single run on a shared machine; ratios are measured side by side in that one run. "


def machine(loadavg_at_start: list[float] | None = None) -> dict[str, Any]:
    """The results' ``machine``: cores, Python, the load average when the run began."""
    return {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "loadavg_at_start": loadavg_at_start or list(os.getloadavg()),
        "note": NOTE,
    }


def ran_on(results: dict[str, Any]) -> str:
    """The summary's opening: when, on how many cores, how loaded (the rest follows)."""
    host = results["machine"]
    return (
        f"Run {results['date']} on {host['cores']} cores ({host['note']}; load average at "
        f"start {host['loadavg_at_start'][0]:.2f}). "
    )


def write_json(out: Path, stem: str, results: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")


def write_markdown(out: Path, stem: str, lines: list[str], reproduce: str, note: str = "") -> None:
    """``lines``, then ``note`` and how to reproduce the run (``reproduce``), as STEM.md."""
    closing = f"{note}Reproduce with {reproduce}."
    (out / f"{stem}.md").write_text("\n".join([*lines, "", closing, ""]))
