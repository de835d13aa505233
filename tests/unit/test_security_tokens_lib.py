"""JWT keys, tokens and their verification (``security.tokens``), and the broker's token
authentication built on them (``security.authentication``): sans-IO, no broker."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed25519, rsa

from stripemq.broker.config import BrokerConfig
from stripemq.errors import AuthenticationError, ConfigError, server_error_of
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.security.authentication import (
    AuthenticatedRole,
    AuthenticationService,
    TokenAuthenticationProvider,
)
from stripemq.security.tokens import (
    KeySpecError,
    TokenError,
    TokenVerifier,
    create_key_pair,
    create_secret_key,
    create_token,
    parse_duration,
    read_key_spec,
    unverified_claims,
)

PULSAR_TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"
NOW = 1_700_000_000.0
SECRET = bytes(range(32))


@pytest.fixture(scope="module")
def rsa_pair() -> tuple[bytes, bytes]:
    return create_key_pair("RS256")


@pytest.fixture(scope="module")
def ec_pair() -> tuple[bytes, bytes]:
    return create_key_pair("ES256")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def to_pem(public_der: bytes) -> bytes:
    key = serialization.load_der_public_key(public_der)
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def public_der(key: Any) -> bytes:
    return key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def signed(claims: dict[str, Any], key: bytes = SECRET, algorithm: str = "HS256") -> str:
    """A token with any claims, made by PyJWT itself."""
    return jwt.encode(claims, key, algorithm=algorithm)


def hs256_by_hand(claims: dict[str, Any], secret: bytes, header: dict[str, Any]) -> str:
    """An HMAC-SHA256 token built without PyJWT (which refuses asymmetric keys as secrets)."""

    def part(data: bytes) -> bytes:
        return base64.urlsafe_b64encode(data).rstrip(b"=")

    signing_input = part(json.dumps(header).encode()) + b"." + part(json.dumps(claims).encode())
    signature = part(hmac.new(secret, signing_input, hashlib.sha256).digest())
    return (signing_input + b"." + signature).decode()


# ---------------------------------------------------------------------------- read_key_spec


def test_a_file_url_names_the_file_s_raw_bytes(tmp_path: Path) -> None:
    path = tmp_path / "secret.key"
    path.write_bytes(SECRET)
    assert read_key_spec(f"file://{path}") == SECRET
    assert read_key_spec(f"  file://{path}\n") == SECRET  # the setting is stripped


def test_a_file_url_is_percent_decoded(tmp_path: Path) -> None:
    path = tmp_path / "my key"
    path.write_bytes(b"k")
    assert read_key_spec(f"file://{tmp_path}/my%20key") == b"k"


def test_a_missing_key_file_is_a_key_spec_error(tmp_path: Path) -> None:
    with pytest.raises(KeySpecError, match=r"cannot read key file .*missing\.key"):
        read_key_spec(f"file://{tmp_path}/missing.key")


def test_an_empty_key_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "empty.key"
    path.write_bytes(b"")
    with pytest.raises(KeySpecError):
        read_key_spec(f"file://{path}")


@pytest.mark.parametrize(
    "spec",
    [
        f"data:;base64,{b64(SECRET)}",
        f"data:application/octet-stream;base64,{b64(SECRET)}",
        b64(SECRET),  # bare base64
        f"  {b64(SECRET)}\n",
    ],
)
def test_data_urls_and_bare_base64_name_the_decoded_bytes(spec: str) -> None:
    assert read_key_spec(spec) == SECRET


def test_a_data_url_without_base64_is_percent_decoded() -> None:
    assert read_key_spec("data:,abc%20def") == b"abc def"


@pytest.mark.parametrize(
    "spec, message",
    [
        ("data:;base64", "no comma"),
        ("data:;base64,", "empty key"),
        ("data:,", "empty key"),
        ("data:;base64,AAA*", "not valid base64 for the data: URL"),
        ("data:;base64,AAA", "not valid base64"),  # missing padding: not a shorter key
        ("data:;base64,AA AA", "not valid base64"),
        ("data:;base64,AA_-", "not valid base64"),  # url-safe alphabet
        ("not base64!", "not valid base64 for a key"),
        ("", "empty key"),
        ("   ", "empty key"),
    ],
)
def test_unusable_key_specs_are_key_spec_errors(spec: str, message: str) -> None:
    with pytest.raises(KeySpecError, match=message):
        read_key_spec(spec)


def test_a_bare_spec_error_shows_its_start_only() -> None:
    spec = "x" * 19 + "!" + "SECRET-REST"
    with pytest.raises(KeySpecError) as info:
        read_key_spec(spec)
    assert repr(spec[:20]) in str(info.value)
    assert "SECRET-REST" not in str(info.value)
    assert isinstance(info.value, TokenError)


# ---------------------------------------------------------------------------- keys


@pytest.mark.parametrize("algorithm, size", [("HS256", 32), ("HS384", 48), ("HS512", 64)])
def test_a_secret_key_is_as_long_as_its_hash(algorithm: str, size: int) -> None:
    key = create_secret_key(algorithm)
    assert len(key) == size
    assert key != create_secret_key(algorithm)


def test_the_default_secret_key_is_hs256_sized() -> None:
    assert len(create_secret_key()) == 32


@pytest.mark.parametrize("algorithm", ["RS256", "none", "hs256", ""])
def test_no_secret_key_for_other_algorithms(algorithm: str) -> None:
    with pytest.raises(TokenError, match="no secret key for algorithm"):
        create_secret_key(algorithm)


def test_an_rsa_pair_is_pkcs8_and_x509_der(rsa_pair: tuple[bytes, bytes]) -> None:
    private_der, public = rsa_pair
    private = serialization.load_der_private_key(private_der, password=None)
    assert isinstance(private, rsa.RSAPrivateKey) and private.key_size == 2048
    loaded = serialization.load_der_public_key(public)
    assert isinstance(loaded, rsa.RSAPublicKey)
    assert public_der(private.public_key()) == public


@pytest.mark.parametrize(
    "algorithm, curve", [("ES256", "secp256r1"), ("ES384", "secp384r1"), ("ES512", "secp521r1")]
)
def test_an_ec_pair_is_on_its_algorithm_s_curve(algorithm: str, curve: str) -> None:
    private_der, public = create_key_pair(algorithm)
    private = serialization.load_der_private_key(private_der, password=None)
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    assert private.curve.name == curve
    assert public_der(private.public_key()) == public


@pytest.mark.parametrize("algorithm", ["HS256", "EdDSA", "rs256"])
def test_no_key_pair_for_other_algorithms(algorithm: str) -> None:
    with pytest.raises(TokenError, match="no key pair for algorithm"):
        create_key_pair(algorithm)


# ---------------------------------------------------------------------------- create_token


def test_a_secret_signs_hs256_by_default_with_sub_and_no_expiry() -> None:
    token = create_token(subject="alice", secret_key=SECRET)
    assert jwt.get_unverified_header(token)["alg"] == "HS256"
    assert unverified_claims(token) == {"sub": "alice"}
    assert jwt.decode(token, SECRET, algorithms=["HS256"]) == {"sub": "alice"}


def test_expiry_is_counted_from_now_in_whole_seconds() -> None:
    token = create_token(subject="a", secret_key=SECRET, expires_in_s=3600, now=NOW + 0.9)
    assert unverified_claims(token)["exp"] == int(NOW) + 3600


def test_headers_go_into_the_token_header() -> None:
    token = create_token(subject="a", secret_key=SECRET, headers={"kid": "key-1"})
    assert jwt.get_unverified_header(token)["kid"] == "key-1"


def test_a_token_is_signed_with_exactly_one_key(rsa_pair: tuple[bytes, bytes]) -> None:
    with pytest.raises(TokenError, match="exactly one"):
        create_token(subject="a")
    with pytest.raises(TokenError, match="exactly one"):
        create_token(subject="a", secret_key=SECRET, private_key=rsa_pair[0])


def test_a_secret_signs_only_hmac_algorithms() -> None:
    with pytest.raises(TokenError, match="a secret key signs HS256, HS384, HS512, not RS256"):
        create_token(subject="a", secret_key=SECRET, algorithm="RS256")
    with pytest.raises(TokenError):
        create_token(subject="a", secret_key=SECRET, algorithm="none")


def test_a_private_key_signs_only_pair_algorithms(rsa_pair: tuple[bytes, bytes]) -> None:
    with pytest.raises(TokenError, match=r"a private key signs .*, not HS256"):
        create_token(subject="a", private_key=rsa_pair[0], algorithm="HS256")


def test_private_keys_sign_their_own_kind_by_default(
    rsa_pair: tuple[bytes, bytes], ec_pair: tuple[bytes, bytes]
) -> None:
    assert jwt.get_unverified_header(create_token(subject="a", private_key=rsa_pair[0]))["alg"] == (
        "RS256"
    )
    assert jwt.get_unverified_header(create_token(subject="a", private_key=ec_pair[0]))["alg"] == (
        "ES256"
    )


def test_a_pem_private_key_signs_too(rsa_pair: tuple[bytes, bytes]) -> None:
    private = serialization.load_der_private_key(rsa_pair[0], password=None)
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    token = create_token(subject="a", private_key=pem, algorithm="PS256")
    assert TokenVerifier.from_public_key(rsa_pair[1], "PS256").verify(token).role == "a"


def test_a_key_of_the_wrong_kind_for_the_algorithm_cannot_sign(
    rsa_pair: tuple[bytes, bytes], ec_pair: tuple[bytes, bytes]
) -> None:
    with pytest.raises(TokenError, match="needs an EC key"):
        create_token(subject="a", private_key=rsa_pair[0], algorithm="ES256")
    with pytest.raises(TokenError, match="RS256 needs an RSA key"):
        create_token(subject="a", private_key=ec_pair[0], algorithm="RS256")


def test_garbage_is_not_a_private_key() -> None:
    with pytest.raises(KeySpecError, match="not a private key"):
        create_token(subject="a", private_key=b"not a key")


@pytest.mark.parametrize("algorithm", ["ES384", "ES512"])
def test_an_ec_key_signs_its_curve_s_algorithm_by_default(algorithm: str) -> None:
    private_der, public = create_key_pair(algorithm)
    token = create_token(subject="a", private_key=private_der)
    assert jwt.get_unverified_header(token)["alg"] == algorithm
    assert TokenVerifier.from_public_key(public, algorithm).verify(token).role == "a"


# ---------------------------------------------------------------------------- verifiers


@pytest.mark.parametrize("algorithm", ["HS256", "HS384", "HS512"])
def test_a_secret_verifier_takes_every_hmac_algorithm(algorithm: str) -> None:
    secret = create_secret_key(algorithm)
    token = create_token(subject="alice", secret_key=secret, algorithm=algorithm)
    claims = TokenVerifier.from_secret(secret).verify(token)
    assert (claims.role, claims.expires_at, dict(claims.claims)) == (
        "alice",
        None,
        {"sub": "alice"},
    )


@pytest.mark.parametrize("pem", [False, True], ids=["der", "pem"])
@pytest.mark.parametrize("algorithm", ["RS256", "RS512", "PS384"])
def test_rsa_public_keys_verify_der_or_pem(
    rsa_pair: tuple[bytes, bytes], algorithm: str, pem: bool
) -> None:
    private_der, public = rsa_pair
    key = to_pem(public) if pem else public
    token = create_token(subject="bob", private_key=private_der, algorithm=algorithm)
    assert TokenVerifier.from_public_key(key, algorithm).verify(token).role == "bob"


@pytest.mark.parametrize("pem", [False, True], ids=["der", "pem"])
def test_ec_public_keys_verify_der_or_pem(ec_pair: tuple[bytes, bytes], pem: bool) -> None:
    private_der, public = ec_pair
    key = to_pem(public) if pem else public
    token = create_token(subject="carol", private_key=private_der)
    assert TokenVerifier.from_public_key(key, "ES256").verify(token).role == "carol"


def test_the_default_public_algorithm_is_rs256(rsa_pair: tuple[bytes, bytes]) -> None:
    assert TokenVerifier.from_public_key(rsa_pair[1]).algorithms == ("RS256",)


def test_a_public_key_s_algorithm_must_fit_its_kind(
    rsa_pair: tuple[bytes, bytes], ec_pair: tuple[bytes, bytes]
) -> None:
    with pytest.raises(KeySpecError, match="algorithm ES256 needs an EC key"):
        TokenVerifier.from_public_key(rsa_pair[1], "ES256")
    with pytest.raises(KeySpecError, match="algorithm RS256 needs an RSA key"):
        TokenVerifier.from_public_key(ec_pair[1], "RS256")
    with pytest.raises(KeySpecError, match="algorithm 'HS256' takes no public key"):
        TokenVerifier.from_public_key(rsa_pair[1], "HS256")


def test_what_is_not_a_public_key_is_refused(rsa_pair: tuple[bytes, bytes]) -> None:
    with pytest.raises(KeySpecError, match="not a public key"):
        TokenVerifier.from_public_key(b"garbage")
    with pytest.raises(KeySpecError, match="not a public key"):
        TokenVerifier.from_public_key(b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----")
    with pytest.raises(KeySpecError, match="not a public key"):
        TokenVerifier.from_public_key(rsa_pair[0])  # the private key


@pytest.mark.parametrize("kind", ["ed25519", "dsa"])
def test_a_public_key_that_is_neither_rsa_nor_ec_is_refused(kind: str) -> None:
    if kind == "ed25519":
        key = public_der(ed25519.Ed25519PrivateKey.generate().public_key())
    else:
        key = public_der(dsa.generate_private_key(1024).public_key())
    with pytest.raises(KeySpecError):
        TokenVerifier.from_public_key(key, "RS256")


def test_an_ec_key_must_be_on_the_algorithm_s_curve() -> None:
    _, public = create_key_pair("ES384")
    with pytest.raises(KeySpecError):
        TokenVerifier.from_public_key(public, "ES256")


# ---------------------------------------------------------------------------- verify


def test_a_token_is_valid_until_its_exp() -> None:
    token = create_token(subject="a", secret_key=SECRET, expires_in_s=60, now=NOW)
    verifier = TokenVerifier.from_secret(SECRET)
    claims = verifier.verify(token, now=NOW + 59)
    assert claims.role == "a" and claims.expires_at == NOW + 60
    assert isinstance(claims.expires_at, float)
    for at in (NOW + 60, NOW + 61, NOW + 10**6):
        with pytest.raises(TokenError, match="token has expired"):
            verifier.verify(token, now=at)


def test_expiry_is_checked_against_the_clock_by_default() -> None:
    verifier = TokenVerifier.from_secret(SECRET)
    expired = create_token(subject="a", secret_key=SECRET, expires_in_s=-3600)
    with pytest.raises(TokenError, match="expired"):
        verifier.verify(expired)
    fresh = create_token(subject="a", secret_key=SECRET, expires_in_s=3600)
    assert verifier.verify(fresh).role == "a"


@pytest.mark.parametrize("exp", ["tomorrow", True, {"at": 1}, [1]])
def test_an_exp_that_is_not_a_number_is_refused(exp: object) -> None:
    with pytest.raises(TokenError, match="exp claim is not a number"):
        TokenVerifier.from_secret(SECRET).verify(signed({"sub": "a", "exp": exp}), now=0)


def test_a_token_signed_with_another_key_does_not_verify(
    rsa_pair: tuple[bytes, bytes],
) -> None:
    token = create_token(subject="a", secret_key=create_secret_key())
    with pytest.raises(TokenError, match="signature does not verify"):
        TokenVerifier.from_secret(SECRET).verify(token)
    other_private, _ = create_key_pair("ES256")
    ec_token = create_token(subject="a", private_key=other_private)
    _, ec_public = create_key_pair("ES256")
    with pytest.raises(TokenError, match="signature does not verify"):
        TokenVerifier.from_public_key(ec_public, "ES256").verify(ec_token)


def test_a_tampered_token_does_not_verify() -> None:
    header, _payload, signature = create_token(subject="alice", secret_key=SECRET).split(".")
    forged = base64.urlsafe_b64encode(b'{"sub":"admin"}').rstrip(b"=").decode()
    with pytest.raises(TokenError, match="signature does not verify"):
        TokenVerifier.from_secret(SECRET).verify(f"{header}.{forged}.{signature}")


@pytest.mark.parametrize("pem", [False, True], ids=["der", "pem"])
def test_an_hs256_token_keyed_with_the_public_key_is_refused(
    rsa_pair: tuple[bytes, bytes], pem: bool
) -> None:
    """Algorithm confusion: the public key is no secret, so HMAC with it proves nothing."""
    public = to_pem(rsa_pair[1]) if pem else rsa_pair[1]
    token = hs256_by_hand({"sub": "admin"}, public, {"alg": "HS256", "typ": "JWT"})
    with pytest.raises(TokenError, match="algorithm is not accepted"):
        TokenVerifier.from_public_key(public).verify(token)


def test_a_public_key_verifier_takes_only_its_algorithm(
    rsa_pair: tuple[bytes, bytes],
) -> None:
    token = create_token(subject="a", private_key=rsa_pair[0], algorithm="RS512")
    with pytest.raises(TokenError, match="algorithm is not accepted"):
        TokenVerifier.from_public_key(rsa_pair[1], "RS256").verify(token)


def test_a_secret_verifier_refuses_public_key_tokens(rsa_pair: tuple[bytes, bytes]) -> None:
    token = create_token(subject="a", private_key=rsa_pair[0])
    with pytest.raises(TokenError, match="algorithm is not accepted"):
        TokenVerifier.from_secret(SECRET).verify(token)


@pytest.mark.parametrize("alg", ["none", "None", "NONE"])
def test_unsigned_tokens_are_refused(rsa_pair: tuple[bytes, bytes], alg: str) -> None:
    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    unsigned = f"{part({'alg': alg, 'typ': 'JWT'})}.{part({'sub': 'admin'})}."
    for verifier in (TokenVerifier.from_secret(SECRET), TokenVerifier.from_public_key(rsa_pair[1])):
        with pytest.raises(TokenError):
            verifier.verify(unsigned)
    pyjwt_unsigned = jwt.encode({"sub": "admin"}, "", algorithm="none")
    with pytest.raises(TokenError, match="algorithm is not accepted"):
        TokenVerifier.from_secret(SECRET).verify(pyjwt_unsigned)


@pytest.mark.parametrize("token", ["", "abc", "a.b.c", "a.b", "...."])
def test_no_token_or_garbage_is_refused(token: str) -> None:
    with pytest.raises(TokenError, match="no token" if not token else "malformed token"):
        TokenVerifier.from_secret(SECRET).verify(token)


def test_a_token_not_yet_valid_is_refused() -> None:
    token = signed({"sub": "a", "nbf": int(time.time()) + 3600})
    with pytest.raises(TokenError, match="not valid yet"):
        TokenVerifier.from_secret(SECRET).verify(token)


def test_aud_and_iat_are_not_checked_without_an_audience_claim() -> None:
    token = signed({"sub": "a", "aud": "elsewhere", "iat": int(time.time()) + 10**6})
    assert TokenVerifier.from_secret(SECRET).verify(token).role == "a"


@pytest.mark.parametrize(
    "audience_value, accepted",
    [
        ("broker-1", True),
        (["other", "broker-1"], True),
        ("broker-2", False),
        (["other"], False),
        ([], False),
        (42, False),
        ({"broker-1": True}, False),
        (None, False),  # the claim is missing
    ],
)
def test_the_audience_claim_must_name_the_audience(audience_value: object, accepted: bool) -> None:
    verifier = TokenVerifier.from_secret(SECRET, audience_claim="aud", audience="broker-1")
    claims: dict[str, Any] = {"sub": "a"}
    if audience_value is not None:
        claims["aud"] = audience_value
    if accepted:
        assert verifier.verify(signed(claims)).role == "a"
    else:
        with pytest.raises(TokenError, match="not for audience 'broker-1'"):
            verifier.verify(signed(claims))


def test_the_audience_may_sit_in_a_custom_claim() -> None:
    verifier = TokenVerifier.from_secret(SECRET, audience_claim="brokers", audience="b1")
    assert verifier.verify(signed({"sub": "a", "brokers": ["b1"], "aud": "x"})).role == "a"
    with pytest.raises(TokenError, match="audience"):
        verifier.verify(signed({"sub": "a", "aud": "b1"}))


def test_the_role_comes_from_the_configured_claim() -> None:
    verifier = TokenVerifier.from_secret(SECRET, role_claim="role")
    claims = verifier.verify(signed({"sub": "alice", "role": "admin"}))
    assert claims.role == "admin"
    assert claims.claims == {"sub": "alice", "role": "admin"}
    with pytest.raises(TokenError, match="no role in its 'role' claim"):
        verifier.verify(signed({"sub": "alice"}))


@pytest.mark.parametrize("claims", [{}, {"sub": ""}, {"role": 7}, {"role": ["a"]}, {"role": None}])
def test_a_token_without_a_string_role_is_refused(claims: dict[str, Any]) -> None:
    claim = "role" if "role" in claims else "sub"
    with pytest.raises(TokenError, match=f"no role in its '{claim}' claim"):
        TokenVerifier.from_secret(SECRET, role_claim=claim).verify(signed(claims))


@pytest.mark.parametrize("sub", [7, ["a"], None])
def test_a_sub_that_is_not_a_string_is_refused(sub: object) -> None:
    with pytest.raises(TokenError, match="no role in its 'sub' claim"):
        TokenVerifier.from_secret(SECRET).verify(signed({"sub": sub}))


@pytest.mark.parametrize("iss", [5, ["issuer"]])
def test_claims_nobody_checks_may_hold_anything(iss: object) -> None:
    token = hs256_by_hand({"sub": "a", "iss": iss}, SECRET, {"alg": "HS256", "typ": "JWT"})
    assert TokenVerifier.from_secret(SECRET).verify(token).role == "a"


def test_an_empty_secret_verifies_nothing() -> None:
    """What an empty key file gives today (see above): every token refused, none forged."""
    verifier = TokenVerifier.from_secret(b"")
    with pytest.raises(TokenError, match="malformed token"):
        verifier.verify(create_token(subject="a", secret_key=SECRET))
    with pytest.raises(TokenError):
        verifier.verify(hs256_by_hand({"sub": "a"}, b"", {"alg": "HS256", "typ": "JWT"}))


# ---------------------------------------------------------------------------- helpers


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("0", 0),
        ("30", 30),
        ("30s", 30),
        ("15m", 900),
        ("1h", 3600),
        ("7d", 7 * 86400),
        ("2w", 14 * 86400),
        ("1y", 365 * 86400),
        (" 5 m ", 300),
    ],
)
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "1.5h", "-1h", "1H", "10x", "1hm", "1 h 2"])
def test_what_is_not_a_duration(text: str) -> None:
    with pytest.raises(TokenError, match="not a duration"):
        parse_duration(text)


def test_unverified_claims_read_any_well_formed_token() -> None:
    expired = create_token(subject="a", secret_key=create_secret_key(), expires_in_s=1, now=0)
    assert unverified_claims(expired) == {"sub": "a", "exp": 1}


@pytest.mark.parametrize("token", ["", "abc", "a.b.c"])
def test_unverified_claims_of_garbage_is_a_token_error(token: str) -> None:
    with pytest.raises(TokenError, match="malformed token"):
        unverified_claims(token)


# ---------------------------------------------------------------------------- authentication


def config(**settings: Any) -> BrokerConfig:
    settings.setdefault("authentication_enabled", True)
    if "token_public_key" not in settings:
        settings.setdefault("token_secret_key", f"data:;base64,{b64(SECRET)}")
    return BrokerConfig(**settings)


def service(**settings: Any) -> AuthenticationService:
    built = AuthenticationService.from_config(config(**settings))
    assert built is not None
    return built


def test_authentication_off_is_no_service() -> None:
    assert AuthenticationService.from_config(BrokerConfig()) is None
    assert AuthenticationService.from_config(config(authentication_enabled=False)) is None


@pytest.mark.parametrize(
    "providers", [[], ["token"], [PULSAR_TOKEN_PROVIDER], ["token", PULSAR_TOKEN_PROVIDER]]
)
def test_the_token_provider_by_any_of_its_names(providers: list[str]) -> None:
    built = service(authentication_providers=providers)
    assert list(built.providers) == ["token"]
    assert isinstance(built.providers["token"], TokenAuthenticationProvider)
    assert built.anonymous_role is None


def test_an_unknown_provider_is_a_config_error() -> None:
    tls = "org.apache.pulsar.broker.authentication.AuthenticationProviderTls"
    with pytest.raises(ConfigError, match=f"unknown authentication provider.*{tls}"):
        service(authentication_providers=["token", tls])


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"token_secret_key": None}, "needs token_secret_key or token_public_key"),
        ({"token_secret_key": ""}, "needs token_secret_key or token_public_key"),
        ({"token_secret_key": "data:;base64,AA*A"}, "token authentication: not valid base64"),
        ({"token_audience_claim": "aud"}, "token_audience must be set"),
    ],
)
def test_unusable_token_settings_are_config_errors(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        service(**settings)


def test_both_keys_are_a_config_error(rsa_pair: tuple[bytes, bytes]) -> None:
    with pytest.raises(ConfigError, match="not both"):
        AuthenticationService.from_config(
            BrokerConfig(
                authentication_enabled=True,
                token_secret_key=f"data:;base64,{b64(SECRET)}",
                token_public_key=f"data:;base64,{b64(rsa_pair[1])}",
            )
        )


def test_a_secret_key_file(tmp_path: Path) -> None:
    path = tmp_path / "secret.key"
    path.write_bytes(SECRET)
    built = service(token_secret_key=f"file://{path}")
    token = create_token(subject="alice", secret_key=SECRET)
    assert built.authenticate("token", token.encode()).role == "alice"


def test_a_public_key_file_in_pem(tmp_path: Path, ec_pair: tuple[bytes, bytes]) -> None:
    path = tmp_path / "public.pem"
    path.write_bytes(to_pem(ec_pair[1]))
    built = service(token_public_key=f"file://{path}", token_public_alg="ES256")
    token = create_token(subject="bob", private_key=ec_pair[0])
    assert built.authenticate("token", token.encode()) == AuthenticatedRole("bob", "token")


def test_a_public_key_with_the_wrong_algorithm_is_a_config_error(
    rsa_pair: tuple[bytes, bytes],
) -> None:
    with pytest.raises(ConfigError, match="ES256 needs an EC key"):
        service(token_public_key=f"data:;base64,{b64(rsa_pair[1])}", token_public_alg="ES256")
    with pytest.raises(ConfigError, match="takes no public key"):
        service(token_public_key=f"data:;base64,{b64(rsa_pair[1])}", token_public_alg="HS256")


def test_role_claim_and_audience_come_from_the_settings() -> None:
    built = service(token_auth_claim="role", token_audience_claim="aud", token_audience="b1")
    good = signed({"sub": "x", "role": "admin", "aud": ["b1"]})
    assert built.authenticate("token", good).role == "admin"
    with pytest.raises(AuthenticationError, match="audience"):
        built.authenticate("token", signed({"role": "admin", "aud": "b2"}))


@pytest.mark.parametrize("method", ["token", PULSAR_TOKEN_PROVIDER, ""])
def test_a_valid_token_proves_its_role(method: str) -> None:
    token = create_token(subject="alice", secret_key=SECRET, expires_in_s=3600, now=NOW + 10**9)
    role = service().authenticate(method, token.encode())
    assert role == AuthenticatedRole("alice", "token", float(int(NOW) + 10**9 + 3600))


def test_token_data_may_be_text_and_is_stripped() -> None:
    token = create_token(subject="alice", secret_key=SECRET)
    assert service().authenticate("token", f" {token}\n").role == "alice"


def test_a_bad_token_is_an_authentication_error_with_pulsar_s_code() -> None:
    with pytest.raises(AuthenticationError, match=r"^Failed to authenticate: ") as info:
        service().authenticate("token", b"not-a-token")
    assert server_error_of(info.value) == pb.AuthenticationError
    assert isinstance(info.value.__cause__, TokenError)


def test_an_expired_token_is_refused() -> None:
    token = create_token(subject="alice", secret_key=SECRET, expires_in_s=-60)
    with pytest.raises(AuthenticationError, match="expired"):
        service().authenticate("token", token.encode())


@pytest.mark.parametrize("method", [None, "", "none"])
@pytest.mark.parametrize("data", [None, b"", ""])
def test_no_credentials_need_an_anonymous_role(method: str | None, data: bytes | None) -> None:
    with pytest.raises(AuthenticationError, match="Authentication required") as info:
        service().authenticate(method, data)
    assert server_error_of(info.value) == pb.AuthenticationError
    anonymous = service(anonymous_user_role="anon").authenticate(method, data)
    assert anonymous == AuthenticatedRole("anon", "anonymous", None)


def test_an_empty_token_is_refused_even_with_an_anonymous_role() -> None:
    with pytest.raises(AuthenticationError, match="no token"):
        service(anonymous_user_role="anon").authenticate("token", b"")


@pytest.mark.parametrize("method", ["tls", "basic", "none"])
def test_other_methods_with_data_are_unsupported(method: str) -> None:
    token = create_token(subject="alice", secret_key=SECRET)
    with pytest.raises(AuthenticationError, match=f"Unsupported authentication method: {method}"):
        service(anonymous_user_role="anon").authenticate(method, token.encode())


@pytest.mark.parametrize(
    "header",
    ["Bearer {}", "bearer {}", "BEARER {}", "  Bearer   {}  "],
)
def test_http_bearer_tokens(header: str) -> None:
    token = create_token(subject="alice", secret_key=SECRET)
    assert service().authenticate_http(header.format(token)) == AuthenticatedRole("alice", "token")


@pytest.mark.parametrize("header", [None, ""])
def test_http_without_authorization_is_anonymous_or_refused(header: str | None) -> None:
    with pytest.raises(AuthenticationError, match="Authentication required"):
        service().authenticate_http(header)
    assert service(anonymous_user_role="anon").authenticate_http(header).role == "anon"


@pytest.mark.parametrize("header", ["Basic dXNlcjpwYXNz", "Bearer", "Bearer   ", "Token abc"])
def test_http_other_schemes_are_refused_even_with_an_anonymous_role(header: str) -> None:
    with pytest.raises(AuthenticationError, match="Authorization: Bearer <token>") as info:
        service(anonymous_user_role="anon").authenticate_http(header)
    assert server_error_of(info.value) == pb.AuthenticationError


def test_http_bad_bearer_token_is_refused() -> None:
    with pytest.raises(AuthenticationError, match="Failed to authenticate"):
        service(anonymous_user_role="anon").authenticate_http("Bearer nope")


def test_an_authenticated_role_expires_at_its_exp() -> None:
    role = AuthenticatedRole("a", "token", NOW)
    assert not role.expired(NOW - 1)
    assert role.expired(NOW) and role.expired(NOW + 1)
    assert not AuthenticatedRole("a", "token").expired(float("inf"))


@pytest.mark.parametrize("seconds", [0.0, -1.0])
def test_the_refresh_check_interval_must_be_positive(seconds: float) -> None:
    config = BrokerConfig(authentication_refresh_check_seconds=seconds)
    with pytest.raises(ConfigError, match="authentication_refresh_check_seconds"):
        config.validate()
