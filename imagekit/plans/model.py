"""A plan, as written in manifests/NAME.yaml, and a plan loaded with the bytes it was read from.

A plan says which base to start from (pinned by manifest digest, never by a movable tag), the
ordered steps to apply to it (imagekit.plans.steps), the assertions that must hold before the
image is accepted, and the audit profile the audit stage should use. The exact bytes of the
plan file are kept next to the parsed model and hashed as read; the hash labels the image, so
a plan can later be matched to what was built from it, byte for byte.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, StrictInt, ValidationInfo, field_validator, model_validator

from imagekit.errors import ReferenceFormatError, UsageError
from imagekit.kinds.gpu_preflight import MAX_GPUS, name_pattern
from imagekit.plans.fields import StrictModel, fail
from imagekit.plans.steps import Overlay, Step
from imagekit.refs import Digest, Platform, Reference, is_tag, parse_platform, parse_reference

#: the audit profiles shipped with imagekit that a plan may name (imagekit/audit/profiles/,
#: where each has its file; the audit reads the list from here, plans being the lower room)
PLAN_AUDIT_PROFILES = ("generic", "sglang", "vllm")

PIN_HINT = "`imagekit inspect REF` prints the digest to pin"
PLAN_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
# A digest cut short, as reports and logs print them: repo@sha256:e930db8e... (or no dots).
_TRUNCATED = re.compile(r"(?P<name>[^@\s]+)@sha256:(?P<hex>[0-9a-f]{0,63})(?:\.\.\.|\u2026)?")
# The newest SOURCE_DATE_EPOCH a tar header (12 octal digits) and a config hold without PAX.
_MAX_EPOCH = 8**11 - 1


class BaseSpec(StrictModel):
    """The image to start from: a digest-pinned reference, with the tag it was found under."""

    reference: str = Field(description="registry/repository@sha256:<64 hex>; never a bare tag")
    found_as: str | None = Field(
        default=None, description="the tag the digest was found under, for the record only"
    )
    platform: str = Field(default="linux/amd64", description="os/architecture[/variant]")
    platforms: list[str] | None = Field(
        default=None,
        description="several os/architecture[/variant], each built, asserted and recorded, "
        "pushed as one index (the reference is then an index holding each); instead of platform",
    )

    @field_validator("reference")
    @classmethod
    def _pinned(cls, value: str, info: ValidationInfo) -> str:
        truncated = _TRUNCATED.fullmatch(value)
        if truncated is not None:
            if (info.context or {}).get("base_override"):
                return value  # the build names its base with --base; this one is never used
            name, digits = truncated.group("name"), len(truncated.group("hex"))
            raise fail(
                "digest_truncated",
                f"the digest of {value!r} is cut short ({digits} of 64 hex digits): "
                "no image can be pinned by a prefix",
                f"write the full digest here (`imagekit inspect {name}:TAG` prints it); until "
                "then the commands that take --base REPO@sha256:<64 hex> (plans validate, "
                "build, pin-overlay, doctor, pipeline) read the base from it; render and "
                "plans show need it written here",
            )
        pinned_reference(value)
        return value

    @field_validator("found_as")
    @classmethod
    def _tag(cls, value: str | None) -> str | None:
        if value is not None and not is_tag(value):
            raise fail("tag", f"{value!r} is not a valid tag")
        return value

    @field_validator("platform")
    @classmethod
    def _platform(cls, value: str) -> str:
        _parsed_platform(value)
        return value

    @field_validator("platforms")
    @classmethod
    def _platforms(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(value) < 2:
            raise fail(
                "platforms_one", "lists one platform", "write one platform as base.platform: P"
            )
        seen: dict[tuple[str, str, str | None], str] = {}
        for text in value or []:
            same = same_platform_key(_parsed_platform(text))
            if same in seen:
                first = seen[same]
                raise fail(
                    "platform_twice",
                    f"{text} is listed twice"
                    if first == text
                    else f"{first} and {text} name the same platform",
                    "list each platform once",
                )
            seen[same] = text
        return value

    @model_validator(mode="after")
    def _one_or_several(self) -> BaseSpec:
        if self.platforms is not None and "platform" in self.model_fields_set:
            raise fail(
                "platform_and_platforms",
                "give base.platform (one platform) or base.platforms (several), not both",
                key="base.platforms",
            )
        return self

    @property
    def targets(self) -> tuple[str, ...]:
        """Every platform the plan builds, in the plan's order (one unless ``platforms``)."""
        return tuple(self.platforms) if self.platforms is not None else (self.platform,)


def _parsed_platform(value: str) -> Platform:
    try:
        return parse_platform(value)
    except ReferenceFormatError as exc:
        raise fail("platform", exc.message, exc.hint) from exc


def same_platform_key(platform: Platform) -> tuple[str, str, str | None]:
    """Two spellings of one platform compare equal: arm64's only variant in use is v8, and
    registries and BuildKit write it either way (linux/arm64 and linux/arm64/v8)."""
    variant = platform.variant
    if platform.architecture == "arm64" and variant == "v8":
        variant = None
    return (platform.os, platform.architecture, variant)


def pinned_reference(value: str) -> Reference:
    """Parse a base reference that must name content: a full digest and no tag."""
    try:
        ref = parse_reference(value)
    except ReferenceFormatError as exc:
        raise fail("reference", exc.message, exc.hint or PIN_HINT) from exc
    if not ref.pinned:
        raise fail("tag_only", f"{value!r} is not pinned by digest (a tag can move)", PIN_HINT)
    if ref.tag is not None:
        raise fail(
            "tag_and_digest",
            f"{value!r} carries a tag as well as a digest",
            "keep only repo@sha256:...; put the tag in base.found_as",
        )
    return ref


