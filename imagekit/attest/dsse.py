"""DSSE envelopes (https://github.com/secure-systems-lab/dsse/blob/master/envelope.md).

Written with securesystemslib's ``Envelope`` (its pre-authentication encoding and its JSON
form); read back through a model of our own, since an envelope from a registry is untrusted
input and securesystemslib's reader assumes fields cosign leaves out (``keyid``).
Signatures are verified over the PAE bytes recomputed here from the payload received,
never over anything the envelope claims.

What is read is what `cosign verify-attestation` reads (checked against cosign in
tests/integration/attest/test_cosign_forms.py), so that the gate and cosign decide from the
same envelopes:

- ``keyid`` may be a string, null or absent: it is an unsigned hint, and neither reader
  chooses a key by it;
- the payload is standard base64, padded; line breaks (CR, LF) inside it are skipped, as
  Go's decoder skips them; URL-safe base64 in the payload is refused (cosign refuses it,
  though the DSSE spec allows it);
- a signature is standard or URL-safe base64 (one alphabet, not a mix), padded, line breaks
  skipped; one signature that is not base64 refuses the whole envelope, as cosign does;
- fields the envelope or a signature carries besides these are ignored, as the DSSE spec
  says a consumer must (they are outside what is signed).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, ValidationError
from securesystemslib.dsse import Envelope as SslibEnvelope
from securesystemslib.signer._signature import Signature

from imagekit import jsondoc
from imagekit.attest.keys import PublicKey
from imagekit.attest.signer import Signer, verify_signature

INTOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
DSSE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"
#: What an envelope (and so the statement inside it) may be: a verdict's predicate is a few
#: KB, an SBOM's a few MB.
MAX_ENVELOPE_BYTES = 64 << 20


class EnvelopeError(ValueError):
    """Bytes that are not a DSSE envelope: skipped and named by the reader, never trusted."""


class _SignatureModel(BaseModel):
    # DSSE: "Consumers MUST ignore unrecognized fields"; nothing outside payload and
    # payloadType is signed, so an extra field can change nothing that is trusted.
    model_config = ConfigDict(extra="ignore", frozen=True)
    keyid: str | None = None
    sig: str


class _EnvelopeModel(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    payload: str
    payloadType: str
    signatures: tuple[_SignatureModel, ...]


_LINE_BREAKS = str.maketrans("", "", "\r\n")


def _b64(text: str, *, url_safe: bool) -> bytes:
    """TEXT decoded as Go's padded base64 decoders read it (line breaks skipped); with
    URL_SAFE, the URL-safe alphabet too, when it alone is used. binascii.Error otherwise."""
    joined = text.translate(_LINE_BREAKS)
    try:
        return base64.b64decode(joined, validate=True)
    except binascii.Error:
        if not url_safe or "+" in joined or "/" in joined:
            raise
        return base64.b64decode(joined, altchars=b"-_", validate=True)


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
        found = self.signers(keys)
        return found[0] if found else None

    def signers(self, keys: tuple[PublicKey, ...]) -> tuple[PublicKey, ...]:
        """Every one of KEYS that made one of the signatures over this payload: a policy
        may trust one key for audits and another for mirror bindings, and an envelope
        signed by both counts for each."""
        pae = self.pae()
        return tuple(
            key
            for key in keys
            if any(verify_signature(key, pae, signature) for _, signature in self.signatures)
        )


def sign_envelope(payload: bytes, signer: Signer, payload_type: str = INTOTO_PAYLOAD_TYPE) -> bytes:
    """The envelope's JSON bytes, PAYLOAD signed by SIGNER (keyid: the signer's key id)."""
    envelope = SslibEnvelope(payload, payload_type, {})
    signature = signer.sign(envelope.pae())
    envelope.signatures[signer.key_id] = Signature(signer.key_id, signature.hex())
    return json.dumps(envelope.to_dict(), separators=(",", ":"), sort_keys=True).encode()


def parse_envelope(data: bytes) -> Envelope:
    """Parse untrusted bytes as a DSSE envelope; EnvelopeError says why they are not one."""
    try:
        model = _EnvelopeModel.model_validate(jsondoc.loads(data, limit=MAX_ENVELOPE_BYTES))
        payload = _b64(model.payload, url_safe=False)
        signatures = tuple((s.keyid or "", _b64(s.sig, url_safe=True)) for s in model.signatures)
    except jsondoc.JsonRefused as exc:
        raise EnvelopeError(f"not a DSSE envelope ({exc})") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "document"
        raise EnvelopeError(f"not a DSSE envelope ({where}: {first['msg']})") from None
    except (binascii.Error, ValueError):
        raise EnvelopeError(
            "not a DSSE envelope (bad base64: the payload must be standard base64, padded; a "
            "signature standard or URL-safe, padded)"
        ) from None
    if not signatures:
        raise EnvelopeError("a DSSE envelope without signatures")
    return Envelope(payload, model.payloadType, signatures)
