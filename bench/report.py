"""What every benchmark writes the same way: the machine it ran on, the results as JSON and
the Markdown summary's title, first sentence and closing line.

The figures are single runs on a shared machine; the summaries say so, and how to reproduce.
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Report:
    """One benchmark's files under ``--out``: STEM.json (every figure) and STEM.md."""

    stem: str
    title: str
    reproduce: str  # the commands that run it again, as the summary's last line names them
    note: str = ""  # said before how to reproduce it

    def write_json(self, out: Path, results: dict[str, Any]) -> None:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{self.stem}.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")

    def write_markdown(self, out: Path, results: dict[str, Any], lines: list[str]) -> None:
        """The title, when and where the run was (continued by the first of ``lines``), the
        rest of ``lines``, then the note and how to reproduce the run."""
        host = results["machine"]
        opening = (
            f"Run {results['date']} on {host['cores']} cores ({host['note']}; load average at "
            f"start {host['loadavg_at_start'][0]:.2f}). "
        ) + lines[0]
        closing = f"{self.note}Reproduce with {self.reproduce}."
        text = [f"# {self.title}", "", opening, *lines[1:], "", closing, ""]
        (out / f"{self.stem}.md").write_text("\n".join(text))
