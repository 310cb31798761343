"""Registry authentication: the WWW-Authenticate challenge, Basic, and bearer tokens.

The flow is the distribution token protocol (https://distribution.github.io/distribution/spec/auth/token/):
a request answered 401 carries ``WWW-Authenticate: Bearer realm=...,service=...,scope=...``;
we ask the realm for a token for exactly the repository scope we need (with Basic credentials
from the docker config when there are any, anonymously otherwise) and send it as
``Authorization: Bearer``. Tokens are cached per registry and scope set and thrown away on a
401, so an expired token is renewed once. Basic challenges get the credentials directly.

Everything here is per host (``host[:port]``), as the Docker CLI keeps logins: the
challenge a host sent, the tokens its realm issued, the credentials the docker config has
for it. A registry that redirects its API to another registry with a login of its own
(lscr.io to ghcr.io) therefore gets the other registry's token from the other registry's
realm, made from the other registry's credentials; the origin's never leave for it.

A credential helper's answer is kept until a registry or token service refuses it; then the
helper is asked once more (gcloud's and ACR's tokens expire within the hour, so a long
mirror or nightly outlives the first answer), and a new secret is used at once.

Credentials and tokens live only in memory, in objects whose repr hides them, and no message
built here ever contains one.
"""

from __future__ import annotations

import base64
import re
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import httpx

from imagekit import jsondoc
from imagekit.errors import RegistryProtocolError, RegistryUnauthorized
from imagekit.registry.credentials import Credential, CredentialStore
from imagekit.registry.transport import (
    MAX_SMALL_BODY_BYTES,
    Transport,
    excerpt,
    is_loopback,
    read_limited,
)

# RFC 7235 / RFC 9110 section 11: token, quoted-string and token68.
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_TOKEN68 = re.compile(r"[A-Za-z0-9._~+/-]+=*")
_MAX_HEADER = 8192


@dataclass(frozen=True)
class Challenge:
    """One authentication challenge: its scheme (lower-cased) and its parameters."""

    scheme: str
    params: dict[str, str] = field(default_factory=dict)

    @property
    def realm(self) -> str | None:
        return self.params.get("realm")


def _fail(header: str, why: str, registry: str) -> RegistryProtocolError:
    return RegistryProtocolError(
        f"{registry} sent a malformed WWW-Authenticate header ({why}): {excerpt(header.encode())}",
        registry=registry,
    )


def parse_www_authenticate(header: str, *, registry: str = "registry") -> tuple[Challenge, ...]:
    """Parse a WWW-Authenticate value into its challenges (RFC 9110 section 11.6.1).

    Never crashes on hostile input: it returns challenges or raises RegistryProtocolError.
    Parameter names are lower-cased; duplicate parameters are refused (a realm given twice
    could point the token request at two different places depending on who reads it).
    """
    if len(header) > _MAX_HEADER:
        raise _fail(header, "too long", registry)
    challenges: list[Challenge] = []
    pos, n = 0, len(header)

    def skip_ws_commas(p: int) -> int:
        while p < n and header[p] in " \t,":
            p += 1
        return p

    def skip_ws(p: int) -> int:
        while p < n and header[p] in " \t":
            p += 1
        return p

    pos = skip_ws_commas(pos)
    while pos < n:
        m = _TOKEN.match(header, pos)
        if not m:
            raise _fail(header, f"expected an auth scheme at offset {pos}", registry)
        scheme = m.group(0).lower()
        pos = m.end()
        params: dict[str, str] = {}
        if pos < n and header[pos] not in " \t,":
            raise _fail(header, f"unexpected character after scheme at offset {pos}", registry)
        pos = skip_ws(pos)
        # token68 form (e.g. "Negotiate abc=="): one token68 followed by the end or a comma.
        # "name=value" never matches it whole, since token68 allows '=' only at its end.
        t68 = _TOKEN68.match(header, pos)
        if t68 is not None:
            end = skip_ws(t68.end())
            if end == n or header[end] == ",":
                params[""] = t68.group(0)
                pos = t68.end()
        while pos < n and "" not in params:
            pos = skip_ws_commas(pos)
            if pos >= n:
                break
            name_m = _TOKEN.match(header, pos)
            if not name_m:
                raise _fail(header, f"expected a parameter name at offset {pos}", registry)
            after_name = skip_ws(name_m.end())
            if after_name >= n or header[after_name] != "=":
                # No '=': this token starts the next challenge.
                break
            name = name_m.group(0).lower()
            pos = skip_ws(after_name + 1)
            if pos < n and header[pos] == '"':
                pos += 1
                chars: list[str] = []
                while True:
                    if pos >= n:
                        raise _fail(header, "unterminated quoted string", registry)
                    ch = header[pos]
                    if ch == "\\":
                        if pos + 1 >= n:
                            raise _fail(header, "dangling escape", registry)
                        chars.append(header[pos + 1])
                        pos += 2
                        continue
                    if ch == '"':
                        pos += 1
                        break
                    chars.append(ch)
                    pos += 1
                value = "".join(chars)
            else:
                value_m = _TOKEN.match(header, pos)
                if not value_m:
                    raise _fail(header, f"expected a parameter value at offset {pos}", registry)
                value = value_m.group(0)
                pos = value_m.end()
            if name in params:
                raise _fail(header, f"parameter {name!r} given twice", registry)
            params[name] = value
            pos = skip_ws(pos)
            if pos < n and header[pos] != ",":
                raise _fail(header, f"expected ',' at offset {pos}", registry)
        challenges.append(Challenge(scheme, params))
        pos = skip_ws_commas(pos)
    if not challenges:
        raise _fail(header, "no challenge", registry)
    return tuple(challenges)


