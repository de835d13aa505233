"""JWT tokens as Pulsar makes and checks them: keys, signing, verification (sans-IO).

Keys are given as Pulsar takes them (``tokenSecretKey``, ``tokenPublicKey``, ``pulsar
tokens --secret-key``): ``file:///path`` or ``data:;base64,<base64>``, or bare base64. A
secret key is raw bytes (HS256/384/512); key pairs are written as Pulsar writes them (DER:
PKCS#8 private, X.509 public) and read as DER or PEM, so keys made by ``pulsar tokens``
work here and the other way round.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import secrets
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes, PublicKeyTypes

from stripemq.errors import StripeMQError

SECRET_ALGORITHMS = ("HS256", "HS384", "HS512")
RSA_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
EC_CURVES = {"ES256": ec.SECP256R1(), "ES384": ec.SECP384R1(), "ES512": ec.SECP521R1()}
PAIR_ALGORITHMS = RSA_ALGORITHMS + tuple(EC_CURVES)
# A secret key as long as its algorithm's hash (Pulsar's create-secret-key: 256 bits).
SECRET_KEY_BYTES = {"HS256": 32, "HS384": 48, "HS512": 64}
RSA_KEY_BITS = 2048

_DURATION = re.compile(r"^\s*(\d+)\s*([smhdwy]?)\s*$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


class TokenError(StripeMQError):
    """A key or token that cannot be used: unreadable, malformed, badly signed, expired."""


class KeySpecError(TokenError):
    """A key setting or option that names no usable key."""


@dataclass(frozen=True)
class Claims:
    """What a verified token says: the role (from the configured claim) and its expiry."""

    role: str
    expires_at: float | None  # seconds since the epoch (``exp``); None: never
    claims: Mapping[str, Any]


def read_key_spec(spec: str) -> bytes:
    """The bytes a key setting names: ``file:///path``, ``data:;base64,...`` or base64."""
    spec = spec.strip()
    if spec.startswith("file:"):
        return _read_key_file(urllib.parse.unquote(urllib.parse.urlparse(spec).path))
    if spec.startswith("data:"):
        header, comma, payload = spec[len("data:") :].partition(",")
        if not comma:
            raise KeySpecError("malformed data: URL for a key (no comma before the data)")
        if header.endswith(";base64"):
            key = _strict_base64(payload, "the data: URL's base64")
        else:
            key = urllib.parse.unquote_to_bytes(payload)
        if not key:
            raise KeySpecError("the data: URL holds an empty key")
        return key
    if Path(spec).is_file():  # a plain path, as Pulsar also takes one
        return _read_key_file(spec)
    key = _strict_base64(
        spec, "a key (file:///path, data:;base64,<base64> or base64)", show=spec[:20]
    )
    if not key:
        raise KeySpecError("empty key")
    return key


def _read_key_file(path: str) -> bytes:
    try:
        key = Path(path).read_bytes()
    except OSError as exc:
        raise KeySpecError(f"cannot read key file {path}: {exc.strerror}") from exc
    if not key:
        raise KeySpecError(f"key file {path} is empty")
    return key


def _strict_base64(text: str, what: str, show: str | None = None) -> bytes:
    """Base64 that must be base64 throughout: a typo is an error, never a shorter key."""
    try:
        return base64.b64decode(text.strip(), validate=True)
    except (ValueError, binascii.Error) as exc:
        shown = f" (got {show!r}...)" if show is not None else ""
        raise KeySpecError(f"not valid base64 for {what}{shown}") from exc


def create_secret_key(algorithm: str = "HS256") -> bytes:
    """A fresh random HMAC key for ``algorithm`` (HS256, HS384 or HS512) tokens."""
    if algorithm not in SECRET_KEY_BYTES:
        raise TokenError(
            f"no secret key for algorithm {algorithm!r}; choose from {', '.join(SECRET_ALGORITHMS)}"
        )
    return secrets.token_bytes(SECRET_KEY_BYTES[algorithm])


