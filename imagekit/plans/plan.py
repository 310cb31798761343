"""Build plans: one YAML file a plan (manifests/NAME.yaml), read into strict, frozen models.

A plan says which base to start from (pinned by manifest digest, never by a movable tag), the
ordered steps to apply to it, the assertions that must hold before the image is accepted, and
the audit profile the audit stage should use. Everything here is input from outside, so every
model refuses unknown keys (a misspelt ``destinaton`` must not be silently ignored), types are
strict (``exit_code: "0"`` is not an int), and YAML mappings with a repeated key are refused
(PyYAML would otherwise keep the last one without a word).

The exact bytes of the plan file are kept next to the parsed model and hashed as read; the
hash labels the image, so a plan can later be matched to what was built from it, byte for byte.

Every failure is a PlanError naming the file and the key, e.g.
``manifests/demo.yaml: steps[2].destination: must be an absolute path``.
"""

from __future__ import annotations

import difflib
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from imagekit.errors import BaseDigestTruncated, PlanError, ReferenceFormatError, UsageError
from imagekit.files import read_regular
from imagekit.refs import Digest, Platform, Reference, is_tag, parse_platform, parse_reference

if TYPE_CHECKING:
    from imagekit.workspace import Workspace

PIN_HINT = "`imagekit inspect REF` prints the digest to pin"
PLAN_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
_DEB_NAME = re.compile(r"[a-z0-9][a-z0-9+.-]+")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LABEL_KEY = re.compile(r"[a-z0-9][a-z0-9._/-]*")
_HEX64 = re.compile(r"[0-9a-f]{64}")
# A digest cut short, as reports and logs print them: repo@sha256:e930db8e... (or no dots).
_TRUNCATED = re.compile(r"(?P<name>[^@\s]+)@sha256:(?P<hex>[0-9a-f]{0,63})(?:\.\.\.|\u2026)?")
_MODE = re.compile(r"0?[0-7]{3}|[0-7]{4}")
_OWNER = re.compile(r"(\d{1,10}):(\d{1,10})")
_MAX_ID = 2**31 - 1
# The newest SOURCE_DATE_EPOCH a tar header (12 octal digits) and a config hold without PAX.
_MAX_EPOCH = 8**11 - 1
# Paths are rendered into RUN and COPY lines: a conservative character set keeps them free of
# shell and Dockerfile quoting problems (no spaces, quotes, '$', globs or backslashes).
_PATH_CHARS = re.compile(r"[A-Za-z0-9._+@=,:-]+")
RESERVED_LABEL_PREFIXES = ("org.opencontainers.image.base.", "io.imagekit.")
# Files `imagekit render` writes into dockerfiles/NAME/; an overlay source may not be one.
RENDERED_FILES = ("Dockerfile", "imagekit-assert.py")
AUDIT_PROFILES = ("generic", "sglang", "vllm")


def _fail(
    kind: str, message: str, hint: str | None = None, key: str | None = None
) -> PydanticCustomError:
    """A pydantic error carrying our hint (and a key, for checks that span several fields)."""
    ctx: dict[str, Any] = {"msg": message}
    if hint:
        ctx["hint"] = hint
    if key:
        ctx["key"] = key
    return PydanticCustomError(kind, "{msg}", ctx)


def _check_path_chars(value: str, what: str) -> None:
    for part in value.strip("/").split("/"):
        if not _PATH_CHARS.fullmatch(part):
            raise _fail(
                "path_chars",
                f"{what} {value!r} has an empty part or a character outside "
                "letters, digits and . _ + @ = , : -",
            )


def _optional_match(
    value: str | None, pattern: re.Pattern[str], kind: str, problem: str, hint: str
) -> str | None:
    """An optional field that, when given, must match ``pattern`` whole."""
    if value is not None and not pattern.fullmatch(value):
        raise _fail(kind, f"{value!r} {problem}", hint)
    return value


