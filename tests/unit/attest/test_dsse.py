"""DSSE envelopes and in-toto statements: signed over the PAE, refused when touched."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from imagekit.attest.dsse import EnvelopeError, parse_envelope, sign_envelope
from imagekit.attest.keys import generate_key_pair, load_public_key
from imagekit.attest.signer import KeyFileSigner
from imagekit.attest.statement import (
    StatementError,
    Subject,
    make_statement,
    parse_statement,
)
from imagekit.errors import UsageError
from imagekit.refs import Digest

DIGEST = Digest("sha256:" + "ab" * 32)


def test_pae_is_the_spec_s() -> None:
    envelope = parse_envelope(
        json.dumps(
            {
                "payload": base64.b64encode(b"hello world").decode(),
                "payloadType": "http://example.com/HelloWorld",
                "signatures": [{"sig": base64.b64encode(b"x").decode()}],
            }
        ).encode()
    )
    # https://github.com/secure-systems-lab/dsse/blob/master/protocol.md (the test vector)
    assert envelope.pae() == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"


def test_a_signed_statement_verifies_and_a_changed_one_does_not(tmp_path: Path) -> None:
    pair = generate_key_pair(tmp_path / "a")
    other = generate_key_pair(tmp_path / "b")
    signer = KeyFileSigner.from_file(pair.private)
    statement = make_statement((Subject("r/x", DIGEST),), "https://t/v1", {"ok": True})
    data = sign_envelope(statement, signer)
    envelope = parse_envelope(data)
    keys = (load_public_key(other.public), load_public_key(pair.public))
    assert envelope.signed_by(keys) == keys[1]
    assert envelope.signed_by(keys[:1]) is None
    parsed = parse_statement(envelope.payload)
    assert parsed.names(DIGEST) and parsed.predicate == {"ok": True}
    document = json.loads(data)
    payload = base64.b64decode(document["payload"]).replace(b'"ok":true', b'"ok":false')
    document["payload"] = base64.b64encode(payload).decode()
    assert parse_envelope(json.dumps(document).encode()).signed_by(keys) is None


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"{}",
        b'{"payload":"!!","payloadType":"t","signatures":[{"sig":"AA=="}]}',
        b'{"payload":"","payloadType":"t","signatures":[]}',
    ],
)
def test_what_is_not_an_envelope_is_named(data: bytes) -> None:
    with pytest.raises(EnvelopeError):
        parse_envelope(data)


def test_what_is_not_a_statement_is_named() -> None:
    with pytest.raises(StatementError):
        parse_statement(b'{"_type":"other","subject":[],"predicateType":"x"}')
    with pytest.raises(StatementError):
        parse_statement(b"[]")


def _signed_forms(tmp_path: Path) -> tuple[bytes, bytes, tuple[object, ...]]:
    pair = generate_key_pair(tmp_path / "forms")
    signer = KeyFileSigner.from_file(pair.private)
    note = "???>>>" * 4  # bytes whose base64 holds + and /
    payload = make_statement((Subject("r/x", DIGEST),), "https://t/v1", {"note": note})
    if len(payload) % 3 == 0:  # so that its base64 is padded
        payload = make_statement((Subject("r/x", DIGEST),), "https://t/v1", {"note": note + "?"})
    envelope = parse_envelope(sign_envelope(payload, signer))
    signature = envelope.signatures[0][1]
    while sum(base64.b64encode(signature).decode().count(c) for c in "+/") < 2:
        signature = signer.sign(envelope.pae())  # until both alphabets can be mixed in it
    return payload, signature, (load_public_key(pair.public),)


def test_the_forms_cosign_reads_are_read(tmp_path: Path) -> None:
    """keyid null or absent, a URL-safe signature, base64 wrapped over lines (LF, CRLF),
    fields DSSE says to ignore (tests/integration/attest/test_cosign_forms.py runs cosign
    on each)."""
    payload, signature, keys = _signed_forms(tmp_path)
    std, url = base64.b64encode(payload).decode(), base64.urlsafe_b64encode(signature).decode()
    wrapped = "\n".join(std[i : i + 60] for i in range(0, len(std), 60))
    for form in (
        {"payload": std, "signatures": [{"keyid": None, "sig": url}]},
        {"payload": wrapped, "signatures": [{"sig": base64.b64encode(signature).decode()}]},
        {"payload": wrapped.replace("\n", "\r\n"), "signatures": [{"sig": url}], "x": 1},
    ):
        document = {"payloadType": "application/vnd.in-toto+json", **form}
        assert parse_envelope(json.dumps(document).encode()).signed_by(keys) is not None  # type: ignore[arg-type]


def test_the_forms_cosign_refuses_are_refused(tmp_path: Path) -> None:
    """A URL-safe payload (cosign refuses it though DSSE allows it), a signature mixing both
    alphabets, spaces in the base64, a missing padding."""
    payload, signature, _ = _signed_forms(tmp_path)
    std_sig = base64.b64encode(signature).decode()
    first = min(std_sig.find(c) for c in "+/" if c in std_sig)
    mixed = std_sig[:first] + {"+": "-", "/": "_"}[std_sig[first]] + std_sig[first + 1 :]
    std = base64.b64encode(payload).decode()
    assert std.endswith("=") and {"+", "/"} & set(std)
    for payload_text, sig in (
        (base64.urlsafe_b64encode(payload).decode(), std_sig),
        (std, mixed),
        (std[:40] + " " + std[40:], std_sig),
        (std.rstrip("="), std_sig),
    ):
        document = {"payload": payload_text, "payloadType": "t", "signatures": [{"sig": sig}]}
        with pytest.raises(EnvelopeError, match="bad base64"):
            parse_envelope(json.dumps(document).encode())


def test_a_statement_without_type_is_read_and_one_of_another_type_is_not() -> None:
    body = {"subject": [{"digest": {"sha256": DIGEST.hex}}], "predicateType": "x"}
    assert parse_statement(json.dumps(body).encode()).names(DIGEST)
    with pytest.raises(StatementError, match="unknown statement type"):
        parse_statement(json.dumps({**body, "_type": "https://example.com/v9"}).encode())


def test_a_statement_with_a_number_that_is_not_finite_is_never_signed() -> None:
    """A bare NaN in the signed predicate: strict verifiers refuse the statement. Refused
    before anything is signed, naming where it is."""
    with pytest.raises(UsageError, match=r"nan at \$\.predicate\.busbw_gbps") as refused:
        make_statement((Subject("r/x", DIGEST),), "https://t/v1", {"busbw_gbps": float("nan")})
    assert refused.value.exit_code == 2
    with pytest.raises(UsageError, match=r"inf at \$\.predicate\.sizes\[0\]"):
        make_statement((Subject("r/x", DIGEST),), "https://t/v1", {"sizes": [float("inf")]})
