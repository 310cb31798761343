"""One plan's night: the plan, the image the ledger accepts for it, the night's evidence folder,
the preflight, and the one note record a night appends."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from imagekit.errors import RecordRefused
from imagekit.evidence import new_run_dir, write_json
from imagekit.flows.nightly.options import NightOptions
from imagekit.flows.nightly.result import REJECTED, PlanNight
from imagekit.ledger import NightlyDetails, append_record, iter_records
from imagekit.ledger.accepted import AcceptedImage, accepted_image
from imagekit.plans.model import LoadedPlan
from imagekit.plans.upstream import UpstreamTag
from imagekit.registry.client import RegistryClient
from imagekit.workspace import Workspace


class Night:
    """One plan's night: the loaded plan, its evidence folder, and the shared parts."""

    def __init__(
        self,
        workspace: Workspace,
        loaded: LoadedPlan,
        options: NightOptions,
        client: RegistryClient,
        echo: TextIO,
    ) -> None:
        self.workspace, self.loaded, self.options = workspace, loaded, options
        self.client, self.echo = client, echo
        self.name = loaded.name
        self._run_dir: Path | None = None
        self.baseline: AcceptedImage | None = None
        if workspace.ledger_path.exists():
            with iter_records(workspace.ledger_path) as records:
                mine = [r for r in records if r.plan == loaded.name]  # bounded by the plan's
            self.baseline = accepted_image(mine, loaded.name)

    @property
    def run_dir(self) -> Path:
        """The night's evidence folder for this plan, made when first written to."""
        if self._run_dir is None:
            self._run_dir = new_run_dir(self.workspace.evidence_dir, self.name, "nightly")
        return self._run_dir

    def say(self, text: str) -> None:
        self.echo.write(f"nightly: {self.name}: {text}\n")
        self.echo.flush()

    def preflight(self, base: str) -> str | None:
        """The same preflight as `imagekit pipeline`, on ``base``; what it said no to."""
        from imagekit.flows.doctor import run_doctor

        # A night should not spend an hour finding out that the disk is too small or
        # BuildKit is missing.
        report = run_doctor(self.workspace, self.name, base_override=base, client=self.client)
        if report.ok:
            return None
        return "; ".join(f"{c.name}: {c.detail}" for c in report.failed)

    def record(self, night: PlanNight, scope: str, images: dict[str, str]) -> PlanNight:
        """Keep the night's evidence and its one note record; returns the night with both."""
        path = self.run_dir / "night.json"
        night = PlanNight(**{**night.__dict__, "evidence": path})
        write_json(path, night.to_json())
        up = night.upstream
        details = NightlyDetails(
            verdict=night.status,
            audit_status=night.audit_status,
            accepted_audit_status=night.baseline.audit_status if night.baseline else None,
            changes=list(night.changes[:50]),
            **({"upstream": _upstream_json(up)} if up else {}),
            **({"candidate": night.candidate} if night.candidate else {}),
            **({"builder": night.builder} if night.builder else {}),
            **({"guard": night.guard.report()} if night.guard else {}),
            **({"base_changes": list(night.base_changes[:50])} if night.base_comparison else {}),
            **({"plan_diff": night.proposal.plan_diff} if night.proposal else {}),
            **({"notes": list(night.notes)} if night.notes else {}),
        )
        try:
            append_record(
                self.workspace,
                "note",
                plan=self.name,
                images={k: v for k, v in images.items() if v},
                status=f"nightly-{night.status}",
                scope=scope,
                evidence=path,
                details=details,
            )
        except RecordRefused as refused:
            # The verdict and its evidence stand, but a night the ledger does not hold
            # is not a pass.
            detail = f"{night.detail}; the ledger refused the night's note: {refused.problem}"
            if night.exit_code == 0:
                return replace(night, status=REJECTED, exit_code=1, detail=detail)
            return replace(night, detail=detail)
        return night


def _upstream_json(up: UpstreamTag) -> dict[str, Any]:
    document = up.to_json()
    document.pop("plan")
    return document
