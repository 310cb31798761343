"""Image references, digests and platforms: parsed strictly, normalised the way Docker does.

A digest is validated before it can reach a URL or a file path (containers/image and
go-containerregistry both learned that `sha256:../../x` must never be formatted into either).
Only the algorithms registered by the OCI image spec are accepted, with their exact lengths
and lower-case hex: https://github.com/opencontainers/image-spec/blob/main/descriptor.md#digests
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Self

from imagekit.errors import ReferenceFormatError

DOCKER_HUB = "docker.io"
_HUB_ALIASES = {"docker.io", "index.docker.io", "registry-1.docker.io"}
_ALGORITHMS = {"sha256": 64, "sha512": 128}
_HEX = re.compile(r"[0-9a-f]+")

# https://github.com/distribution/reference/blob/main/regexp.go
_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_TAG = re.compile(r"[\w][\w.-]{0,127}", re.ASCII)  # Docker's \w is ASCII only
_DOMAIN_LABEL = re.compile(r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])")
_IPV6 = re.compile(r"\[[a-fA-F0-9:]+\]")
_PORT = re.compile(r"[0-9]{1,5}")


class Digest(str):
    """A validated content digest such as ``sha256:<64 hex>``; a str so it serialises as one."""

    __slots__ = ()

    def __new__(cls, value: str) -> Self:
        if not isinstance(value, str):
            raise ReferenceFormatError(f"a digest must be a string, got {type(value).__name__}")
        algorithm, sep, hexpart = value.partition(":")
        if not sep:
            raise ReferenceFormatError(
                f"malformed digest {value!r}: expected ALGORITHM:HEX",
                hint="a digest looks like sha256: followed by 64 lower-case hex characters",
            )
        if algorithm not in _ALGORITHMS:
            raise ReferenceFormatError(
                f"unsupported digest algorithm {algorithm!r} in {value!r}",
                hint="only sha256 (and sha512) digests are accepted",
            )
        want = _ALGORITHMS[algorithm]
        if len(hexpart) != want or not _HEX.fullmatch(hexpart):
            raise ReferenceFormatError(
                f"malformed digest {value!r}: {algorithm} needs exactly {want} lower-case hex "
                "characters",
                hint="copy the full digest, e.g. from `imagekit inspect REF`",
            )
        return super().__new__(cls, value)

    @property
    def algorithm(self) -> str:
        return self.partition(":")[0]

    @property
    def hex(self) -> str:
        return self.partition(":")[2]

    @property
    def short(self) -> str:
        return self.hex[:12]

    @classmethod
    def of_bytes(cls, data: bytes) -> Digest:
        """The sha256 digest of exactly these bytes."""
        return cls("sha256:" + hashlib.sha256(data).hexdigest())

    @classmethod
    def from_hasher(cls, hasher: hashlib._Hash) -> Digest:
        return cls(f"{hasher.name}:{hasher.hexdigest()}")

    def new_hasher(self) -> hashlib._Hash:
        return hashlib.new(self.algorithm)


def is_digest(value: str) -> bool:
    try:
        Digest(value)
    except ReferenceFormatError:
        return False
    return True


def _valid_domain(domain: str) -> bool:
    host, _, port = domain.rpartition(":") if not domain.endswith("]") else (domain, "", "")
    if not host:  # no colon at all
        host, port = domain, ""
    if host.startswith("["):
        if not _IPV6.fullmatch(host):
            return False
    elif not all(_DOMAIN_LABEL.fullmatch(label) for label in host.split(".")):
        return False
    return not port or bool(_PORT.fullmatch(port) and 0 < int(port) < 65536)


@dataclass(frozen=True)
class Reference:
    """A normalised image reference: registry, repository, and a tag, a digest or both.

    ``str()`` gives the canonical form (``docker.io/library/ubuntu:22.04``) that parses back to
    an equal Reference. ``familiar`` gives the short form ``docker pull`` users type.
    """

    registry: str
    repository: str
    tag: str | None = None
    digest: Digest | None = None

    def __post_init__(self) -> None:
        if self.digest is not None and not isinstance(self.digest, Digest):
            object.__setattr__(self, "digest", Digest(self.digest))

    @property
    def pinned(self) -> bool:
        """True when the reference names content (a digest), not a movable tag."""
        return self.digest is not None

    @property
    def name(self) -> str:
        return f"{self.registry}/{self.repository}"

    @property
    def identifier(self) -> str:
        """What goes after /manifests/ in a URL: the digest if pinned, else the tag."""
        if self.digest is not None:
            return str(self.digest)
        return self.tag or "latest"

    def pinned_only(self, digest: Digest | str | None = None) -> Reference:
        """``registry/repo@digest``: the form to pull or build from."""
        d = Digest(digest) if digest is not None else self.digest
        if d is None:
            raise ReferenceFormatError(f"{self} is not pinned by digest")
        return Reference(self.registry, self.repository, None, d)

    def __str__(self) -> str:
        text = self.name
        if self.tag is not None:
            text += f":{self.tag}"
        if self.digest is not None:
            text += f"@{self.digest}"
        return text

    @property
    def familiar(self) -> str:
        name = self.name
        if self.registry == DOCKER_HUB:
            short = self.repository.removeprefix("library/")
            first = short.split("/", 1)[0]
            # Keep docker.io/ where dropping it would make the first component read as a
            # registry host (docker.io/a.b/c is not a.b/c); the short form must parse back.
            looks_like_host = "/" in short and ("." in first or first == "localhost")
            if not looks_like_host:
                name = short
        text = name
        if self.tag is not None:
            text += f":{self.tag}"
        if self.digest is not None:
            text += f"@{self.digest}"
        return text


def parse_reference(text: str, *, default_tag: str | None = None) -> Reference:
    """Parse a docker reference, normalising docker.io and library/ as the Docker CLI does.

    A reference with neither tag nor digest gets ``default_tag`` (None keeps it bare, which
    callers that need content treat as ``latest``, as Docker does).
    """
    if not isinstance(text, str) or not text or text != text.strip():
        raise ReferenceFormatError(f"malformed reference {text!r}: empty or has whitespace")
    original = text
    digest: Digest | None = None
    if "@" in text:
        text, _, digest_text = text.partition("@")
        digest = Digest(digest_text)
    tag: str | None = None
    last_slash = text.rfind("/")
    colon = text.rfind(":")
    if colon > last_slash:
        text, tag = text[:colon], text[colon + 1 :]
        if not _TAG.fullmatch(tag):
            raise ReferenceFormatError(
                f"malformed tag {tag!r} in {original!r}",
                hint="a tag is up to 128 letters, digits, '_', '.' and '-', not starting with . or -",  # noqa: E501
            )
    if not text:
        raise ReferenceFormatError(f"malformed reference {original!r}: no repository")
    first, slash, rest = text.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
        registry, path = first, rest
        if not _valid_domain(registry):
            raise ReferenceFormatError(f"malformed registry host {registry!r} in {original!r}")
    else:
        registry, path = DOCKER_HUB, text
    if registry.lower() in _HUB_ALIASES:
        registry = DOCKER_HUB
    if registry == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    components = path.split("/")
    if not all(_COMPONENT.fullmatch(c) for c in components):
        raise ReferenceFormatError(
            f"malformed repository {path!r} in {original!r}",
            hint="repository names are lower-case letters, digits and separators (. _ __ -)",
        )
    if len(registry) + 1 + len(path) > 255:
        raise ReferenceFormatError(f"reference {original!r} is longer than 255 characters")
    if tag is None and digest is None and default_tag is not None:
        tag = default_tag
    return Reference(registry=registry, repository=path, tag=tag, digest=digest)


def is_tag(text: str) -> bool:
    """Whether ``text`` is a valid tag: up to 128 ASCII letters, digits, '_', '.', '-'."""
    return _TAG.fullmatch(text) is not None


def repository_for(target: str, plan: str) -> str:
    """The repository a plan is pushed to under TARGET, as `--registry`/`--mirror` take it.

    A registry given as a host (127.0.0.1:5000) gets imagekit/PLAN; as host/prefix it gets
    prefix/PLAN.
    """
    target = target.rstrip("/")
    if "/" not in target:
        ref = parse_reference(f"{target}/imagekit/{plan}")
    else:
        ref = parse_reference(f"{target}/{plan}")
    if ref.tag is not None or ref.digest is not None:
        raise ReferenceFormatError(
            f"{target!r} must be a registry or repository prefix, not an image"
        )
    return ref.name


# The spellings a runtime takes for one architecture, and the variant it assumes when none
# is written, as containerd's platforms package normalises them (database.go,
# normalizeArch): an image's config or an index may say x86_64 where a policy says amd64.
_ARCH_ALIASES = {
    "x86_64": ("amd64", None),
    "x86-64": ("amd64", None),
    "aarch64": ("arm64", None),
    "armhf": ("arm", "v7"),
    "armel": ("arm", "v6"),
    "i386": ("386", ""),
    "i686": ("386", ""),
}
_DEFAULT_VARIANT = {"arm64": "v8", "arm": "v7"}
_VARIANT_ALIASES = {
    "amd64": {"v1": ""},
    "arm64": {"8": "v8", "v8.0": "v8", "9": "v9", "9.0": "v9", "v9.0": "v9"},
    "arm": {"5": "v5", "6": "v6", "7": "v7", "8": "v8"},
}


@dataclass(frozen=True)
class Platform:
    """An OCI platform: os/architecture[/variant]."""

    os: str
    architecture: str
    variant: str | None = None

    def __str__(self) -> str:
        text = f"{self.os}/{self.architecture}"
        return f"{text}/{self.variant}" if self.variant else text

    def normalized(self) -> Platform:
        """The platform as a runtime reads it: lower case, the architecture's aliases
        (x86_64, aarch64, armhf, armel, i386, i686) resolved and its default variant written
        (arm64 is v8, arm is v7, amd64's v1 is none), so that two spellings of one
        platform compare equal."""
        os = self.os.lower()
        os = "darwin" if os == "macos" else os
        arch = self.architecture.lower()
        variant = (self.variant or "").lower()
        alias = _ARCH_ALIASES.get(arch)
        if alias is not None:
            arch, forced = alias
            variant = forced if forced is not None else variant
        variant = _VARIANT_ALIASES.get(arch, {}).get(variant, variant)
        variant = variant or _DEFAULT_VARIANT.get(arch, "")
        return Platform(os, arch, variant or None)

    def matches(self, os: str, architecture: str, variant: str | None) -> bool:
        """Whether an image of OS/ARCHITECTURE/VARIANT is this platform, both normalised
        (linux/arm64 is linux/arm64/v8, linux/x86_64 is linux/amd64). A platform written
        without a variant takes any variant of its architecture."""
        mine, theirs = self.normalized(), Platform(os, architecture, variant).normalized()
        if (mine.os, mine.architecture) != (theirs.os, theirs.architecture):
            return False
        return self.variant is None or mine.variant == theirs.variant

    def same(self, other: Platform) -> bool:
        """Whether OTHER names this very platform once both are normalised."""
        return self.normalized() == other.normalized()

    @property
    def is_unknown(self) -> bool:
        """Exactly unknown/unknown: how BuildKit and others list an attestation manifest in
        an index (https://docs.docker.com/build/metadata/attestations/attestation-storage/);
        no runtime selects it."""
        return (self.os, self.architecture, self.variant) == ("unknown", "unknown", None)


# Each part starts with a letter or digit: "..", "." or "-x" are not platforms, and a value
# like linux/../x must be bad input here, not a lookup the registry answers with "not found".
_PLATFORM_PART = re.compile(r"[a-z0-9][a-z0-9_.-]*")


def parse_platform(text: str) -> Platform:
    parts = text.split("/")
    if len(parts) not in (2, 3) or not all(_PLATFORM_PART.fullmatch(p) for p in parts):
        raise ReferenceFormatError(
            f"malformed platform {text!r}",
            hint="give os/architecture[/variant], e.g. linux/amd64 or linux/arm64/v8",
        )
    return Platform(parts[0], parts[1], parts[2] if len(parts) == 3 else None)
