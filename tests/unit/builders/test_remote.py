"""A BuildKit address or TLS file that cannot work is bad input (exit 2, naming the option),
decided before buildctl runs: buildctl's own words for them read as a daemon that did not
answer (exit 3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.builders.options import BuildOptions
from imagekit.builders.remote import buildctl_base
from imagekit.errors import InputFileError, UsageError
from tests.support.tls import make_server_certificate


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("tcp://[::1", ": Invalid IPv6 URL"),
        ("tcp://127.0.0.1:99999", ": Port out of range 0-65535"),
        ("tcp://127.0.0.1:0", ": port 0"),
        ("tcp://buildkit.example", ": no port"),
        ("tcp://:1234", ": no host"),
        ("tcp://h:1234/path?x=1", ": a tcp address is tcp://HOST:PORT and nothing more"),
        ("unix://buildkitd.sock", ": a unix address names the socket's absolute path"),
        ("127.0.0.1:1234", ""),
    ],
)
def test_an_address_buildctl_cannot_dial_is_exit_2_naming_the_option(
    address: str, why: str
) -> None:
    with pytest.raises(UsageError) as caught:
        buildctl_base(BuildOptions(buildkit=address))
    assert caught.value.exit_code == 2
    assert caught.value.message == f"--buildkit {address!r} is not a BuildKit address{why}"


@pytest.mark.parametrize(
    "address",
    ["tcp://127.0.0.1:1234", "tcp://[::1]:1234", "tcp://buildkitd:1234", "unix:///run/b.sock"],
)
def test_an_address_it_can_dial_goes_to_buildctl(address: str) -> None:
    argv = buildctl_base(BuildOptions(buildkit=address))
    assert argv[1:] == ["--addr", address]


def test_tls_files_must_be_what_their_option_says(tmp_path: Path) -> None:
    real = make_server_certificate(tmp_path / "tls", client_auth=True)
    good = BuildOptions(
        buildkit="tcp://127.0.0.1:1234",
        buildkit_ca=real.ca_path,
        buildkit_cert=real.chain_path,
        buildkit_key=real.key_path,
    )
    assert buildctl_base(good)[3:] == [
        "--tlscacert", str(real.ca_path), "--tlscert", str(real.chain_path),
        "--tlskey", str(real.key_path),
    ]  # fmt: skip
    not_pem = tmp_path / "ca.pem"
    not_pem.write_text("not a certificate\n")
    address = "tcp://127.0.0.1:1234"
    for option, options, wrong, said in (
        ("--buildkit-ca", BuildOptions(buildkit=address, buildkit_ca=not_pem), not_pem,
         "is not a PEM certificate"),
        ("--buildkit-ca", BuildOptions(buildkit=address, buildkit_ca=real.key_path),
         real.key_path, "is not a PEM certificate"),
        ("--buildkit-cert", BuildOptions(buildkit=address, buildkit_cert=not_pem), not_pem,
         "is not a PEM certificate"),
        ("--buildkit-key", BuildOptions(buildkit=address, buildkit_key=real.ca_path),
         real.ca_path, "is not a PEM private key"),
    ):  # fmt: skip
        with pytest.raises(UsageError) as caught:
            buildctl_base(options)
        assert caught.value.exit_code == 2
        assert caught.value.message.startswith(f"{option} {wrong} {said}")
    with pytest.raises(InputFileError, match="the --buildkit-ca file is a character device"):
        buildctl_base(BuildOptions(buildkit="tcp://127.0.0.1:1234", buildkit_ca=Path("/dev/zero")))
    with pytest.raises(UsageError, match="--buildkit-ca /nonexistent/ca.pem is not a file"):
        buildctl_base(
            BuildOptions(buildkit="tcp://127.0.0.1:1234", buildkit_ca=Path("/nonexistent/ca.pem"))
        )