class CommandAssertion(StrictModel):
    argv: list[str] = Field(min_length=1)
    exit_code: int = 0


class Assertions(StrictModel):
    """Checks run as the last build step; one that fails rejects the build."""

    pip_check: bool = False
    find_spec: list[str] = Field(default_factory=list)
    imports: list[str] = Field(default_factory=list)
    commands: list[CommandAssertion] = Field(default_factory=list)

    @field_validator("find_spec", "imports")
    @classmethod
    def _modules(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _MODULE.fullmatch(name):
                raise fail("module", f"{name!r} is not a module name")
        return value

    @property
    def empty(self) -> bool:
        return not (self.pip_check or self.find_spec or self.imports or self.commands)


class GpuExpectation(StrictModel):
    """What the GPU node that will serve the image must have (``imagekit gpu-preflight
    --plan NAME``): the number of GPUs, a pattern every GPU's name matches, each GPU's
    memory and compute capability at least. Each is checked here, where the plan is read,
    never first on the GPU node: a count is a whole number, the memory finite, the pattern
    compiles."""

    count: StrictInt | None = Field(
        default=None, ge=1, le=MAX_GPUS, description="GPUs on the node, e.g. 8"
    )
    name: str | None = Field(default=None, description="a pattern of every GPU's name: H20")
    min_memory_gib: float | None = Field(
        default=None, gt=0, le=65536, allow_inf_nan=False, description="each GPU's, GiB"
    )
    min_capability: str | None = Field(
        default=None, pattern=r"^\d{1,3}\.\d{1,3}$", description="each GPU's, e.g. 9.0"
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            return name_pattern(value, "gpu.name")
        except ValueError as exc:
            raise fail("gpu_name", str(exc), hint="a pattern such as H20 or H100|H200") from None

    level: Literal["quick", "standard", "extended"] | None = Field(
        default=None, description="the preflight's level (default standard)"
    )
    profile: str | None = Field(
        default=None, description="a GPU profile shipped with imagekit (H100, H200, ...) or a file"
    )
    thresholds: dict[str, float | int | bool | list[int]] | None = Field(
        default=None, description="health thresholds over the profile's: min_h2d_gbps: 52"
    )


class Plan(StrictModel):
    """One build plan, as written in manifests/NAME.yaml."""

    name: str
    description: str | None = None
    base: BaseSpec
    steps: list[Step] = Field(default_factory=list)
    assertions: Assertions = Field(default_factory=Assertions)
    audit_profile: str = Field(
        default="generic",
        description=f"{', '.join(PLAN_AUDIT_PROFILES)}, or a relative path to a profile YAML file",
    )
    gpu: GpuExpectation | None = Field(
        default=None, description="the serving node's GPUs, for imagekit gpu-preflight"
    )
    epoch: int | None = Field(
        default=None,
        ge=0,
        le=_MAX_EPOCH,
        description="seconds since 1970 stamped on the files and the config of a registry "
        "build (SOURCE_DATE_EPOCH, when set, wins; without either: 0)",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not PLAN_NAME.fullmatch(value):
            raise fail("name", f"{value!r} is not a plan name (lower-case letters, digits, . _ -)")
        return value

    @field_validator("audit_profile")
    @classmethod
    def _profile(cls, value: str) -> str:
        if value in PLAN_AUDIT_PROFILES:
            return value
        if value.endswith((".yaml", ".yml")) and not value.startswith("/"):
            if posixpath.normpath(value).split("/")[0] != "..":
                return value
        raise fail(
            "audit_profile",
            f"{value!r} is neither one of {', '.join(PLAN_AUDIT_PROFILES)} "
            "nor a relative .yaml path",
        )

    @model_validator(mode="after")
    def _one_writer_per_destination(self) -> Plan:
        seen: dict[str, int] = {}
        for index, step in enumerate(self.steps):
            if isinstance(step, Overlay):
                if step.destination in seen:
                    raise fail(
                        "overlay_conflict",
                        f"{step.destination} is also written by steps[{seen[step.destination]}]",
                        "one overlay a destination: merge the two files",
                        key=f"steps[{index}].destination",
                    )
                seen[step.destination] = index
        return self

    @property
    def overlays(self) -> list[Overlay]:
        return [s for s in self.steps if isinstance(s, Overlay)]


@dataclass(frozen=True)
class LoadedPlan:
    """A validated plan with the exact bytes it was read from and where its files live."""

    plan: Plan
    path: Path
    raw: bytes
    overlay_dir: Path
    base: Reference  # the plan's base, or the override it was loaded with
    base_overridden: bool

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def digest(self) -> Digest:
        """sha256 of the plan file's exact bytes (never of a re-serialisation)."""
        return Digest.of_bytes(self.raw)

    @property
    def platform(self) -> Platform:
        """The one platform of a single-platform plan (a builder of one image asks this)."""
        if self.multi_platform:
            raise UsageError(
                f"plan {self.name} lists {len(self.platforms)} platforms "
                f"({', '.join(map(str, self.platforms))}); this builds one image",
                hint="build it with `imagekit build NAME --buildkit ADDR --push REPO` or "
                "`--builder engine --push REPO` (docs/multi-platform.md)",
            )
        return parse_platform(self.plan.base.platform)

    @property
    def platforms(self) -> tuple[Platform, ...]:
        """Every platform the plan builds, in its order."""
        return tuple(parse_platform(text) for text in self.plan.base.targets)

    @property
    def multi_platform(self) -> bool:
        return self.plan.base.platforms is not None


def plan_schema() -> dict[str, Any]:
    """The JSON Schema of a plan file, for editors."""
    schema = Plan.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "imagekit build plan"
    return schema
