"""A plan that does not validate names the key as the file spells it, for every step kind."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from imagekit.errors import PlanError
from imagekit.plans.load import load_plan
from imagekit.plans.steps import STEP_KINDS, STEP_MODELS

BASE = "127.0.0.1:5000/team/base@sha256:" + "ab" * 32
# One valid step of each kind, the unknown key added to it by the test.
STEPS: dict[str, dict[str, object]] = {
    "remove_system_packages": {"names": ["python3-gi"]},
    "pip_install": {"requirements": ["six==1.16.0"]},
    "pip_uninstall": {"names": ["six"]},
    "overlay": {"source": "f.py", "destination": "/opt/f.py", "replaces": {"absent": True}},
    "env": {"vars": {"A": "1"}},
    "labels": {"labels": {"org.example.team": "serving"}},
    "entrypoint": {"argv": ["launcher"]},
    "cmd": {"argv": ["--help"]},
}


def test_every_step_kind_has_a_case_here() -> None:
    assert set(STEPS) == set(STEP_KINDS)


@pytest.mark.parametrize("kind", STEP_KINDS)
def test_an_unknown_key_in_a_step_is_named_without_the_kind_level(
    kind: str, tmp_path: Path
) -> None:
    (tmp_path / "d" / "p").mkdir(parents=True)
    (tmp_path / "d" / "p" / "f.py").write_text("x = 1\n")
    step = {"kind": kind, **STEPS[kind], "destinaton": "/x"}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"name": "p", "base": {"reference": BASE}, "steps": [step]}))
    with pytest.raises(PlanError) as info:
        load_plan(path, dockerfiles_dir=tmp_path / "d")
    # pydantic puts the discriminator between the index and the key: the file has no such level
    assert info.value.key == "steps[0].destinaton"
    assert info.value.message.endswith("steps[0].destinaton: unknown key")
    allowed = ", ".join(sorted(STEP_MODELS[kind].model_fields))
    assert f"allowed here: {allowed}" in (info.value.hint or "")
