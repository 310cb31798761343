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
