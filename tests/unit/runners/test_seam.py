"""imagekit.runners.seam: every place answers the same interface (held by mypy here, since
these assignments are type-checked), and a run is cleaned up whatever its wait does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from imagekit.cluster.runner import PodPlace, PodState
from imagekit.runners.containerd import ContainerdPulled, ContainerdPuller
from imagekit.runners.engine import EnginePulled, EngineRunner
from imagekit.runners.host import HostRunner
from imagekit.runners.seam import Puller, Run, Runner, RunSpec, run_to_end
from imagekit.runtime.container import ProcessRun


def places() -> tuple[object, ...]:
    """What mypy holds: each place is a Runner (or Puller) of its own spec and end."""
    host: Runner[RunSpec, ProcessRun] = HostRunner()
    engine: Runner[RunSpec, ProcessRun] = EngineRunner("/usr/bin/docker")
    pulls: Puller[EnginePulled] = EngineRunner("/usr/bin/docker")
    node: type[Puller[ContainerdPulled]] = ContainerdPuller
    pod: type[Runner[dict[str, Any], PodState]] = PodPlace
    return host, engine, pulls, node, pod


def test_every_place_says_where_it_is() -> None:
    host, engine, *_ = places()
    assert isinstance(host, HostRunner) and host.where == "this host"
    assert isinstance(engine, EngineRunner) and engine.where == "the engine through /usr/bin/docker"


class _Ended:
    timed_out = False


class _Toy:
    """A run whose wait fails: what run_to_end must still clean up."""

    def __init__(self, fail: bool) -> None:
        self.fail, self.cleaned = fail, 0

    @property
    def name(self) -> str:
        return "toy"

    def wait(self, deadline_s: float) -> _Ended:
        if self.fail:
            raise KeyboardInterrupt
        return _Ended()

    def logs(self) -> str:
        return ""

    def image_id(self) -> str | None:
        return None

    def cleanup(self) -> None:
        self.cleaned += 1


class _ToyPlace:
    where = "nowhere"

    def __init__(self, run: _Toy) -> None:
        self.run = run
        self.given: list[str] = []

    def submit(self, spec: str, run_dir: Path) -> Run[_Ended]:
        self.given.append(spec)
        return self.run


@pytest.mark.parametrize("fail", [False, True])
def test_a_run_is_cleaned_up_whatever_its_wait_does(tmp_path: Path, fail: bool) -> None:
    toy = _Toy(fail)
    place = _ToyPlace(toy)
    if fail:
        with pytest.raises(KeyboardInterrupt):
            run_to_end(place, "spec", tmp_path, 1.0)
    else:
        assert run_to_end(place, "spec", tmp_path, 1.0).timed_out is False
    assert place.given == ["spec"] and toy.cleaned == 1
