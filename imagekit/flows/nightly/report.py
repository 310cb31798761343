"""A night's report: every plan's verdict, the night's exit code, the JSON document, the lines
a terminal shows and the markdown job summary of CI."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from imagekit.flows.nightly.result import PlanNight, short


@dataclass(frozen=True)
class NightlyResult:
    started: str
    plans: tuple[PlanNight, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def exit_code(self) -> int:
        codes = {p.exit_code for p in self.plans}
        for code in (3, 2, 1):
            if code in codes:
                return code
        return 0 if self.plans else 1

    def to_json(self) -> dict[str, Any]:
        return {
            "started": self.started,
            "exit_code": self.exit_code,
            "plans": [p.to_json() for p in self.plans],
            "notes": list(self.notes),
        }

    def lines(self) -> list[str]:
        out = []
        for p in self.plans:
            audit = p.audit_status or "-"
            if p.baseline and p.baseline.audit_status:
                audit += f" (accepted: {p.baseline.audit_status})"
            out.append(f"{p.plan}: {p.status} - {p.detail}; audit {audit}")
            if p.upstream is not None:
                out.append(
                    f"  tag {p.upstream.tag_reference}: pinned {p.upstream.pinned}, upstream "
                    f"now {p.upstream.served or p.upstream.state} (resolved "
                    f"{p.upstream.resolved_at})"
                )
            out.extend(f"  {c}" for c in p.changes)
            if p.base_changes:
                out.append("  upstream, the pinned base against the new one:")
                out.extend(f"    {c}" for c in p.base_changes)
            if p.proposal is not None:
                out.append("  proposed plan change:")
                out.extend(f"    {line}" for line in p.proposal.plan_diff.splitlines())
            out.extend(f"  note: {n}" for n in p.notes)
        if not self.plans:
            out.append("no plans found: nothing was rebuilt")
        out.append(f"nightly: exit {self.exit_code}")
        return out

    def markdown(self) -> str:
        """A CI job summary: the verdict, one row a plan, then each plan's changes and diff."""
        icon = {0: "passed", 1: "FAILED", 2: "FAILED (bad input)", 3: "FAILED (could not finish)"}

        def cell(text: str) -> str:
            return text.replace("|", "\\|").replace("\n", " ")

        rows = [
            f"# imagekit nightly ({self.started})",
            "",
            f"**Night {icon.get(self.exit_code, 'FAILED')}** (exit {self.exit_code}).",
            "",
            "| plan | tag | pinned | upstream now | verdict | what changed inside |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for p in self.plans:
            up = p.upstream
            tag = f"`{up.tag}`" if up else "-"
            pinned = f"`{short(str(up.pinned))}`" if up else "-"
            if up is None:
                now = "-"
            elif up.served is None:
                now = f"{up.state}"
            else:
                now = f"`{short(str(up.served))}`" + (" (same)" if not up.moved else "")
            rows.append(
                f"| {p.plan} | {tag} | {pinned} | {now} | **{p.status}** | {cell(p.inside())} |"
            )
        if not self.plans:
            rows.append("| - | - | - | - | no plans found | - |")
        rows += [
            "",
            "| plan | audit (accepted) | compared with | detail |",
            "| --- | --- | --- | --- |",
        ]
        for p in self.plans:
            accepted = p.baseline.audit_status if p.baseline else None
            audit = f"{p.audit_status or '-'} ({accepted or '-'})"
            ref = f"`{p.baseline.reference}`" if p.baseline else "-"
            rows.append(f"| {p.plan} | {audit} | {ref} | {cell(p.detail)} |")
        for p in self.plans:
            if p.guard is not None and p.guard.drifted:
                rows += ["", f"## {p.plan}: overlay drift", ""]
                rows += [f"- {line}" for line in p.guard.drift_lines()]
            if p.changes:
                rows += ["", f"## {p.plan}: what changed", ""]
                rows += [f"- {c}" for c in p.changes]
            if p.base_changes:
                rows += ["", f"## {p.plan}: what upstream changed (pinned base -> new base)", ""]
                rows += [f"- {c}" for c in p.base_changes]
            if p.proposal is not None:
                rows += ["", f"## {p.plan}: proposed plan change", "", "```diff"]
                rows += p.proposal.plan_diff.rstrip("\n").splitlines()
                rows.append("```")
        return "\n".join(rows) + "\n"
