"""The verification policy `imagekit verify --policy FILE` holds an image to.

A YAML file (schema: imagekit/attest/schemas/policy-v1.schema.json, held equal to this
model by a unit test) naming what must be attested, and by which keys, about the digest
verified::

    version: 1
    audit:
      status: [CPU_PASS, CPU_PASS_GPU_CLI_DEFERRED]   # the audit's verdict, one of these
      platform: linux/amd64                           # optional: the platform audited
      max_age: 7d                                     # s, m, h or d; default 30d; unbounded
      keys: [keys/ci.pub]                             # optional: who may sign audits
    vulnerabilities: none-fixable                     # optional: none | none-fixable, or:
    # vulnerabilities: {findings: none, platform: linux/amd64, max_age: 7d, keys: [...]}
    provenance:                                       # optional: SLSA v1 from imagekit build
      plan: demo
      base: sha256:...
    gpu_preflight:                                    # optional: imagekit gpu-preflight
      status: [GPU_PREFLIGHT_PASS]
      min_gpus: 8
      gpu_name: H20
      min_level: standard                             # quick < standard < extended
      max_age: 30d
    mirror_binding:                                   # optional: who may sign the mirror
      keys: [keys/mirror.pub]                         # bindings the gate follows

Each key is the requirement a kind of record registers (imagekit.kinds: its spec's
``policy``, a typed :class:`~imagekit.kinds.spec.PolicyEntry`), and each becomes one rule
(imagekit.attest.rules.Rule, the object that decides) the gate holds the image to
(``mirror_binding`` names keys only). Key files are paths relative to the policy file; a
requirement naming none trusts every ``--key`` given. Without --policy, the default is the
audit requirement alone with the two passing statuses, at most 30 days old.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
)
from pydantic_core import ErrorDetails
from typing_extensions import TypeForm

from imagekit import yamldoc
from imagekit.attest.rules import Rule, age_seconds
from imagekit.errors import PolicyError
from imagekit.files import read_regular
from imagekit.kinds import KINDS
from imagekit.kinds.audit import PASSING

POLICY_V1 = "https://imagekit.dev/policy/v1"

__all__ = [
    "DEFAULT_POLICY",
    "PASSING",
    "POLICY_V1",
    "Policy",
    "PolicyModel",
    "age_seconds",
    "keyed_rules",
    "load_policy",
    "rules",
]

REQUIREMENTS = tuple(spec.policy for spec in KINDS if spec.policy is not None)
"""What the kinds register for the policy file, in the registry's order: the file's keys."""


def _version(value: object) -> object:
    # YAML's `true` equals 1 to a lax Literal[1], and would pass as version 1.
    if isinstance(value, bool):
        raise ValueError(f"the version is the number 1, not the boolean {str(value).lower()}")
    return value


class PolicyModel(BaseModel):
    """A policy file as read: ``version`` and one optional field a requirement the kinds
    register (the fields are added by :func:`_policy_model`, read through each entry)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Annotated[Literal[1], BeforeValidator(_version)] = 1


def _policy_model() -> type[PolicyModel]:
    """The policy file's model: ``version`` and one optional key a kind that registers a
    requirement (imagekit.kinds), in the registry's order."""
    fields: dict[str, tuple[TypeForm[object], object]] = {}
    for entry in REQUIREMENTS:
        description = entry.description or None
        if entry.default is not None:
            field = Field(default_factory=entry.default, description=description)
        else:
            field = Field(default=None, description=description)
        fields[entry.key] = (entry.form, field)
    # create_model's keywords are its own options and the fields alike, so a mapping of
    # fields is passed through a signature that names the result only.
    make: Callable[..., type[PolicyModel]] = create_model
    return make("Policy", __base__=PolicyModel, **fields)


Policy = _policy_model()
DEFAULT_POLICY = Policy()


def rules(policy: PolicyModel) -> list[Rule]:
    """The rules POLICY makes: one a requirement it names, in the registry's order."""
    return [rule for _, rule in keyed_rules(policy)]


def keyed_rules(policy: PolicyModel) -> list[tuple[str, Rule]]:
    """The rules POLICY makes, each with the policy key it came from (for messages): each
    requirement the kinds register decides through its own rule."""
    made: list[tuple[str, Rule]] = []
    for entry in REQUIREMENTS:
        rule = entry.rule_of(policy)
        if rule is not None:
            made.append((entry.key, rule))
    return made


