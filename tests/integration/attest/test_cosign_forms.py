"""The gate reads what cosign reads: envelopes written in the forms `cosign
verify-attestation` accepts (``keyid`` null or absent, a URL-safe signature, base64 wrapped
over lines, a statement without ``_type``, fields DSSE says to ignore) are accepted by both,
and the forms cosign refuses (a URL-safe payload, spaces in the base64) by both."""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
from securesystemslib.dsse import Envelope

from imagekit.attest.cosign_tags import attach_attestation
from imagekit.attest.dsse import INTOTO_PAYLOAD_TYPE
from imagekit.attest.keys import KeyPairFiles, generate_key_pair
from imagekit.attest.signer import KeyFileSigner
from imagekit.kinds.audit import AUDIT_V1
from imagekit.refs import Reference, parse_reference
from imagekit.registry import RegistryClient
from tests.support.gate import audit_predicate, verify
from tests.support.gotools import cosign_verify_attestation
from tests.support.images import Pushed


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _wrapped(text: str, width: int = 64, newline: str = "\n") -> str:
    return newline.join(text[i : i + width] for i in range(0, len(text), width))


#: Each form: how the statement is written, and the envelope around its payload and
#: signature (both as bytes).
Form = tuple[Callable[[dict[str, Any]], dict[str, Any]], Callable[[bytes, bytes], dict[str, Any]]]


def _same(statement: dict[str, Any]) -> dict[str, Any]:
    return statement


def _envelope(payload: str, sig: str, **signature: Any) -> dict[str, Any]:
    return {"payload": payload, "payloadType": INTOTO_PAYLOAD_TYPE,
            "signatures": [{"sig": sig, **signature}]}  # fmt: skip


ACCEPTED: dict[str, Form] = {
    "keyid null": (_same, lambda p, s: _envelope(_b64(p), _b64(s), keyid=None)),
    "keyid absent": (_same, lambda p, s: _envelope(_b64(p), _b64(s))),
    "URL-safe signature": (
        _same,
        lambda p, s: _envelope(_b64(p), base64.urlsafe_b64encode(s).decode(), keyid=""),
    ),
    "payload wrapped (LF)": (_same, lambda p, s: _envelope(_wrapped(_b64(p)), _b64(s))),
    "payload wrapped (CRLF)": (
        _same,
        lambda p, s: _envelope(_wrapped(_b64(p), newline="\r\n"), _b64(s)),
    ),
    "signature wrapped": (_same, lambda p, s: _envelope(_b64(p), _wrapped(_b64(s), 20))),
    "no _type": (
        lambda st: {k: v for k, v in st.items() if k != "_type"},
        lambda p, s: _envelope(_b64(p), _b64(s)),
    ),
    "fields DSSE ignores": (
        _same,
        lambda p, s: {**_envelope(_b64(p), _b64(s), cert=""), "comment": "not signed"},
    ),
}
REFUSED: dict[str, Form] = {
    "URL-safe payload": (
        lambda st: {**st, "note": "???>>>" * 4},  # bytes whose base64 holds + and /
        lambda p, s: _envelope(base64.urlsafe_b64encode(p).decode(), _b64(s)),
    ),
    "spaces in the payload": (
        _same,
        lambda p, s: _envelope(_wrapped(_b64(p), newline=" "), _b64(s)),
    ),
}


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> KeyPairFiles:
    return generate_key_pair(tmp_path_factory.mktemp("cosign-forms") / "ci")


def _attach(image: Reference, pair: KeyPairFiles, form: Form) -> None:
    """An audit statement about IMAGE written in FORM, signed over the payload's bytes."""
    assert image.digest is not None
    statement_of, envelope_of = form
    statement = statement_of(
        {
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [{"name": image.name, "digest": {"sha256": image.digest.hex}}],
            "predicateType": AUDIT_V1,
            "predicate": audit_predicate(),
        }
    )
    payload = json.dumps(statement).encode()
    signer = KeyFileSigner.from_file(pair.private)
    pae = Envelope(payload, INTOTO_PAYLOAD_TYPE, {}).pae()
    signature = signer.sign(pae)
    while not {"+", "/"} & set(_b64(signature)):
        signature = signer.sign(pae)  # ECDSA is randomised: until the two alphabets differ
    if statement.get("note"):
        assert {"+", "/"} & set(_b64(payload)), "the URL-safe payload must differ"
    envelope = json.dumps(envelope_of(payload, signature)).encode()
    repo = Reference(image.registry, image.repository)
    with RegistryClient() as client:
        attach_attestation(client, repo, image.digest, envelope, AUDIT_V1)


def _judged(
    make_image: Callable[[str], Pushed], pair: KeyPairFiles, form: Form
) -> tuple[subprocess.CompletedProcess[str], int, dict[str, Any]]:
    """A new image with an audit attached in FORM, judged by cosign and by `imagekit verify`:
    what each said (cosign's run, the gate's exit code and document), for the test to assert
    that they agree."""
    image = parse_reference(make_image("gate/forms").reference)
    _attach(image, pair, form)
    cosign = cosign_verify_attestation(str(image), pair.public, AUDIT_V1)
    code, document = verify(str(image), "--key", str(pair.public))
    return cosign, code, document


@pytest.mark.parametrize("name", list(ACCEPTED))
def test_a_form_cosign_accepts_is_accepted(
    make_image: Callable[[str], Pushed], pair: KeyPairFiles, name: str
) -> None:
    cosign, code, document = _judged(make_image, pair, ACCEPTED[name])
    assert cosign.returncode == 0, cosign.stderr
    assert code == 0, document


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_form_cosign_refuses_is_refused(
    make_image: Callable[[str], Pushed], pair: KeyPairFiles, name: str
) -> None:
    cosign, code, document = _judged(make_image, pair, REFUSED[name])
    assert cosign.returncode != 0, cosign.stdout
    assert code == 1, document
    assert document["skipped"][0]["reason"].startswith("not a DSSE envelope (bad base64")
