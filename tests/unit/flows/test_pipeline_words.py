"""What users read of the pipeline names the stages it runs, in the order it runs them.

The stage list is ``PIPELINE`` (imagekit/flows/pipeline.py); `imagekit --help`, `imagekit
pipeline --help`, the module's docstring, ARCHITECTURE.md's data flow and the README's
command table each say it in words. They fell behind once (the GPU preflight ran for weeks
while none of them named it); these tests read each against the tuple.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from imagekit.cli import _COMMANDS
from imagekit.cli.pipeline_cmd import command as pipeline_command
from imagekit.flows import pipeline

ROOT = Path(__file__).resolve().parents[3]


def spoken(stage: str) -> str:
    """A stage's name as prose writes it: final-pull is "final pull", gpu-preflight "GPU
    preflight"."""
    return stage.replace("-", " ").replace("gpu", "GPU")


def in_order(text: str, names: list[str]) -> list[str]:
    """The names TEXT does not mention in order after the one before (empty: all are)."""
    missing, at = [], 0
    flat = re.sub(r"\s+", " ", text)
    for name in names:
        found = flat.find(name, at)
        if found < 0:
            missing.append(name)
        else:
            at = found + len(name)
    return missing


STAGE_WORDS = [spoken(stage) for stage in pipeline.STAGES]


def test_the_command_list_names_every_stage_in_order_and_nothing_else() -> None:
    chain = _COMMANDS["pipeline"][1].split(",")[0]
    assert chain.split(" -> ") == STAGE_WORDS


def test_pipeline_help_names_every_stage_in_order() -> None:
    help_text = pipeline_command.help or ""
    assert re.sub(r"\s+", " ", help_text).split(",")[0].split(" -> ") == STAGE_WORDS


@pytest.mark.parametrize(
    ("where", "text"),
    [
        ("imagekit/flows/pipeline.py's docstring", pipeline.__doc__ or ""),
        (
            "README.md's pipeline row",
            next(
                line
                for line in (ROOT / "README.md").read_text().splitlines()
                if line.startswith("| `imagekit pipeline")
            ),
        ),
    ],
)
def test_the_prose_names_every_stage_in_order(where: str, text: str) -> None:
    assert in_order(text, STAGE_WORDS) == [], where


def test_the_architecture_data_flow_names_each_stage_module() -> None:
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    flow = text.split("## The pipeline, as data flows", 1)[1].split("```")[1]
    for module in ("imagekit.audit", "imagekit.mirror", "imagekit.pull", "imagekit.gpu"):
        assert module in flow, module


def test_the_order_check_sees_a_stage_left_out() -> None:
    assert in_order("doctor -> build -> ledger", STAGE_WORDS) == STAGE_WORDS[2:-1]
