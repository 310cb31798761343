"""Audit profiles: what the probe checks in one kind of image, kept as data.

A profile names the key distributions, the modules find_spec must locate, torch's required
arches, the CLI probes (with an optional known environmental failure and its fallback) and
the model source files an engine must ship. `generic`, `sglang` and `vllm` (and
`hopper-host` for `--host`) are built in as YAML beside this module; any other YAML file
with the same keys is accepted. Profiles are read from outside, so they are pydantic models
with ``extra="forbid"``: a misspelt key is an error, not a silently skipped check.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from imagekit import yamldoc
from imagekit.errors import ProfileError
from imagekit.files import read_regular
from imagekit.plans.model import PLAN_AUDIT_PROFILES

#: the built-in profiles of an image's audit, which a plan may name (the plan's model holds
#: the list, since plans sit below the stages that read them; each has its file in profiles/)
IMAGE_PROFILES = PLAN_AUDIT_PROFILES
#: the built-in profiles of `imagekit audit --host`
HOST_PROFILES = ("hopper-host",)
BUILTIN = (*IMAGE_PROFILES, *HOST_PROFILES)
CheckKind = Literal[
    "default", "versions", "pip-check", "find-spec", "record", "torch", "av-roundtrip",
    "model-sources", "cli",
]  # fmt: skip
_ARCH = re.compile(r"(sm|compute)_\d+[a-z]?")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_FLAG = re.compile(r"--?[A-Za-z0-9][A-Za-z0-9_.-]*")


def _once(values: list[str], what: str) -> list[str]:
    """The list as given, refused when it names one thing twice (a copy-paste slip that would
    otherwise read as two requirements where there is one)."""
    twice = [v for v in dict.fromkeys(values) if values.count(v) > 1]
    if twice:
        raise ValueError(f"names {what}{' ' if what else ''}{', '.join(twice)} twice")
    return values


def _flags(values: list[str]) -> list[str]:
    bad = [f for f in values if not _FLAG.fullmatch(f)]
    if bad:
        raise ValueError(f"a flag is spelt as on the command line (--num-prompts), got {bad}")
    return _once(values, "the flag")


def _pattern(value: str) -> str:
    if not value.strip():
        raise ValueError("is empty: give the text (a regular expression) to match")
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"pattern is not a regular expression: {exc}") from exc
    return value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Fallback(_Model):
    """The command that checks argument parsing another way when the raw CLI cannot."""

    command: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    flags: list[str] | None = None

    @field_validator("flags")
    @classmethod
    def _flags(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else _flags(value)


class EnvironmentalFailure(_Model):
    """A failure known to come from the environment (no GPU), not from the image."""

    pattern: str = Field(min_length=1)
    note: str = ""
    fallback: Fallback

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        return _pattern(value)


class CliProbe(_Model):
    name: str
    command: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    flags: list[str] = Field(default_factory=list)
    timeout_s: float | None = Field(default=None, gt=0)
    environmental_failure: EnvironmentalFailure | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.fullmatch(value):
            raise ValueError("a CLI probe name is letters, digits, '.', '_' and '-'")
        return value

    @field_validator("flags")
    @classmethod
    def _flags(cls, value: list[str]) -> list[str]:
        return _flags(value)


class TorchRequirement(_Model):
    required: bool = False
    arches: list[str] = Field(default_factory=list)
    require_gpu: bool = False

    @field_validator("arches")
    @classmethod
    def _arches(cls, value: list[str]) -> list[str]:
        bad = [a for a in value if not _ARCH.fullmatch(a)]
        if bad:
            raise ValueError(f"arches look like sm_90 or compute_90, got {bad}")
        return _once(value, "the arch")


class ModelSource(_Model):
    package: str = Field(min_length=1)
    glob: str = Field(min_length=1)

    @field_validator("glob")
    @classmethod
    def _glob(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("is empty: give the file name pattern (*minimax*m3*.py)")
        return value


class Profile(_Model):
    name: str
    description: str = ""
    distributions: list[str] = Field(default_factory=list)
    required_distributions: list[str] = Field(default_factory=list)
    modules: list[str] = Field(default_factory=list)
    torch: TorchRequirement = Field(default_factory=TorchRequirement)
    video: bool = True
    record: bool = True
    pip_check: bool = True
    #: Checks that are SKIPPED, saying so, where what they check is not installed (pip for
    #: pip-check, PyAV for av-roundtrip), and run as usual where it is: a plain Python image
    #: has neither, and its audit should say so rather than fail on it.
    if_installed: list[Literal["pip-check", "av-roundtrip"]] = Field(default_factory=list)
    cli: list[CliProbe] = Field(default_factory=list)
    model_sources: list[ModelSource] = Field(default_factory=list)
    timeouts: dict[CheckKind, float] = Field(default_factory=dict)

    @field_validator("distributions", "required_distributions", "modules")
    @classmethod
    def _listed_once(cls, value: list[str]) -> list[str]:
        return _once(value, "")

    @field_validator("cli")
    @classmethod
    def _probes_once(cls, value: list[CliProbe]) -> list[CliProbe]:
        _once([p.name for p in value], "the CLI probe")
        return value

    @field_validator("timeouts")
    @classmethod
    def _positive(cls, value: dict[CheckKind, float]) -> dict[CheckKind, float]:
        if any(v <= 0 for v in value.values()):
            raise ValueError("timeouts are seconds greater than 0")
        return value

    def with_modules(self, modules: list[str]) -> Profile:
        """This profile with extra find_spec assertions (a plan's modules) added."""
        merged = list(dict.fromkeys([*self.modules, *modules]))
        return self.model_copy(update={"modules": merged})


def probe_spec(
    profile: Profile, *, expected_paths: list[str] | None = None, host: bool = False
) -> dict[str, Any]:
    """The JSON document the probe reads (``--spec-json``)."""
    return {
        "profile": profile.model_dump(mode="json"),
        "expected_paths": sorted(expected_paths or []),
        "host": host,
    }


def _parse(text: bytes, origin: str) -> Profile:
    try:
        data = yamldoc.load(text)
    except yaml.YAMLError as exc:
        raise ProfileError(f"{origin}: not valid YAML: {yamldoc.describe(exc)}") from None
    if not isinstance(data, dict):
        raise ProfileError(f"{origin}: a profile is a YAML mapping")
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ProfileError(
            f"{origin}: {_where(first['loc'])}: {_message(first)}",
            hint="see the built-in profiles (`generic`, `sglang`, `vllm`) and docs/profiles.md "
            "for the keys",
        ) from exc


def _where(loc: tuple[int | str, ...]) -> str:
    """A field's place as the YAML reads: cli[1].flags[3]."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top)"


def _message(error: Any) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        return "unknown key (a misspelling would skip a check silently, so it is refused)"
    if kind in ("string_too_short", "too_short") and not error.get("input"):
        return "is empty"
    msg = str(error["msg"])
    return msg.removeprefix("Value error, ")


def load_profile(name_or_file: str) -> Profile:
    """A built-in profile by name, or a profile read from a YAML file."""
    if name_or_file in BUILTIN:
        text = (
            resources.files("imagekit.audit")
            .joinpath("profiles", f"{name_or_file}.yaml")
            .read_bytes()
        )
        return _parse(text, f"built-in profile {name_or_file}")
    path = Path(name_or_file)
    if path.suffix in {".yaml", ".yml"} or path.exists():
        try:
            text = read_regular(path, "profile file")
        except OSError as exc:
            raise ProfileError(
                f"cannot read profile file {path}: {exc.strerror}",
                hint=f"built-in profiles: {', '.join(BUILTIN)}",
            ) from exc
        return _parse(text, str(path))
    raise ProfileError(
        f"unknown profile {name_or_file!r}",
        hint=f"give one of {', '.join(BUILTIN)} or a path to a .yaml profile",
    )
