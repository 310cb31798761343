"""The registry builder's assertion check against the real engine: a check that hangs past
its limit ends with its container gone (a killed ``docker run`` client alone leaves it
running, with the image's command still going, until the engine is restarted)."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagekit.builders.assemble import check
from imagekit.errors import CouldNotFinish
from imagekit.plans.load import load_plan
from imagekit.plans.render import ASSERT_CHECKER, ASSERT_SPEC, assertion_checker, render
from imagekit.refs import parse_platform, parse_reference
from imagekit.runtime.engine import Engine
from imagekit.workspace import Workspace
from tests.integration.builders.assemble.conftest import PlanWriter
from tests.support.base_image import BaseImage

pytestmark = pytest.mark.integration


def _mounting(engine: Engine, source: Path) -> list[str]:
    """The engine's containers, running or not, that bind-mount ``source``: this run's own,
    whatever their name or label."""
    listed = subprocess.run(
        [engine.client_path, "ps", "-aq"], capture_output=True, text=True, check=True
    )
    found = []
    for cid in listed.stdout.split():
        shown = subprocess.run(
            [engine.client_path, "inspect", "--format", "{{range .Mounts}}{{.Source}}\n{{end}}",
             cid],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if str(source) in shown.stdout.splitlines():
            found.append(cid)
    return found


@pytest.fixture
def run_dir(engine: Engine, tmp_path: Path) -> Iterator[Path]:
    """The check's folder; whatever container still mounts its checker is removed after."""
    folder = tmp_path / "assertions"
    folder.mkdir()
    yield folder
    for cid in _mounting(engine, (folder / ASSERT_CHECKER).resolve()):
        subprocess.run([engine.client_path, "rm", "-f", cid], capture_output=True, check=False)


def test_a_check_past_its_limit_ends_with_its_container_removed(
    engine: Engine,
    base_image: BaseImage,
    write_plan: PlanWriter,
    workspace: Workspace,
    run_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hang = {"argv": ["sh", "-c", "echo the check hangs; exec sleep 600"]}
    name = write_plan("hangs", base_image.reference, [], assertions={"commands": [hang]})
    loaded = load_plan(
        workspace.plans_dir / f"{name}.yaml", dockerfiles_dir=workspace.dockerfiles_dir
    )
    monkeypatch.setattr(check, "TIMEOUT_S", 10.0)
    started = time.monotonic()
    with pytest.raises(CouldNotFinish, match="did not finish within 10 s") as raised:
        check.run_assertions(
            loaded,
            parse_reference(base_image.reference),
            parse_platform("linux/amd64"),
            run_dir,
            engine=engine,
            connect=lambda: engine,
            log=lambda _line: None,
        )
    assert raised.value.exit_code == 3
    assert time.monotonic() - started < 120
    # No container of this run left, running or stopped: none mounts its checker. (The check's
    # label is not looked for: a check of another test, on the other worker, may be running
    # under it; its checker is another file.)
    assert _mounting(engine, (run_dir / ASSERT_CHECKER).resolve()) == []
    # The container did run the check (its output kept), and the run says how it ended.
    assert (run_dir / "assertions-stdout.raw").read_text() == "the check hangs\n"
    ended = json.loads((run_dir / "assertions-run.json").read_text())
    assert ended["ended"] == "killed at the wall-clock limit" and ended["timed_out"] is True
    assert str(run_dir) not in json.dumps(ended["command"])  # no path of this machine
    # The package's checker ran on the render's JSON of the plan's checks, both mounted.
    assert (run_dir / ASSERT_CHECKER).read_bytes() == assertion_checker()
    assert (run_dir / ASSERT_SPEC).read_bytes() == render(loaded).files()[ASSERT_SPEC]
    for name in (ASSERT_CHECKER, ASSERT_SPEC):
        assert f"{name}:/tmp/{name}:ro" in ended["command"]
    assert ended["command"][-2:] == ["/tmp/imagekit-assert.py", "/tmp/imagekit-assert.json"]
