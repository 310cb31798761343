"""The contract of a GPU preflight's judges: what a judge is given and what it answers.

The probe's report maps each check's name to ``{status, reason, ...numbers}``. imagekit
never takes the ``status`` word for a pass: a check is decided by its :class:`Judge`, from
the check's numbers (parsed by the judge's own strict model: a key the model does not know,
or a value of the wrong type, is not the probe's report) against what was asked
(:class:`Asked`: the options, the plan's ``gpu:`` section) and the report's facts
(:class:`JudgeContext`). A status word may make a check worse (a FAIL the probe saw stays a
FAIL), never better.

The table of judges is ``imagekit.gpu.report.JUDGES`` (name -> Judge). A module that adds
checks to the probe (imagekit.gpu.health) writes a Judge for each with the types here
(importing only this module, so that report.py may import it back) and its table is merged
into JUDGES with one line in report.py. A check name the table does not know is recorded
and never a pass by itself (its FAIL or INCOMPLETE word still lowers the verdict).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

CheckState = Literal["PASS", "FAIL", "INCOMPLETE", "SKIPPED", "RECORDED"]
Level = Literal["quick", "standard", "extended"]


class Outcome(StrEnum):
    """A judge's answer for one check; RECORDED: written down, never judged (the topology)."""

    PASS = "pass"  # noqa: S105 - an outcome, not a password
    FAIL = "fail"
    INCOMPLETE = "incomplete"
    RECORDED = "recorded"


@dataclass(frozen=True)
class Decision:
    """One check decided: its outcome and one sentence why (naming rank and GPU)."""

    outcome: Outcome
    sentence: str

    @classmethod
    def passed(cls, sentence: str) -> Decision:
        return cls(Outcome.PASS, sentence)

    @classmethod
    def failed(cls, sentence: str) -> Decision:
        return cls(Outcome.FAIL, sentence)

    @classmethod
    def incomplete(cls, sentence: str) -> Decision:
        return cls(Outcome.INCOMPLETE, sentence)

    @classmethod
    def recorded(cls, sentence: str) -> Decision:
        return cls(Outcome.RECORDED, sentence)

    @classmethod
    def of(cls, problems: list[str], open_: list[str], passed: str) -> Decision:
        """FAIL naming PROBLEMS, else INCOMPLETE naming OPEN_, else PASS saying PASSED."""
        if problems:
            return cls.failed("; ".join(problems))
        if open_:
            return cls.incomplete("; ".join(open_))
        return cls.passed(passed)


class StrictModel(BaseModel):
    """A model of what the probe wrote: every key known, every value of its type (an int is
    never "8" or true), no NaN or infinity where a number is meant."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class CheckModel(StrictModel):
    """One check as the probe reports it: its status word and sentence, then its numbers
    (each judge's subclass names them)."""

    status: CheckState
    reason: str = Field(max_length=65536)


class GpuFact(StrictModel):
    """One GPU as the rank that ran on it saw it (the ``gpus`` check's ``gpus`` list)."""

    rank: int = Field(ge=0)
    host: str | None = None
    index: int | None = Field(default=None, ge=0)
    name: str
    memory_bytes: int | None = Field(default=None, ge=0)
    memory_gib: float | None = Field(default=None, ge=0)
    capability: str | None = Field(default=None, pattern=r"^\d{1,3}\.\d{1,3}$")
    multiprocessors: int | None = Field(default=None, ge=0)
    uuid: str | None = None
    pci_bus_id: str | None = None
    ecc_uncorrected_volatile: int | None = Field(default=None, ge=0)
    ecc_uncorrected_aggregate: int | None = Field(default=None, ge=0)
    mig_mode: str | None = None
    numa_node: int | None = None
    cpu_list: str | None = None
    nvidia_smi_index: str | None = None

    @property
    def gib(self) -> float | None:
        """The memory in GiB, from the bytes where given (the probe's own rounding aside)."""
        if self.memory_bytes is not None:
            return self.memory_bytes / 1024**3
        return self.memory_gib


def finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


@dataclass(frozen=True)
class Asked:
    """What the node must show, as imagekit was asked it (never as the report says it was)."""

    gpus: int | None = None
    gpu_name: str | None = None
    min_memory_gib: float | None = None
    min_capability: str | None = None
    sizes_mib: tuple[float, ...] = ()
    warmups: int = 0
    iterations: int = 1
    min_busbw: float | None = None
    commands: int = 0  # serving CLI checks asked of the probe
    self_test: bool = False
    level: Level | None = None
    #: the health checks' thresholds sent to the probe (imagekit.gpu.health.Thresholds as
    #: JSON); empty: the level's and the generic floors
    thresholds: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class JudgeContext:
    """What a judge sees beside its check: what was asked, the report's own facts (its world
    size, mode, level) and the GPUs the ``gpus`` check listed (already parsed strictly)."""

    asked: Asked
    world_size: int
    local_world_size: int
    mode: Literal["gpu", "self-test"]
    level: Level | None
    host: str
    gpus: tuple[GpuFact, ...] = ()


C = TypeVar("C", bound=CheckModel)


@dataclass(frozen=True)
class Judge(Generic[C]):
    """How one check is decided: its strict MODEL, and DECIDE from the parsed check and the
    context. REQUIRED: a GPU report without the check is INCOMPLETE; LEVELS: required only
    at these levels of the report (empty: at every level where REQUIRED, or never; a report
    that names no level needs none of a level's checks)."""

    model: type[C]
    decide: Callable[[C, JudgeContext], Decision]
    required: bool = False
    levels: frozenset[str] = field(default_factory=frozenset)

    def parse(self, raw: Mapping[str, Any]) -> C:
        return self.model.model_validate(raw)

    def required_at(self, level: str | None) -> bool:
        """Whether a report of LEVEL must carry the check: a check of some levels only is
        never required of a report from before levels (None: the gate's ``min_level`` is
        what refuses such a report, never a missing check)."""
        if self.levels:
            return level is not None and level in self.levels
        return self.required


__all__ = [
    "Asked",
    "CheckModel",
    "CheckState",
    "Decision",
    "GpuFact",
    "Judge",
    "JudgeContext",
    "Level",
    "Outcome",
    "StrictModel",
    "finite",
]
