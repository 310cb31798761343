"""One build of several platforms under way: what its steps carry between them, and the tag
each platform's engine build is pushed under.

Apart from the flow (platforms.py) so that the index (platforms_index.py) and the proofs
(platforms_proof.py) it passes through take the same value without importing the flow.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from imagekit.builders.context import Tee
from imagekit.builders.record import record_rejected
from imagekit.builders.remote import Daemon
from imagekit.errors import RecordRefused
from imagekit.ledger import RejectedBuildDetails
from imagekit.plans.model import LoadedPlan
from imagekit.plans.render import Rendered
from imagekit.refs import Platform, Reference
from imagekit.workspace import Workspace


def platform_tag(platform: Platform) -> str:
    return str(platform).replace("/", "-")


@dataclass
class PlatformsRun:
    """What one build of several platforms carries between its steps."""

    workspace: Workspace
    loaded: LoadedPlan
    rendered: Rendered
    repo: Reference
    run_dir: Path
    log_path: Path
    tee: Tee
    builder: str
    where: str
    daemon: Daemon | None  # None: the engine builds each platform in turn
    candidate: str | None  # a night's candidate: the nightly-... tag (BuildOptions.candidate)

    def say(self, text: str) -> None:
        self.tee.write(f"imagekit: {text}\n")

    def reject(self, details: RejectedBuildDetails, image: str) -> None:
        try:
            record_rejected(
                self.workspace, self.loaded, details, log_path=self.log_path, image=image
            )
        except RecordRefused as refused:
            self.say(f"the rejection was not recorded: {refused.problem}")