def repository_scope(repository: str, actions: Sequence[str]) -> str:
    """``repository:NAME:ACTIONS`` as the token spec writes scopes."""
    return f"repository:{repository}:{','.join(actions)}"


@dataclass(frozen=True, repr=False)
class _Token:
    value: str
    expires_at: float

    def __repr__(self) -> str:
        return "_Token(***)"


class Authenticator:
    """Chooses the Authorization header for a registry request and renews it after a 401."""

    #: Renew this many seconds before a token says it expires.
    _SLACK = 30.0

    def __init__(self, transport: Transport, credentials: CredentialStore) -> None:
        self._transport = transport
        self._credentials = credentials
        self._challenges: dict[str, Challenge] = {}
        self._tokens: dict[tuple[str, tuple[str, ...]], _Token] = {}
        self._cred_cache: dict[str, Credential | None] = {}
        self._lock = threading.Lock()
        # Held while a token is fetched, so parallel downloads do not each ask for one.
        self._token_lock = threading.RLock()

    def __repr__(self) -> str:
        return f"Authenticator(registries={sorted(self._challenges)})"

    def credential(self, registry: str) -> Credential | None:
        with self._lock:
            if registry not in self._cred_cache:
                self._cred_cache[registry] = self._credentials.lookup(registry)
            return self._cred_cache[registry]

    def has_credentials(self, registry: str) -> bool:
        return self.credential(registry) is not None

    def challenged(self, host: str) -> bool:
        """Whether ``host`` has asked us to authenticate (only such hosts get credentials)."""
        return host in self._challenges

    def renew_credential(self, host: str) -> bool:
        """Ask the docker config (its helper) again after a refusal; True when the answer
        changed, so that sending again may help. The host's tokens are forgotten with it."""
        with self._lock:
            before = self._cred_cache.get(host)
            after = self._credentials.lookup(host)
            self._cred_cache[host] = after
        if after is None or after == before:
            return False
        with self._token_lock:
            for key in [k for k in self._tokens if k[0] == host]:
                del self._tokens[key]
        return True

    def authorization(self, registry: str, scopes: Sequence[str]) -> tuple[str | None, bool]:
        """The header value to send now, and whether it was fetched just now.

        A token fetched just now that is refused is a real refusal; a cached one may merely
        have expired, so the caller renews it once.
        """
        challenge = self._challenges.get(registry)
        if challenge is None:
            return None, False
        if challenge.scheme == "basic":
            cred = self.credential(registry)
            if cred is None or cred.is_identity_token:
                return None, True
            return cred.basic_header(), True
        if challenge.scheme == "bearer":
            key = (registry, tuple(sorted(scopes)))
            with self._token_lock:
                token = self._tokens.get(key)
                if token is not None and token.expires_at > time.monotonic():
                    return f"Bearer {token.value}", False
                token = self._fetch_token(registry, challenge, scopes)
                self._tokens[key] = token
            return f"Bearer {token.value}", True
        return None, True

    def on_unauthorized(
        self, registry: str, response: httpx.Response, scopes: Sequence[str]
    ) -> bool:
        """Learn from a 401; True when sending again with fresh authorization may help."""
        header = response.headers.get("WWW-Authenticate")
        if not header:
            return False
        challenges = parse_www_authenticate(header, registry=registry)
        chosen = _choose(challenges)
        if chosen is None:
            return False
        with self._token_lock:
            self._challenges[registry] = chosen
            # Forget this registry's tokens: the one we sent was refused (expired or too narrow).
            for key in [k for k in self._tokens if k[0] == registry]:
                del self._tokens[key]
        if chosen.scheme == "basic":
            # Basic only helps if we have credentials (the caller knows whether it sent them).
            return self.has_credentials(registry)
        return True

    def _fetch_token(self, registry: str, challenge: Challenge, scopes: Sequence[str]) -> _Token:
        try:
            return self._fetch_token_once(registry, challenge, scopes)
        except RegistryUnauthorized:
            # The secret may have been rotated since the helper answered: ask it once more.
            if not self.renew_credential(registry):
                raise
            return self._fetch_token_once(registry, challenge, scopes)

    def _fetch_token_once(
        self, registry: str, challenge: Challenge, scopes: Sequence[str]
    ) -> _Token:
        realm = challenge.realm
        if not realm:
            raise RegistryProtocolError(
                f"{registry} asked for a bearer token without a realm", registry=registry
            )
        try:
            realm_url = httpx.URL(realm)
        except httpx.InvalidURL as exc:
            raise RegistryProtocolError(
                f"{registry} gave a token realm that is not a valid URL: {excerpt(realm.encode())}",
                registry=registry,
            ) from exc
        realm_host = realm_url.netloc.decode()
        if realm_url.scheme not in ("http", "https"):
            raise RegistryProtocolError(
                f"{registry} gave a token realm that is not an http(s) URL", registry=registry
            )
        cred = self.credential(registry)
        if (
            realm_url.scheme == "http"
            and cred is not None
            and not (is_loopback(realm_host) or realm_host in self._transport.insecure)
        ):
            raise RegistryProtocolError(
                f"{registry} asked for credentials over plain http at {realm_url.host}; refused",
                registry=registry,
                hint="the token realm must be https unless the host is loopback or --insecure",
            )
        params: list[tuple[str, str | int | float | bool | None]] = []
        if "service" in challenge.params:
            params.append(("service", challenge.params["service"]))
        wanted = list(scopes) or _split_scopes(challenge.params.get("scope", ""))
        params.extend(("scope", s) for s in wanted)
        url = realm_url.copy_merge_params(params)

        def attempt() -> httpx.Response:
            if cred is not None and cred.is_identity_token:
                form = {
                    "grant_type": "refresh_token",
                    "refresh_token": cred.secret,
                    "client_id": "imagekit",
                    **(
                        {"service": challenge.params["service"]}
                        if "service" in challenge.params
                        else {}
                    ),
                    "scope": " ".join(wanted),
                }
                body = httpx.QueryParams(form).__str__().encode()
                return self._transport.send(
                    "POST",
                    str(realm_url),
                    registry=registry,
                    headers={"Content-Type": "application/x-www-form-urlencoded"},
                    content=body,
                )
            return self._transport.send(
                "GET",
                str(url),
                registry=registry,
                authorization=cred.basic_header() if cred is not None else None,
            )

        def fetch() -> tuple[int, bytes, str]:
            response = attempt()
            body = read_limited(
                response, MAX_SMALL_BODY_BYTES, registry=registry, what="token answer"
            )
            return response.status_code, body, response.headers.get("Content-Type", "")

        status, body, _ctype = self._transport.policy.run(
            fetch, registry=registry, what=f"token request to {realm_url.host}"
        )
        if status in (401, 403):
            raise RegistryUnauthorized(
                f"{registry}: the token service refused "
                + ("the credentials" if cred is not None else "anonymous access")
                + f" (HTTP {status})",
                registry=registry,
                status=status,
                hint=f"log in with `docker login {registry}` (imagekit reads the docker config)",
            )
        if status != 200:
            raise RegistryProtocolError(
                f"{registry}: the token service answered HTTP {status}: {excerpt(body)}",
                registry=registry,
                status=status,
            )
        try:
            document = jsondoc.loads(body, limit=MAX_SMALL_BODY_BYTES)
        except jsondoc.JsonRefused as exc:
            raise RegistryProtocolError(
                f"{registry}: the token service answered something that is not JSON ({exc}): "
                f"{excerpt(body)}",
                registry=registry,
            ) from exc
        if not isinstance(document, dict):
            raise RegistryProtocolError(
                f"{registry}: the token answer is not a JSON object", registry=registry
            )
        value = document.get("token") or document.get("access_token")
        if not isinstance(value, str) or not value or not _is_header_safe(value):
            raise RegistryProtocolError(
                f"{registry}: the token answer has no usable token", registry=registry
            )
        expires_in = document.get("expires_in")
        lifetime = float(expires_in) if isinstance(expires_in, int | float) else 60.0
        lifetime = max(0.0, lifetime - self._SLACK) if lifetime > 2 * self._SLACK else lifetime
        return _Token(value, time.monotonic() + lifetime)


def _is_header_safe(value: str) -> bool:
    return all(33 <= ord(ch) <= 126 for ch in value)


def _split_scopes(text: str) -> list[str]:
    return [s for s in text.split(" ") if s]


def _choose(challenges: Iterable[Challenge]) -> Challenge | None:
    """Bearer before Basic; other schemes (Negotiate, ...) are not supported."""
    by_scheme = {c.scheme: c for c in challenges}
    return by_scheme.get("bearer") or by_scheme.get("basic")


def basic_header(username: str, password: str) -> str:
    raw = f"{username}:{password}".encode()
    return "Basic " + base64.b64encode(raw).decode("ascii")