def create_key_pair(algorithm: str = "RS256") -> tuple[bytes, bytes]:
    """A fresh key pair for ``algorithm``: (PKCS#8 DER private key, X.509 DER public key)."""
    private: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
    if algorithm in RSA_ALGORITHMS:
        private = rsa.generate_private_key(public_exponent=65537, key_size=RSA_KEY_BITS)
    elif algorithm in EC_CURVES:
        private = ec.generate_private_key(EC_CURVES[algorithm])
    else:
        raise TokenError(
            f"no key pair for algorithm {algorithm!r}; choose from {', '.join(PAIR_ALGORITHMS)}"
        )
    private_der = private.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public_der = private.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private_der, public_der


def load_private_key(data: bytes) -> PrivateKeyTypes:
    """A private key from PKCS#8 DER (as Pulsar writes it) or PEM."""
    try:
        if data.lstrip().startswith(b"-----"):
            return serialization.load_pem_private_key(data, password=None)
        return serialization.load_der_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise KeySpecError(f"not a private key (DER or PEM): {exc}") from exc


def load_public_key(data: bytes) -> PublicKeyTypes:
    """A public key from X.509 DER (as Pulsar writes it) or PEM."""
    try:
        if data.lstrip().startswith(b"-----"):
            return serialization.load_pem_public_key(data)
        return serialization.load_der_public_key(data)
    except (ValueError, TypeError) as exc:
        raise KeySpecError(f"not a public key (DER or PEM): {exc}") from exc


def parse_duration(text: str) -> int:
    """Seconds in a relative time such as ``30s``, ``15m``, ``1h``, ``7d``, ``2w``, ``1y``."""
    match = _DURATION.match(text)
    if match is None:
        raise TokenError(f"not a duration: {text!r} (a number and one of s, m, h, d, w, y)")
    return int(match.group(1)) * _UNIT_S[match.group(2)]


def create_token(
    *,
    subject: str,
    secret_key: bytes | None = None,
    private_key: bytes | None = None,
    algorithm: str | None = None,
    expires_in_s: int | None = None,
    headers: Mapping[str, str] | None = None,
    now: float | None = None,
) -> str:
    """A signed token for ``subject``: with ``secret_key`` (HS256 by default) or
    ``private_key`` (its own kind of algorithm, RS256 or ES256 by default)."""
    if (secret_key is None) == (private_key is None):
        raise TokenError("sign with exactly one of a secret key and a private key")
    claims: dict[str, Any] = {"sub": subject}
    if expires_in_s is not None:
        issued = time.time() if now is None else now
        claims["exp"] = int(issued + expires_in_s)
    key: Any
    if secret_key is not None:
        algorithm = algorithm or "HS256"
        if algorithm not in SECRET_ALGORITHMS:
            raise TokenError(f"a secret key signs {', '.join(SECRET_ALGORITHMS)}, not {algorithm}")
        key = secret_key
    else:
        assert private_key is not None
        key = load_private_key(private_key)
        algorithm = algorithm or default_algorithm(key)
        if algorithm not in PAIR_ALGORITHMS:
            raise TokenError(f"a private key signs {', '.join(PAIR_ALGORITHMS)}, not {algorithm}")
        check_key_fits(key, algorithm)
    try:
        return jwt.encode(claims, key, algorithm=algorithm, headers=dict(headers or {}))
    except (jwt.PyJWTError, ValueError, TypeError) as exc:
        raise TokenError(f"cannot sign with this key and {algorithm}: {exc}") from exc


def default_algorithm(key: PrivateKeyTypes | PublicKeyTypes) -> str:
    """RS256 for an RSA key, the ES algorithm of an EC key's curve."""
    if isinstance(key, (ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey)):
        for algorithm, curve in EC_CURVES.items():
            if curve.name == key.curve.name:
                return algorithm
        raise KeySpecError(f"EC curve {key.curve.name} has no JWT algorithm")
    return "RS256"


