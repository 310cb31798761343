"""The steps of a plan, one model a kind, and ``Step``, their union: the one list of kinds.

A step that runs a program inside the image (apt-get, pip) says so with ``runs_in_image``;
the others change files and metadata alone. ``STEP_MODELS`` and ``STEP_KINDS`` are read off
the union, so a new kind is one model and one member of ``Step``.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, ClassVar, Literal, get_args

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from pydantic import Field, ValidationInfo, field_validator, model_validator

from imagekit.plans.fields import StrictModel, fail

_DEB_NAME = re.compile(r"[a-z0-9][a-z0-9+.-]+")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LABEL_KEY = re.compile(r"[a-z0-9][a-z0-9._/-]*")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_MODE = re.compile(r"0?[0-7]{3}|[0-7]{4}")
_OWNER = re.compile(r"(\d{1,10}):(\d{1,10})")
_MAX_ID = 2**31 - 1
# Paths are rendered into RUN and COPY lines: a conservative character set keeps them free of
# shell and Dockerfile quoting problems (no spaces, quotes, '$', globs or backslashes).
_PATH_CHARS = re.compile(r"[A-Za-z0-9._+@=,:-]+")
RESERVED_LABEL_PREFIXES = ("org.opencontainers.image.base.", "io.imagekit.")
# Files `imagekit render` writes into dockerfiles/NAME/ (committed, compared by `render
# --check`), and those every build stages beside them from the package (never committed: the
# assertion checker). An overlay source may be none of them: it would take one's place in the
# build context.
RENDERED_FILES = ("Dockerfile", "imagekit-assert.json")
STAGED_FILES = ("imagekit-assert.py",)


def _check_path_chars(value: str, what: str) -> None:
    for part in value.strip("/").split("/"):
        if not _PATH_CHARS.fullmatch(part):
            raise fail(
                "path_chars",
                f"{what} {value!r} has an empty part or a character outside "
                "letters, digits and . _ + @ = , : -",
            )


def _optional_match(
    value: str | None, pattern: re.Pattern[str], kind: str, problem: str, hint: str
) -> str | None:
    """An optional field that, when given, must match ``pattern`` whole."""
    if value is not None and not pattern.fullmatch(value):
        raise fail(kind, f"{value!r} {problem}", hint)
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
            raise fail(kind, f"{name!r} is not {what}")
    if len({same(n) for n in value}) != len(value):
        raise fail("duplicate", f"a {noun} is named twice")
    return value


class _Step(StrictModel):
    """One step of a plan. A step that runs a program inside the image (apt-get, pip) says so
    with ``runs_in_image``: only an engine build can apply it. The others change files and
    metadata alone, which the registry builder (imagekit.builders.assemble) writes itself."""

    runs_in_image: ClassVar[bool] = False


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
                raise fail("duplicate", f"{req.name!r} is required twice")
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
        raise fail("requirement", f"{text!r} is not a valid requirement: {first}") from exc
    hint = "pin one exact version, e.g. name==1.2.3"
    if req.url:
        raise fail("requirement_url", f"{text!r} installs from a URL", hint)
    if req.marker is not None:
        raise fail("requirement_marker", f"{text!r} has an environment marker", hint)
    specs = list(req.specifier)
    if len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version:
        raise fail("requirement_unpinned", f"{text!r} is not pinned with == to one version", hint)
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


class Replaces(StrictModel):
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
            raise fail("replaces", "give exactly one of sha256: <hex> or absent: true")
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
            raise fail("source", f"{value!r} must be a plain relative path under the plan folder")
        if value.split("/")[0] == ".." or value in (".", *RENDERED_FILES, *STAGED_FILES):
            raise fail("source", f"{value!r} escapes the plan folder or is not an overlay file")
        _check_path_chars(value, "source")
        folder = (info.context or {}).get("overlay_dir")
        if isinstance(folder, Path):
            candidate = folder / value
            if not candidate.resolve().is_relative_to(folder.resolve()):
                raise fail("source", f"{value!r} resolves outside {folder.name}/")
            if not candidate.is_file():
                raise fail(
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
                raise fail(
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
                    raise fail(
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
            raise fail("destination", f"{value!r} must be an absolute path")
        if posixpath.normpath(value) != value or value == "/":
            raise fail("destination", f"{value!r} must be a normalised file path")
        _check_path_chars(value, "destination")
        refused = runtime_mounted(value)
        if refused is not None:
            raise fail("destination", f"{value!r} {refused[0]}", refused[1])
        return value


def runtime_mounted(path: str) -> tuple[str, str] | None:
    """Why a file at ``path`` (absolute, normalised) never shows in a container, and what to
    do instead; None when nothing mounts over it.

    The plan's destination is held to this, and so is the path it resolves to in the base
    once the base's symbolic links are followed (imagekit.builders.assemble.guard, and the engine's
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
            raise fail(f"{kind}_key", f"{key!r} is not a valid {what}")
        if key.startswith(reserved):
            raise fail(f"{kind}_reserved", f"{key!r} is set by imagekit itself")
        if "\n" in text:
            raise fail(f"{kind}_value", f"the value of {key} has a newline")
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


def _kind(model: type[_Step]) -> str:
    (kind,) = get_args(model.model_fields["kind"].annotation)
    return str(kind)


#: kind -> the model of that step, in the union's order
STEP_MODELS: dict[str, type[_Step]] = {_kind(model): model for model in get_args(get_args(Step)[0])}
STEP_KINDS = tuple(STEP_MODELS)
