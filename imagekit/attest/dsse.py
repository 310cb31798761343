"""DSSE envelopes (https://github.com/secure-systems-lab/dsse/blob/master/envelope.md).

Written with securesystemslib's ``Envelope`` (its pre-authentication encoding and its JSON
form); read back through a strict model first, since an envelope from a registry is
untrusted input and securesystemslib's reader assumes fields cosign leaves out (``keyid``).
Signatures are verified over the PAE bytes recomputed here from the payload received,
never over anything the envelope claims.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, ValidationError
from securesystemslib.dsse import Envelope as SslibEnvelope
from securesystemslib.signer._signature import Signature

from imagekit.attest.keys import PublicKey
from imagekit.attest.signer import Signer, verify_signature

INTOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
DSSE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"


class EnvelopeError(ValueError):
    """Bytes that are not a DSSE envelope: skipped and named by the reader, never trusted."""


class _SignatureModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    keyid: str = ""
    sig: str


class _EnvelopeModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    payload: str
    payloadType: str
    signatures: tuple[_SignatureModel, ...]


@dataclass(frozen=True)
class Envelope:
    """A parsed envelope: the payload's exact bytes, its type and its signatures."""

    payload: bytes
    payload_type: str
    signatures: tuple[tuple[str, bytes], ...]  # (keyid, DER signature)

    def pae(self) -> bytes:
        return SslibEnvelope(self.payload, self.payload_type, {}).pae()

    def signed_by(self, keys: tuple[PublicKey, ...]) -> PublicKey | None:
        """The first of KEYS that made one of the signatures over this payload, if any."""
        pae = self.pae()
        for key in keys:
            for _, signature in self.signatures:
                if verify_signature(key, pae, signature):
                    return key
        return None


def sign_envelope(payload: bytes, signer: Signer, payload_type: str = INTOTO_PAYLOAD_TYPE) -> bytes:
    """The envelope's JSON bytes, PAYLOAD signed by SIGNER (keyid: the signer's key id)."""
    envelope = SslibEnvelope(payload, payload_type, {})
    signature = signer.sign(envelope.pae())
    envelope.signatures[signer.key_id] = Signature(signer.key_id, signature.hex())
    return json.dumps(envelope.to_dict(), separators=(",", ":"), sort_keys=True).encode()


def parse_envelope(data: bytes) -> Envelope:
    """Parse untrusted bytes as a DSSE envelope; EnvelopeError says why they are not one."""
    try:
        model = _EnvelopeModel.model_validate_json(data)
        payload = base64.b64decode(model.payload, validate=True)
        signatures = tuple(
            (s.keyid, base64.b64decode(s.sig, validate=True)) for s in model.signatures
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "document"
        raise EnvelopeError(f"not a DSSE envelope ({where}: {first['msg']})") from None
    except (binascii.Error, ValueError):
        raise EnvelopeError("not a DSSE envelope (bad base64)") from None
    if not signatures:
        raise EnvelopeError("a DSSE envelope without signatures")
    return Envelope(payload, model.payloadType, signatures)