def check_key_fits(key: PrivateKeyTypes | PublicKeyTypes, algorithm: str) -> None:
    """``KeySpecError`` unless ``key`` is of the kind ``algorithm`` signs with: RSA for
    RS*/PS*, EC on the algorithm's own curve for ES*."""
    is_rsa = isinstance(key, (rsa.RSAPrivateKey, rsa.RSAPublicKey))
    is_ec = isinstance(key, (ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey))
    if algorithm in RSA_ALGORITHMS and not is_rsa:
        raise KeySpecError(f"algorithm {algorithm} needs an RSA key")
    if algorithm in EC_CURVES:
        if not is_ec:
            raise KeySpecError(f"algorithm {algorithm} needs an EC key")
        assert isinstance(key, (ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey))
        if key.curve.name != EC_CURVES[algorithm].name:
            raise KeySpecError(
                f"algorithm {algorithm} needs an EC key on {EC_CURVES[algorithm].name}, "
                f"not {key.curve.name}"
            )


def unverified_claims(token: str) -> dict[str, Any]:
    """The claims of ``token`` without checking its signature (``tokens show``)."""
    try:
        claims: dict[str, Any] = jwt.decode(token, options={"verify_signature": False})
        return claims
    except jwt.PyJWTError as exc:
        raise TokenError(f"malformed token: {exc}") from exc


@dataclass(frozen=True)
class TokenVerifier:
    """Checks tokens against one key, as Pulsar's ``AuthenticationProviderToken`` does:
    signature, ``exp``, optionally the audience; the role comes from ``role_claim``."""

    key: Any  # the secret's bytes, or a public key object
    algorithms: tuple[str, ...]
    role_claim: str = "sub"
    audience_claim: str | None = None
    audience: str | None = None

    @classmethod
    def from_secret(cls, secret: bytes, **options: Any) -> TokenVerifier:
        return cls(secret, SECRET_ALGORITHMS, **options)

    @classmethod
    def from_public_key(
        cls, data: bytes, algorithm: str = "RS256", **options: Any
    ) -> TokenVerifier:
        key = load_public_key(data)
        if algorithm not in PAIR_ALGORITHMS:
            raise KeySpecError(
                f"algorithm {algorithm!r} takes no public key: choose from "
                f"{', '.join(PAIR_ALGORITHMS)}"
            )
        check_key_fits(key, algorithm)
        return cls(key, (algorithm,), **options)

    def verify(self, token: str, *, now: float | None = None) -> Claims:
        """The claims of a valid token; ``TokenError`` saying why one is not."""
        if not token:
            raise TokenError("no token")
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                self.key,
                algorithms=list(self.algorithms),
                options={
                    "verify_aud": False,
                    "verify_exp": False,
                    "verify_iat": False,
                    "verify_nbf": False,
                    "verify_sub": False,  # the role may sit in another claim
                    "verify_jti": False,
                },
            )
        except jwt.InvalidSignatureError as exc:
            raise TokenError("token signature does not verify with the configured key") from exc
        except jwt.InvalidAlgorithmError as exc:
            raise TokenError(f"token algorithm is not accepted: {exc}") from exc
        except (jwt.PyJWTError, ValueError, TypeError) as exc:
            raise TokenError(f"malformed token: {exc}") from exc
        now = time.time() if now is None else now
        expires_at = _time_claim(claims, "exp")
        if expires_at is not None and expires_at <= now:
            raise TokenError("token has expired")
        not_before = _time_claim(claims, "nbf")
        if not_before is not None and not_before > now:
            raise TokenError("token is not valid yet (nbf)")
        if self.audience_claim:
            audiences = claims.get(self.audience_claim)
            if isinstance(audiences, str):
                audiences = [audiences]
            if not isinstance(audiences, list) or self.audience not in audiences:
                raise TokenError(f"token is not for audience {self.audience!r}")
        role = claims.get(self.role_claim)
        if not isinstance(role, str) or not role:
            raise TokenError(f"token has no role in its {self.role_claim!r} claim")
        return Claims(role, expires_at, claims)


def _time_claim(claims: Mapping[str, Any], name: str) -> float | None:
    """A NumericDate claim (seconds since the epoch), None when absent."""
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TokenError(f"token {name} claim is not a number of seconds")
    return float(value)