def _check_names(
    value: list[str],
    pattern: re.Pattern[str],
    kind: str,
    what: str,
    noun: str,
    same: Callable[[str], str] = str,
) -> list[str]:
    """Exact names only, each once (``same`` says when two spellings name one thing)."""
    for name in value:
        if not pattern.fullmatch(name):
            raise _fail(kind, f"{name!r} is not {what}")
    if len({same(n) for n in value}) != len(value):
        raise _fail("duplicate", f"a {noun} is named twice")
    return value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class _Step(_Model):
    """One step of a plan. A step that runs a program inside the image (apt-get, pip) says so
    with ``runs_in_image``: only an engine build can apply it. The others change files and
    metadata alone, which the registry builder (imagekit.build.assemble) writes itself."""

    runs_in_image: ClassVar[bool] = False


class BaseSpec(_Model):
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
            raise _fail(
                "digest_truncated",
                f"the digest of {value!r} is cut short ({digits} of 64 hex digits): "
                "no image can be pinned by a prefix",
                f"write the full digest here (`imagekit inspect {name}:TAG` prints it), or "
                "name the base of every build with --base REPO@sha256:<64 hex>",
            )
        pinned_reference(value)
        return value

    @field_validator("found_as")
    @classmethod
    def _tag(cls, value: str | None) -> str | None:
        if value is not None and not is_tag(value):
            raise _fail("tag", f"{value!r} is not a valid tag")
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
            raise _fail(
                "platforms_one", "lists one platform", "write one platform as base.platform: P"
            )
        seen: dict[tuple[str, str, str | None], str] = {}
        for text in value or []:
            same = same_platform_key(_parsed_platform(text))
            if same in seen:
                first = seen[same]
                raise _fail(
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
            raise _fail(
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
        raise _fail("platform", exc.message, exc.hint) from exc


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
        raise _fail("reference", exc.message, exc.hint or PIN_HINT) from exc
    if not ref.pinned:
        raise _fail("tag_only", f"{value!r} is not pinned by digest (a tag can move)", PIN_HINT)
    if ref.tag is not None:
        raise _fail(
            "tag_and_digest",
            f"{value!r} carries a tag as well as a digest",
            "keep only repo@sha256:...; put the tag in base.found_as",
        )
    return ref


class RemoveSystemPackages(_Step):
    """``apt-get remove`` of exact package names; never autoremove, never a pattern."""

    runs_in_image = True

    kind: Literal["remove_system_packages"]
    names: list[str] = Field(min_length=1)

    @field_validator("names")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        return _check_names(value, _DEB_NAME, "deb_name", "an exact Debian package name", "package")


class PipInstall(_Step):
    """``pip install`` of requirements each pinned to one exact version with ``==``."""

    runs_in_image = True

    kind: Literal["pip_install"]
    requirements: list[str] = Field(min_length=1)

    @field_validator("requirements")
    @classmethod
    def _pinned(cls, value: list[str]) -> list[str]:
        seen: set[str] = set()
        for text in value:
            req = parse_pinned_requirement(text)
            name = canonicalize_name(req.name)
            if name in seen:
                raise _fail("duplicate", f"{req.name!r} is required twice")
            seen.add(name)
        return value

    def canonical(self) -> list[str]:
        """The requirements in packaging's normal spelling (what the Dockerfile carries)."""
        return [str(Requirement(text)) for text in self.requirements]


def parse_pinned_requirement(text: str) -> Requirement:
    """A requirement that names exactly one version: ``name==1.2.3``, optionally with extras."""
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        first = str(exc).splitlines()[0] if str(exc) else "unparsable"
        raise _fail("requirement", f"{text!r} is not a valid requirement: {first}") from exc
    hint = "pin one exact version, e.g. name==1.2.3"
    if req.url:
        raise _fail("requirement_url", f"{text!r} installs from a URL", hint)
    if req.marker is not None:
        raise _fail("requirement_marker", f"{text!r} has an environment marker", hint)
    specs = list(req.specifier)
    if len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version:
        raise _fail("requirement_unpinned", f"{text!r} is not pinned with == to one version", hint)
    return req


_DIST_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")


class PipUninstall(_Step):
    """``pip uninstall`` of exact distribution names, each of which must be installed.

    Removing a distribution is how a dependency conflict is most often "fixed", and the
    plan's assertions are what catch the entry point that went with it (find_spec).
    """

    runs_in_image = True

    kind: Literal["pip_uninstall"]
    names: list[str] = Field(min_length=1)

    @field_validator("names")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        return _check_names(
            value, _DIST_NAME, "dist_name", "a distribution name", "distribution", canonicalize_name
        )


class Replaces(_Model):
    """What an overlay overwrites: a file with this sha256, or nothing at all."""

    sha256: str | None = Field(
        default=None, description="64 lower-case hex: the file the overlay replaces"
    )
    absent: Literal[True] | None = Field(
        default=None, description="true: the destination must not exist in the base"
    )

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str | None) -> str | None:
        return _optional_match(
            value,
            _HEX64,
            "sha256",
            "is not 64 lower-case hex characters",
            "`imagekit plans pin-overlay NAME` fills the hashes from the base",
        )

    @model_validator(mode="after")
    def _exactly_one(self) -> Replaces:
        if (self.sha256 is None) == (self.absent is None):
            raise _fail("replaces", "give exactly one of sha256: <hex> or absent: true")
        return self


# Where the container runtime mounts its own filesystems over the image (runc's defaults, as
# Docker and containerd set them up): anything the image holds there is hidden at run time.
_KERNEL_MOUNTS = {"proc": "procfs", "sys": "sysfs", "dev": "a tmpfs with the devices"}
_RUNTIME_FILES = frozenset({"/etc/hosts", "/etc/hostname", "/etc/resolv.conf"})


class Overlay(_Step):
    """A file from the plan's folder laid over the base, guarded by what it replaces.

    ``mode`` and ``owner`` set the file's permission bits and numeric owner in the image
    (the engine renders them as ``COPY --chmod --chown``). Without ``mode`` the engine keeps
    the source file's mode and the registry builder writes 0755 for an executable source and
    0644 otherwise; without ``owner`` the file belongs to 0:0. A source that is a symbolic
    link is refused unless ``follow: true`` says to copy the file it points to (which must
    still lie inside the plan folder): a link committed by accident must not decide what
    lands in an image.
    """

    kind: Literal["overlay"]
    source: str = Field(description="a file under dockerfiles/NAME/, relative to it")
    destination: str = Field(description="absolute path of the file in the image")
    replaces: Replaces
    mode: str | None = Field(
        default=None, description='permission bits as a quoted octal string, e.g. "0755"'
    )
    owner: str | None = Field(default=None, description='numeric "UID:GID", e.g. "0:0"')
    follow: bool = Field(
        default=False, description="true: a source that is a symbolic link is followed"
    )

    @field_validator("source")
    @classmethod
    def _source(cls, value: str, info: ValidationInfo) -> str:
        if value.startswith("/") or posixpath.normpath(value) != value:
            raise _fail("source", f"{value!r} must be a plain relative path under the plan folder")
        if value.split("/")[0] == ".." or value == "." or value in RENDERED_FILES:
            raise _fail("source", f"{value!r} escapes the plan folder or is not an overlay file")
        _check_path_chars(value, "source")
        folder = (info.context or {}).get("overlay_dir")
        if isinstance(folder, Path):
            candidate = folder / value
            if not candidate.resolve().is_relative_to(folder.resolve()):
                raise _fail("source", f"{value!r} resolves outside {folder.name}/")
            if not candidate.is_file():
                raise _fail(
                    "source_missing",
                    f"{value!r} does not exist as a file under {folder.name}/",
                    f"put the overlay file at dockerfiles/{folder.name}/{value}",
                )
        return value

    @field_validator("mode")
    @classmethod
    def _mode(cls, value: str | None) -> str | None:
        return _optional_match(
            value,
            _MODE,
            "mode",
            "is not an octal mode of 3 or 4 digits",
            'quote it, e.g. mode: "0755" (YAML reads an unquoted 0755 as the number 493)',
        )

    @field_validator("owner")
    @classmethod
    def _owner(cls, value: str | None) -> str | None:
        if value is not None:
            match = _OWNER.fullmatch(value)
            if not match or max(int(match.group(1)), int(match.group(2))) > _MAX_ID:
                raise _fail(
                    "owner",
                    f"{value!r} is not a numeric UID:GID",
                    'give numbers, e.g. owner: "1000:1000" (names would need the base\'s '
                    "/etc/passwd)",
                )
        return value

    @model_validator(mode="after")
    def _links(self, info: ValidationInfo) -> Overlay:
        folder = (info.context or {}).get("overlay_dir")
        if isinstance(folder, Path) and not self.follow:
            current = folder
            for part in self.source.split("/"):
                current = current / part
                if current.is_symlink():
                    raise _fail(
                        "source_symlink",
                        f"{self.source!r} passes through the symbolic link "
                        f"{current.relative_to(folder)}",
                        "copy the file itself into the plan folder, or set follow: true on "
                        "this overlay to copy the file the link points to",
                    )
        return self

    @property
    def file_mode(self) -> int | None:
        """The plan's mode as a number, or None when the plan gives none."""
        return int(self.mode, 8) if self.mode is not None else None

    @property
    def uid_gid(self) -> tuple[int, int]:
        """The plan's owner, 0:0 by default (what COPY writes without --chown)."""
        if self.owner is None:
            return (0, 0)
        uid, _, gid = self.owner.partition(":")
        return (int(uid), int(gid))

    @field_validator("destination")
    @classmethod
    def _destination(cls, value: str) -> str:
        if not value.startswith("/"):
            raise _fail("destination", f"{value!r} must be an absolute path")
        if posixpath.normpath(value) != value or value == "/":
            raise _fail("destination", f"{value!r} must be a normalised file path")
        _check_path_chars(value, "destination")
        refused = runtime_mounted(value)
        if refused is not None:
            raise _fail("destination", f"{value!r} {refused[0]}", refused[1])
        return value


def runtime_mounted(path: str) -> tuple[str, str] | None:
    """Why a file at ``path`` (absolute, normalised) never shows in a container, and what to
    do instead; None when nothing mounts over it.

    The plan's destination is held to this, and so is the path it resolves to in the base
    once the base's symbolic links are followed (imagekit.build.assemble.guard, and the engine's
    guard step): ``/usr/local/bin -> /proc/self`` must not carry a file into /proc.
    """
    top = path.split("/")[1] if path.startswith("/") else path.split("/")[0]
    if top in _KERNEL_MOUNTS:
        return (
            f"is under /{top}, which the runtime mounts over in every container "
            f"({_KERNEL_MOUNTS[top]}): a file copied there never shows in a container",
            "put the file elsewhere (e.g. /usr/local/...) and point to it from there",
        )
    if path in _RUNTIME_FILES:
        return (
            "is a file the runtime mounts over in every container (it writes its own): a "
            "file copied there never shows in a container",
            "set it at run time (docker run --dns/--add-host, a Kubernetes pod spec)",
        )
    return None


def _check_pairs(
    value: dict[str, str],
    key_pattern: re.Pattern[str],
    kind: str,
    what: str,
    reserved: tuple[str, ...] = (),
) -> dict[str, str]:
    """Keys of ``key_pattern`` (none starting with a ``reserved`` prefix), one-line values:
    an ENV or LABEL line is rendered from each pair."""
    for key, text in value.items():
        if not key_pattern.fullmatch(key):
            raise _fail(f"{kind}_key", f"{key!r} is not a valid {what}")
        if key.startswith(reserved):
            raise _fail(f"{kind}_reserved", f"{key!r} is set by imagekit itself")
        if "\n" in text:
            raise _fail(f"{kind}_value", f"the value of {key} has a newline")
    return value


class Env(_Step):
    """Environment variables set in the image (ENV); never a secret."""

    kind: Literal["env"]
    vars: dict[str, str] = Field(min_length=1)

    @field_validator("vars")
    @classmethod
    def _keys(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_pairs(value, _ENV_KEY, "env", "environment variable name")


class Labels(_Step):
    """Image labels; the base and imagekit labels are set by the render and reserved."""

    kind: Literal["labels"]
    labels: dict[str, str] = Field(min_length=1)

    @field_validator("labels")
    @classmethod
    def _keys(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_pairs(value, _LABEL_KEY, "label", "label key", RESERVED_LABEL_PREFIXES)


class Entrypoint(_Step):
    kind: Literal["entrypoint"]
    argv: list[str] = Field(min_length=1)


class Cmd(_Step):
    kind: Literal["cmd"]
    argv: list[str] = Field(min_length=1)


Step = Annotated[
    RemoveSystemPackages | PipInstall | PipUninstall | Overlay | Env | Labels | Entrypoint | Cmd,
    Field(discriminator="kind"),
]
STEP_KINDS = (
    "remove_system_packages",
    "pip_install",
    "pip_uninstall",
    "overlay",
    "env",
    "labels",
    "entrypoint",
    "cmd",
)


class CommandAssertion(_Model):
    argv: list[str] = Field(min_length=1)
    exit_code: int = 0


class Assertions(_Model):
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
                raise _fail("module", f"{name!r} is not a module name")
        return value

    @property
    def empty(self) -> bool:
        return not (self.pip_check or self.find_spec or self.imports or self.commands)


class Plan(_Model):
    """One build plan, as written in manifests/NAME.yaml."""

    name: str
    description: str | None = None
    base: BaseSpec
    steps: list[Step] = Field(default_factory=list)
    assertions: Assertions = Field(default_factory=Assertions)
    audit_profile: str = Field(
        default="generic",
        description="generic, sglang, vllm, or a relative path to a profile YAML file",
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
            raise _fail("name", f"{value!r} is not a plan name (lower-case letters, digits, . _ -)")
        return value

    @field_validator("audit_profile")
    @classmethod
    def _profile(cls, value: str) -> str:
        if value in AUDIT_PROFILES:
            return value
        if value.endswith((".yaml", ".yml")) and not value.startswith("/"):
            if posixpath.normpath(value).split("/")[0] != "..":
                return value
        raise _fail(
            "audit_profile",
            f"{value!r} is neither one of {', '.join(AUDIT_PROFILES)} nor a relative .yaml path",
        )

    @model_validator(mode="after")
    def _one_writer_per_destination(self) -> Plan:
        seen: dict[str, int] = {}
        for index, step in enumerate(self.steps):
            if isinstance(step, Overlay):
                if step.destination in seen:
                    raise _fail(
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


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping with the same key twice."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} appears twice", key_node.start_mark
            )
        seen.add(key)
    return dict(loader.construct_mapping(node))


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)


def _format_loc(loc: tuple[int | str, ...]) -> str:
    """('steps', 2, 'overlay', 'destination') -> 'steps[2].destination' (tags dropped)."""
    out = ""
    previous: int | str | None = None
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(previous, int) and part in STEP_KINDS:
            pass  # the discriminator pydantic inserts; the file has no such level
        else:
            out += f".{part}" if out else part
        previous = part
    return out


def _allowed_keys(loc: tuple[int | str, ...], data: Any) -> list[str]:
    """The keys a model at ``loc`` (an extra key's parent) accepts, for a did-you-mean hint."""
    model: type[BaseModel] | None = Plan
    node = data
    for part in loc:
        if isinstance(part, int):
            node = node[part] if isinstance(node, list) and part < len(node) else None
            kind = node.get("kind") if isinstance(node, dict) else None
            model = _STEP_MODELS.get(str(kind)) if model is None else model
            continue
        if part in STEP_KINDS and model is not None and part not in model.model_fields:
            continue  # the discriminator level pydantic inserts
        if model is None or part not in model.model_fields:
            return []
        node = node.get(part) if isinstance(node, dict) else None
        model = _MODEL_OF_FIELD.get((model, part))
    return sorted(model.model_fields) if model is not None else []


_STEP_MODELS: dict[str, type[BaseModel]] = {
    "remove_system_packages": RemoveSystemPackages,
    "pip_install": PipInstall,
    "pip_uninstall": PipUninstall,
    "overlay": Overlay,
    "env": Env,
    "labels": Labels,
    "entrypoint": Entrypoint,
    "cmd": Cmd,
}
_MODEL_OF_FIELD: dict[tuple[type[BaseModel], str], type[BaseModel] | None] = {
    (Plan, "base"): BaseSpec,
    (Plan, "steps"): None,  # resolved per item by its kind
    (Plan, "assertions"): Assertions,
    (Overlay, "replaces"): Replaces,
    (Assertions, "commands"): CommandAssertion,
}


def _plan_error(exc: ValidationError, path: Path, data: Any) -> PlanError:
    error = exc.errors()[0]
    ctx = error.get("ctx") or {}
    loc = tuple(error["loc"])
    key = ctx.get("key") or _format_loc(loc) or None
    hint = ctx.get("hint")
    message = " / ".join(line.strip() for line in str(error["msg"]).splitlines() if line.strip())
    if error["type"] == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1], data)
        message = "unknown key"
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        if close:
            hint = f"did you mean {close[0]!r}? allowed here: {', '.join(allowed)}"
        elif allowed:
            hint = f"allowed here: {', '.join(allowed)}"
    elif error["type"] == "missing":
        message = "required key is missing"
    elif error["type"] == "digest_truncated":
        return BaseDigestTruncated(message, path=str(path), key=key, hint=hint)
    return PlanError(message, path=str(path), key=key, hint=hint)


def plan_path(plans_dir: Path, name: str) -> Path:
    if not PLAN_NAME.fullmatch(name):
        raise PlanError(f"{name!r} is not a plan name", hint="`imagekit plans list` shows them")
    return plans_dir / f"{name}.yaml"


def load_named_plan(
    workspace: Workspace, name: str, *, base_override: str | None = None
) -> LoadedPlan:
    """Plan ``name`` of a workspace, its overlay sources read from the workspace's folder."""
    return load_plan(
        plan_path(workspace.plans_dir, name),
        dockerfiles_dir=workspace.dockerfiles_dir,
        base_override=base_override,
    )


def _read_bytes(path: Path) -> bytes:
    try:
        return read_regular(path, "plan file")
    except FileNotFoundError as exc:
        raise PlanError(
            "no such plan file", path=str(path), hint="`imagekit plans list` shows the plans"
        ) from exc
    except OSError as exc:
        raise PlanError(f"cannot read the plan: {exc.strerror}", path=str(path)) from exc


def _validate(raw: bytes, path: Path, dockerfiles_dir: Path, *, base_given: bool) -> Plan:
    """Parse and validate plan bytes as if read from ``path`` (its base is the caller's)."""
    try:
        data = yaml.load(raw, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise PlanError(f"not valid YAML{where}: {problem}", path=str(path)) from exc
    if not isinstance(data, dict):
        raise PlanError("a plan must be a YAML mapping", path=str(path))
    name = path.stem
    if isinstance(data.get("name"), str) and data["name"] != name:
        raise PlanError(
            f"the plan is called {data['name']!r} but its file is {path.name}",
            path=str(path),
            key="name",
            hint=f"rename the file to {data['name']}.yaml or the plan to {name!r}",
        )
    context = {"overlay_dir": dockerfiles_dir / name, "base_override": base_given}
    try:
        return Plan.model_validate(data, context=context)
    except ValidationError as exc:
        raise _plan_error(exc, path, data) from exc


def read_plan_checks(path: Path, *, dockerfiles_dir: Path) -> Plan:
    """A plan as an audit of an image reads it: profile, asserted modules, overlays.

    An audit never uses the plan's base, so a base digest cut short (which stops every build
    that does not name its base with --base) is no reason to refuse it.
    """
    return _validate(_read_bytes(path), path, dockerfiles_dir, base_given=True)


def load_plan(
    path: Path,
    *,
    dockerfiles_dir: Path,
    base_override: str | None = None,
) -> LoadedPlan:
    """Read, parse and validate one plan file; every failure names the file and the key.

    ``base_override`` replaces the plan's base reference (it must be pinned the same way): the
    demo plan's base lives in a loopback registry whose port changes from run to run, so tests
    and `make demo` pass the digest of the base they just pushed. With an override the plan's
    own reference may be a digest cut short (a report's ``sha256:e930db8e...``): it is not used.
    """
    raw = _read_bytes(path)
    return parse_plan(raw, path, dockerfiles_dir=dockerfiles_dir, base_override=base_override)


def parse_plan(
    raw: bytes, path: Path, *, dockerfiles_dir: Path, base_override: str | None = None
) -> LoadedPlan:
    """Parse and validate plan bytes as if read from ``path`` (which names the plan).

    What :func:`load_plan` does after reading the file; an edit of a plan (imagekit.plans.bump)
    checks the bytes it is about to write with it before they replace the file.
    """
    plan = _validate(raw, path, dockerfiles_dir, base_given=base_override is not None)
    base_text = base_override if base_override is not None else plan.base.reference
    try:
        base = _pinned_or_plan_error(base_text)
    except PlanError as exc:
        raise PlanError(
            exc.message,
            path=str(path),
            key="base.reference (override)" if base_override is not None else "base.reference",
            hint=exc.hint,
        ) from exc
    return LoadedPlan(
        plan=plan,
        path=path,
        raw=raw,
        overlay_dir=dockerfiles_dir / path.stem,
        base=base,
        base_overridden=base_override is not None,
    )


def _pinned_or_plan_error(text: str) -> Reference:
    try:
        return pinned_reference(text)
    except PydanticCustomError as exc:
        ctx = exc.context or {}
        raise PlanError(str(ctx.get("msg", exc.message())), hint=ctx.get("hint")) from exc


@dataclass(frozen=True)
class PlanSummary:
    name: str
    path: Path
    base: str
    steps: int
    audit_profile: str
    error: str | None


def list_plans(plans_dir: Path, dockerfiles_dir: Path) -> list[PlanSummary]:
    """Every *.yaml in the plans folder, with its validation result (errors are listed)."""
    out: list[PlanSummary] = []
    for path in sorted(plans_dir.glob("*.yaml")):
        try:
            loaded = load_plan(path, dockerfiles_dir=dockerfiles_dir)
        except PlanError as exc:
            out.append(PlanSummary(path.stem, path, "", 0, "", exc.message))
            continue
        plan = loaded.plan
        out.append(
            PlanSummary(
                plan.name, path, plan.base.reference, len(plan.steps), plan.audit_profile, None
            )
        )
    return out


def plan_schema() -> dict[str, Any]:
    """The JSON Schema of a plan file, for editors."""
    schema = Plan.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "imagekit build plan"
    return schema


def validate_plans(
    plans_dir: Path, dockerfiles_dir: Path, name: str | None, base_override: str | None = None
) -> list[PlanSummary]:
    """Validate one plan (raising its PlanError) or every plan (listing each one's error).

    ``base_override`` validates one plan as a build with --base would load it.
    """
    if base_override is not None and name is None:
        raise PlanError(
            "--base replaces one plan's base: name the plan",
            hint="imagekit plans validate NAME --base REPO@sha256:...",
        )
    if name is not None:
        loaded = load_plan(
            plan_path(plans_dir, name), dockerfiles_dir=dockerfiles_dir, base_override=base_override
        )
        plan = loaded.plan
        return [
            PlanSummary(
                plan.name,
                loaded.path,
                str(loaded.base),
                len(plan.steps),
                plan.audit_profile,
                None,
            )
        ]
    items = list_plans(plans_dir, dockerfiles_dir)
    if not items:
        raise PlanError(
            f"no plans (*.yaml) in {plans_dir}", hint="set IMAGEKIT_PLANS_DIR or run in the project"
        )
    return items