def load_policy(path: Path) -> PolicyModel:
    """Read and validate a policy file; bad input names the file and the key.

    The file is read as every file a user names (imagekit.files: a regular file, at most
    1 MiB) and parsed strictly (imagekit.yamldoc: a key given twice, nesting past a bound
    and bytes that are not text are refused). A policy that requires nothing would let every
    image pass (or, judged as an empty list, refuse every one without saying why): it is
    refused as bad input, here and nowhere else.
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
    document = written(document, path)
    try:
        policy = Policy.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = _where(first["loc"])
        hint = (first.get("ctx") or {}).get("hint")
        raise PolicyError(
            f"{path}: {where or 'document'}: {plain_words(first)}",
            path=str(path),
            hint=hint
            if isinstance(hint, str)
            else f"docs/ATTESTATIONS.md shows a policy; the schema is {SCHEMA}",
        ) from None
    if not keyed_rules(policy):
        raise PolicyError(
            f"{path}: this policy requires nothing",
            path=str(path),
            hint="name at least one requirement: " + ", ".join(_requirement_names()),
        )
    return policy


SCHEMA = "imagekit/attest/schemas/policy-v1.schema.json"


def _where(loc: tuple[int | str, ...]) -> str:
    """An error's place as the file names it: ``audit.status[0]`` (pydantic's union members
    left out)."""
    where = ""
    for part in loc:
        if isinstance(part, int):
            where += f"[{part}]"
        elif not _is_union_tag(part):
            where += f".{part}" if where else part
    return where


def _models(annotation: object) -> list[type[BaseModel]]:
    """The models a policy key's value may be (its annotation's BaseModel members)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def _is_list(annotation: object) -> bool:
    """Whether a field holds several values (a tuple or list of them, or None)."""
    origin = typing.get_origin(annotation)
    if origin in (tuple, list):
        return True
    return origin in (typing.Union, types.UnionType) and any(
        _is_list(arg) for arg in typing.get_args(annotation)
    )


def _unknown(path: Path, where: str, key: object, allowed: list[str]) -> PolicyError:
    close = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
    guess = f"did you mean {close[0]!r}? " if close else ""
    return PolicyError(
        f"{path}: {where}{key}: unknown key",
        path=str(path),
        hint=f"{guess}the keys here: {', '.join(allowed)}",
    )


def written(document: object, path: Path) -> object:
    """The policy as a person wrote it, checked in their words before the model reads it:
    an unknown key is named with the nearest known one; a single value where a list is meant
    (``status: CPU_PASS``) is taken as a list of one. (A status outside its kind's vocabulary
    is refused by the kind's own requirement model, imagekit.kinds.spec.statuses_of.)"""
    if not isinstance(document, dict):
        return document
    entries = {entry.key: entry for entry in REQUIREMENTS}
    allowed = list(Policy.model_fields)
    plain = dict(document)
    for key, value in document.items():
        if key not in allowed:
            raise _unknown(path, "", key, allowed)
        entry = entries.get(str(key))
        if entry is None or not isinstance(value, dict):
            continue
        models = _models(entry.form)
        if not models:
            continue
        fields = models[-1].model_fields  # the mapping form (a union lists it last)
        value = dict(value)
        for name in value:
            if name not in fields:
                raise _unknown(path, f"{key}.", name, list(fields))
        for name, field in fields.items():
            given = value.get(name)
            if isinstance(given, str | int | float) and _is_list(field.annotation):
                value[name] = [given]
        plain[key] = value
    return plain


def _is_union_tag(part: object) -> bool:
    """pydantic names the member of a union it tried in an error's place (``VulnRequirement``,
    ``literal['none','none-fixable']``): not a key of the file."""
    text = str(part)
    return text[:1].isupper() or text.startswith(("literal[", "function-"))


def plain_words(error: ErrorDetails) -> str:
    """A validation error as a person reads it, never in pydantic's words."""
    kind = str(error.get("type", ""))
    context = error.get("ctx") or {}
    given = error.get("input")
    if kind == "missing":
        return "is required here"
    if kind == "extra_forbidden":
        return "unknown key"
    if kind in ("tuple_type", "list_type"):
        return f"a list is meant here (`[A, B]`, or one value), not {given!r}"
    if kind == "literal_error":
        return f"{given!r} is not one of {context.get('expected', 'the values allowed')}"
    if kind in ("string_type", "str_type"):
        return f"text is meant here, not {given!r}"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"a whole number is meant here, not {given!r}"
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return f"a mapping of keys is meant here (`key: value` lines), not {given!r}"
    if kind in ("too_short", "string_too_short"):
        return "is empty: name at least one"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        bound = next(iter(context.values()), "")
        words = {
            "greater_than": "above",
            "greater_than_equal": "at least",
            "less_than": "below",
            "less_than_equal": "at most",
        }
        return f"must be {words[kind]} {bound}, not {given!r}"
    message = str(error.get("msg", "is not valid")).removeprefix("Value error, ")
    return message.replace("Input should be", "should be")


def _requirement_names() -> list[str]:
    return [entry.key for entry in REQUIREMENTS if entry.rule is not None]
