"""References, digests and platforms: normalisation cases and hypothesis round trips."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import TypeVar

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from imagekit.errors import ReferenceFormatError, UsageError
from imagekit.refs import (
    Digest,
    Platform,
    Reference,
    is_digest,
    parse_platform,
    parse_reference,
    repository_for,
)

D = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    ("text", "registry", "repository", "tag", "digest"),
    [
        ("ubuntu", "docker.io", "library/ubuntu", None, None),
        ("ubuntu:22.04", "docker.io", "library/ubuntu", "22.04", None),
        ("lmsysorg/sglang:v0.5.0", "docker.io", "lmsysorg/sglang", "v0.5.0", None),
        ("docker.io/ubuntu", "docker.io", "library/ubuntu", None, None),
        ("index.docker.io/foo/bar", "docker.io", "foo/bar", None, None),
        ("registry-1.docker.io/library/x:1", "docker.io", "library/x", "1", None),
        ("localhost/a", "localhost", "a", None, None),
        ("localhost:5000/a/b:t", "localhost:5000", "a/b", "t", None),
        ("127.0.0.1:5000/imagekit-test/base", "127.0.0.1:5000", "imagekit-test/base", None, None),
        ("[::1]:5000/a", "[::1]:5000", "a", None, None),
        ("myreg:5000/a", "myreg:5000", "a", None, None),
        ("nvcr.io/nvidia/pytorch:24.05-py3", "nvcr.io", "nvidia/pytorch", "24.05-py3", None),
        (f"ubuntu@{D}", "docker.io", "library/ubuntu", None, D),
        (f"r.example/a/b:v1@{D}", "r.example", "a/b", "v1", D),
        ("a/b__c/d-e.f", "docker.io", "a/b__c/d-e.f", None, None),
        # Its familiar form must keep docker.io/, or "a.b" would read as a registry host.
        ("docker.io/a.b/c", "docker.io", "a.b/c", None, None),
        ("docker.io/localhost/c", "docker.io", "localhost/c", None, None),
    ],
)
def test_normalisation(
    text: str, registry: str, repository: str, tag: str | None, digest: str | None
) -> None:
    ref = parse_reference(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (
        registry,
        repository,
        tag,
        digest,
    )
    assert ref.pinned is (digest is not None)
    assert parse_reference(str(ref)) == ref
    assert parse_reference(ref.familiar) == ref


def test_familiar_and_identifier() -> None:
    assert parse_reference("ubuntu:22.04").familiar == "ubuntu:22.04"
    assert str(parse_reference("ubuntu")) == "docker.io/library/ubuntu"
    assert parse_reference("ubuntu").identifier == "latest"
    assert parse_reference(f"ubuntu:1@{D}").identifier == D
    assert parse_reference("ubuntu", default_tag="latest").tag == "latest"


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ubuntu",
        "Ubuntu",
        "a//b",
        "a/",
        ":tag",
        "a:-tag",
        "a:.tag",
        "a:t\u00e4g",
        "a:" + "t" * 129,
        "a@sha256:../../x",
        "a@sha256:" + "A" * 64,
        "a@sha256:" + "a" * 63,
        "a@md5:" + "a" * 32,
        "a@" + "a" * 64,
        "bad_host:5000/a",
        "host:99999/a",
        "r.example/" + "a" * 300,
    ],
)
def test_malformed_references_refused(text: str) -> None:
    with pytest.raises(ReferenceFormatError) as info:
        parse_reference(text)
    assert info.value.exit_code == 2


@pytest.mark.parametrize(
    "text",
    [
        "sha256:../../x",
        "sha256:" + "A" * 64,
        "sha256:" + "a" * 63,
        "sha256:" + "a" * 65,
        "sha256:" + "g" * 64,
        "sha256:" + "a" * 63 + "\n",
        "SHA256:" + "a" * 64,
        "md5:" + "a" * 32,
        "sha384:" + "a" * 96,
        "sha512:" + "a" * 64,
        "sha256" + "a" * 64,
        ":" + "a" * 64,
        "",
    ],
)
def test_malformed_digests_refused(text: str) -> None:
    with pytest.raises(ReferenceFormatError):
        Digest(text)
    assert not is_digest(text)


@given(st.binary(max_size=256))
def test_digest_of_bytes(data: bytes) -> None:
    digest = Digest.of_bytes(data)
    assert digest == "sha256:" + hashlib.sha256(data).hexdigest()
    assert digest.algorithm == "sha256" and len(digest.hex) == 64
    assert Digest(str(digest)) == digest


T = TypeVar("T")


def _parsed_or_refused(parse: Callable[[str], T], text: str) -> T | None:
    """parse(text), or None where it refuses the text as malformed: the one error allowed."""
    try:
        return parse(text)
    except ReferenceFormatError:
        return None


@settings(max_examples=500)
@given(st.text(max_size=80))
def test_arbitrary_digest_text_is_valid_or_refused(text: str) -> None:
    digest = _parsed_or_refused(Digest, text)
    if digest is None:
        return
    algorithm, _, hexpart = digest.partition(":")
    assert algorithm in ("sha256", "sha512")
    assert set(hexpart) <= set("0123456789abcdef")
    assert "/" not in digest and ".." not in digest


_alnum = st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=8)
_component = st.builds(
    lambda a, sep, b: a + (sep + b if sep else ""),
    _alnum,
    st.sampled_from(["", ".", "_", "__", "-", "--"]),
    _alnum,
)
_repository = st.lists(_component, min_size=1, max_size=4).map("/".join)
_label = st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=10)
_host = st.one_of(
    st.just("docker.io"),
    st.just("localhost"),
    st.builds(lambda a, b: f"{a}.{b}", _label, _label),
    st.builds(lambda a, p: f"{a}:{p}", _label, st.integers(1, 65535)),
    st.builds(lambda a, b, p: f"{a}.{b}:{p}", _label, _label, st.integers(1, 65535)),
    st.builds(lambda p: f"127.0.0.1:{p}", st.integers(1, 65535)),
)
_tag = st.from_regex(r"\A[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}\Z")
_digest = st.binary(min_size=1, max_size=8).map(Digest.of_bytes)


@settings(max_examples=400)
@given(_host, _repository, st.none() | _tag, st.none() | _digest)
def test_format_parse_round_trip(
    host: str, repository: str, tag: str | None, digest: Digest | None
) -> None:
    if host == "docker.io" and "/" not in repository:
        repository = f"library/{repository}"
    assume(len(host) + 1 + len(repository) <= 255)
    ref = Reference(host, repository, tag, digest)
    assert parse_reference(str(ref)) == ref
    assert parse_reference(ref.familiar) == ref
    again = parse_reference(str(ref))
    assert str(again) == str(ref)
    if digest is not None:
        assert again.pinned_only() == Reference(host, repository, None, digest)


@given(st.text(max_size=60))
def test_arbitrary_reference_text_parses_or_is_refused(text: str) -> None:
    ref = _parsed_or_refused(parse_reference, text)
    if ref is None:
        return
    assert parse_reference(str(ref)) == ref


@pytest.mark.parametrize(
    ("text", "platform"),
    [
        ("linux/amd64", Platform("linux", "amd64")),
        ("linux/arm64/v8", Platform("linux", "arm64", "v8")),
    ],
)
def test_platforms(text: str, platform: Platform) -> None:
    assert parse_platform(text) == platform
    assert str(platform) == text


@pytest.mark.parametrize("text", ["linux", "linux/", "a/b/c/d", "Linux/AMD64", "linux/amd64 "])
def test_malformed_platforms(text: str) -> None:
    with pytest.raises(ReferenceFormatError):
        parse_platform(text)


def test_platform_matching() -> None:
    assert Platform("linux", "arm64").matches("linux", "arm64", "v8")
    assert Platform("linux", "arm64", "v8").matches("linux", "arm64", "v8")
    # v8 is arm64's default, as containerd normalises it: an arm64 image without a variant
    # is an arm64/v8 image, and a runtime asking for arm64/v8 runs it
    assert Platform("linux", "arm64", "v8").matches("linux", "arm64", None)
    assert not Platform("linux", "arm64", "v9").matches("linux", "arm64", None)
    assert not Platform("linux", "amd64").matches("linux", "arm64", None)


@pytest.mark.parametrize(
    ("written", "normalized"),
    [
        (("linux", "x86_64", None), ("linux", "amd64", None)),
        (("linux", "x86-64", None), ("linux", "amd64", None)),
        (("linux", "amd64", "v1"), ("linux", "amd64", None)),
        (("linux", "aarch64", None), ("linux", "arm64", "v8")),
        (("linux", "arm64", "8"), ("linux", "arm64", "v8")),
        (("linux", "arm64", "v8.0"), ("linux", "arm64", "v8")),
        (("linux", "armhf", None), ("linux", "arm", "v7")),
        (("linux", "armel", None), ("linux", "arm", "v6")),
        (("linux", "arm", None), ("linux", "arm", "v7")),
        (("linux", "arm", "6"), ("linux", "arm", "v6")),
        (("linux", "i386", None), ("linux", "386", None)),
        (("linux", "i686", None), ("linux", "386", None)),
        (("Linux", "AMD64", None), ("linux", "amd64", None)),
    ],
)
def test_platforms_normalise_as_containerd_does(
    written: tuple[str, str, str | None], normalized: tuple[str, str, str | None]
) -> None:
    assert Platform(*written).normalized() == Platform(*normalized)
    assert Platform(*normalized).matches(*written)


def test_only_unknown_unknown_is_an_attestation_platform() -> None:
    assert Platform("unknown", "unknown").is_unknown
    assert not Platform("unknown", "unknown", "v8").is_unknown
    assert not Platform("linux", "unknown").is_unknown


def test_repository_for() -> None:
    assert repository_for("127.0.0.1:5000", "demo") == "127.0.0.1:5000/imagekit/demo"
    assert repository_for("127.0.0.1:5000/team/", "demo") == "127.0.0.1:5000/team/demo"
    with pytest.raises(UsageError):
        repository_for("127.0.0.1:5000/team:v1", "demo")


@pytest.mark.parametrize(
    "text", ["linux/../x", "linux/./amd64", "../linux/amd64", "linux/amd64/..", "linux/-x"]
)
def test_a_platform_part_must_start_with_a_letter_or_digit(text: str) -> None:
    with pytest.raises(ReferenceFormatError, match="malformed platform"):
        parse_platform(text)
