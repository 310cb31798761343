"""The verification policy `imagekit verify --policy FILE` holds an image to.

A YAML file (schema: imagekit/attest/schemas/policy-v1.schema.json, held equal to this
model by a unit test) naming what must be attested, by one of the keys given, about the
digest verified::

    version: 1
    audit:
      status: [CPU_PASS, CPU_PASS_GPU_CLI_DEFERRED]   # the audit's verdict, one of these
      platform: linux/amd64                           # optional: the platform audited
      max_age: 7d                                     # optional: s, m, h or d
    vulnerabilities: none-fixable                     # optional: none | none-fixable
    provenance:                                       # optional: SLSA v1 from imagekit build
      plan: demo
      base: sha256:...

Without --policy, the default is the audit requirement alone with the two passing statuses.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from imagekit import yamldoc
from imagekit.errors import PolicyError
from imagekit.files import read_regular

PASSING = ("CPU_PASS", "CPU_PASS_GPU_CLI_DEFERRED")
_AGE = re.compile(r"^(\d+)([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def age_seconds(text: str) -> int:
    match = _AGE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not an age such as 90m, 24h or 7d")
    return int(match.group(1)) * _UNIT[match.group(2)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AuditRequirement(_Model):
    status: tuple[str, ...] = Field(default=PASSING, min_length=1)
    platform: str | None = None
    max_age: str | None = Field(default=None, description="90m, 24h, 7d: the audit's age")

    @field_validator("max_age")
    @classmethod
    def _age(cls, value: str | None) -> str | None:
        if value is not None:
            age_seconds(value)
        return value


class ProvenanceRequirement(_Model):
    plan: str | None = None
    base: str | None = Field(default=None, description="the base image's manifest digest")


class Policy(_Model):
    version: Literal[1] = 1
    audit: AuditRequirement | None = Field(default_factory=AuditRequirement)
    vulnerabilities: Literal["none", "none-fixable"] | None = None
    provenance: ProvenanceRequirement | None = None


DEFAULT_POLICY = Policy()


def load_policy(path: Path) -> Policy:
    """Read and validate a policy file; bad input names the file and the key.

    The file is read as every file a user names (imagekit.files: a regular file, at most
    1 MiB) and parsed strictly (imagekit.yamldoc: a key given twice, nesting past a bound
    and bytes that are not text are refused). A policy that requires nothing would let every
    image pass (or, judged as an empty list, refuse every one without saying why): it is
    refused as bad input.
    """
    try:
        data = read_regular(path, "policy file")
    except OSError as exc:
        raise PolicyError(
            f"{path}: cannot read the policy ({exc.strerror})", path=str(path)
        ) from None
    try:
        document = yamldoc.load(data)
    except yaml.YAMLError as exc:
        raise PolicyError(f"{path}: not YAML ({yamldoc.describe(exc)})", path=str(path)) from None
    try:
        policy = Policy.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "document"
        raise PolicyError(
            f"{path}: {where}: {first['msg']}",
            path=str(path),
            hint="see imagekit/attest/schemas/policy-v1.schema.json",
        ) from None
    if not _requirements(policy):
        raise PolicyError(
            f"{path}: this policy requires nothing",
            path=str(path),
            hint="name at least one requirement: " + ", ".join(_requirement_names()),
        )
    return policy


def _requirement_names() -> list[str]:
    return [name for name in Policy.model_fields if name != "version"]


def _requirements(policy: Policy) -> list[str]:
    """The requirements a policy sets: every field but its version that is not null."""
    return [name for name in _requirement_names() if getattr(policy, name) is not None]
