"""``stripemq tokens``: keys and tokens made on the command line check out the way a broker
checks them, and a key or token that cannot be used is one line on stderr and exit 1."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from stripemq.cli import main as cli_main
from stripemq.cli.tokens import main
from stripemq.security.tokens import TokenVerifier, create_secret_key, create_token

DAY_S = 86400


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of ``stripemq tokens <argv>``."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def secret_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    path = tmp_path / "secret.key"
    assert run(capsys, "create-secret-key", "--output", str(path)) == (0, "", "")
    return path


def make_token(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run(capsys, "create", *argv)
    assert (code, err) == (0, ""), err
    return out.strip()


def test_a_secret_key_file_holds_32_raw_bytes_for_its_owner_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = secret_file(tmp_path, capsys)
    assert path.stat().st_mode & 0o777 == 0o600
    assert len(path.read_bytes()) == 32


def test_an_existing_key_file_is_overwritten_and_made_private(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "secret.key"
    path.write_bytes(b"old")
    path.chmod(0o644)
    assert run(capsys, "create-secret-key", "-o", str(path), "--base64")[0] == 0
    assert path.stat().st_mode & 0o777 == 0o600
    assert len(base64.b64decode(path.read_bytes(), validate=True)) == 32


def test_without_output_the_key_is_printed_as_base64_usable_as_a_key(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "create-secret-key")
    assert code == 0 and len(out.splitlines()) == 1
    key = out.strip()
    assert len(base64.b64decode(key, validate=True)) == 32
    token = make_token(capsys, "--secret-key", key, "--subject", "alice")
    assert run(capsys, "validate", "--secret-key", key, token)[0] == 0


@pytest.mark.parametrize(("algorithm", "size"), [("HS384", 48), ("HS512", 64)])
def test_a_longer_hash_gets_a_longer_secret_key(
    algorithm: str, size: int, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "create-secret-key", "-a", algorithm)
    assert code == 0 and len(base64.b64decode(out.strip())) == size


def test_a_token_made_with_the_secret_validates_with_its_role_and_expiry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = secret_file(tmp_path, capsys).as_uri()  # file:///..., as Pulsar takes it
    token = make_token(capsys, "--secret-key", spec, "--subject", "alice", "--expiry-time", "1d")
    code, out, err = run(capsys, "validate", "--secret-key", spec, token)
    assert (code, err) == (0, "")
    claims = json.loads(out)
    assert claims["sub"] == "alice"
    assert abs(claims["exp"] - (time.time() + DAY_S)) < 60
    key = (tmp_path / "secret.key").read_bytes()
    assert TokenVerifier.from_secret(key).verify(token).role == "alice"


def test_pulsars_short_flags_and_a_plain_path_are_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(secret_file(tmp_path, capsys))
    token = make_token(capsys, "-sk", path, "-s", "bob", "-e", "10m", "-a", "HS256")
    code, out, _ = run(capsys, "validate", "-sk", path, "-a", "HS256", token)
    assert code == 0 and json.loads(out)["sub"] == "bob"


def test_a_data_url_key_is_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    spec = "data:;base64," + base64.b64encode(create_secret_key()).decode()
    token = make_token(capsys, "-sk", spec, "-s", "carol")
    assert run(capsys, "validate", "-sk", spec, token)[0] == 0


@pytest.mark.parametrize(
    ("algorithm", "key_type"),
    [("RS256", rsa.RSAPrivateKey), ("ES256", ec.EllipticCurvePrivateKey)],
)
def test_a_key_pair_signs_and_validates_and_is_der_as_pulsar_reads_it(
    algorithm: str, key_type: type, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    private, public = tmp_path / "private.der", tmp_path / "public.der"
    argv = ["--output-private-key", str(private), "--output-public-key", str(public)]
    assert run(capsys, "create-key-pair", "--algorithm", algorithm, *argv) == (0, "", "")
    assert private.stat().st_mode & 0o777 == 0o600
    assert isinstance(serialization.load_der_private_key(private.read_bytes(), None), key_type)
    serialization.load_der_public_key(public.read_bytes())

    token = make_token(capsys, "--private-key", private.as_uri(), "-s", "dave", "-e", "1h")
    code, out, err = run(capsys, "validate", "--public-key", public.as_uri(), token)
    assert (code, err) == (0, "")
    assert json.loads(out)["sub"] == "dave"
    code, out, _ = run(capsys, "validate", "-pk", str(public), "-a", algorithm, token)
    assert code == 0
    header = run(capsys, "show", token)[1].splitlines()[0]
    assert json.loads(header)["alg"] == algorithm


def test_an_algorithm_that_does_not_fit_the_public_key_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    private, public = tmp_path / "private.der", tmp_path / "public.der"
    argv = ["--output-private-key", str(private), "--output-public-key", str(public)]
    assert run(capsys, "create-key-pair", "-a", "ES256", *argv)[0] == 0
    token = make_token(capsys, "-pk", str(private), "-s", "erin")
    code, out, err = run(capsys, "validate", "-pk", str(public), "-a", "RS256", token)
    assert (code, out) == (2, "")
    assert "RS256 does not fit an EC public key" in err


def test_an_unknown_key_pair_algorithm_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--output-private-key", str(tmp_path / "a"), "--output-public-key", str(tmp_path / "b")]
    code, _, err = run(capsys, "create-key-pair", "-a", "HS256", *argv)
    assert code == 2 and "choose from" in err
    assert not (tmp_path / "a").exists()


def test_a_token_signed_by_another_key_fails_validation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ours = base64.b64encode(create_secret_key()).decode()
    theirs = base64.b64encode(create_secret_key()).decode()
    token = make_token(capsys, "-sk", theirs, "-s", "mallory")
    code, out, err = run(capsys, "validate", "-sk", ours, token)
    assert (code, out) == (1, "")
    assert err == (
        "stripemq tokens validate: token signature does not verify with the configured key\n"
    )


def test_an_expired_token_fails_validation(capsys: pytest.CaptureFixture[str]) -> None:
    key = create_secret_key()
    token = create_token(subject="alice", secret_key=key, expires_in_s=60, now=time.time() - 3600)
    code, out, err = run(capsys, "validate", "-sk", base64.b64encode(key).decode(), token)
    assert (code, out) == (1, "")
    assert "expired" in err and len(err.splitlines()) == 1


def test_show_prints_the_header_and_claims_without_a_key(
    capsys: pytest.CaptureFixture[str],
) -> None:
    key = create_secret_key()
    token = create_token(
        subject="alice", secret_key=key, expires_in_s=60, now=1000.0, headers={"kid": "k1"}
    )
    code, out, err = run(capsys, "show", token)  # expired and unverified: still shown
    assert (code, err) == (0, "")
    header, rule, claims = out.splitlines()
    assert json.loads(header) == {"alg": "HS256", "kid": "k1", "typ": "JWT"}
    assert rule == "---"
    assert json.loads(claims) == {"sub": "alice", "exp": 1060}


def test_headers_given_to_create_are_in_the_token(capsys: pytest.CaptureFixture[str]) -> None:
    key = base64.b64encode(create_secret_key()).decode()
    token = make_token(capsys, "-sk", key, "-s", "alice", "--headers", "kid=key-1")
    assert json.loads(run(capsys, "show", token)[1].splitlines()[0])["kid"] == "key-1"
    with pytest.raises(SystemExit) as stopped:
        main(["create", "-sk", key, "-s", "a", "--headers", "alg=none"])
    assert stopped.value.code == 2
    assert "-a/--signature-algorithm" in capsys.readouterr().err


def test_the_token_can_come_from_a_file_stdin_or_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    key = base64.b64encode(create_secret_key()).decode()
    token = make_token(capsys, "-sk", key, "-s", "frank")
    (tmp_path / "token").write_text(token + "\n")
    assert json.loads(run(capsys, "show", "-f", str(tmp_path / "token"))[1].splitlines()[2])
    assert run(capsys, "validate", "-sk", key, "--token-file", str(tmp_path / "token"))[0] == 0
    monkeypatch.setattr(sys, "stdin", io.StringIO(token + "\n"))
    assert run(capsys, "validate", "-sk", key, "--stdin")[0] == 0
    monkeypatch.setenv("TOKEN", token)
    assert run(capsys, "validate", "-sk", key)[0] == 0


def test_no_token_at_all_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TOKEN", raising=False)
    code, _, err = run(capsys, "show")
    assert code == 2 and "-f/--token-file" in err


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("file:///no/such/key", "cannot read key file /no/such/key"),
        ("no/such/key.pem", "is neither a key file nor base64"),
        ("data:;base64,QUJ", "not valid base64 for the data: URL"),
        ("data:;base64,AAAA!!!!", "not valid base64 for the data: URL"),
        ("data:;base64,", "empty key"),
    ],
)
def test_a_bad_key_spec_is_one_clear_line(
    spec: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "create", "--secret-key", spec, "-s", "alice")
    assert (code, out) == (1, "")
    assert err.startswith("stripemq tokens create: ") and message in err
    assert len(err.splitlines()) == 1


def test_a_malformed_token_and_a_missing_token_file_are_one_line_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "show", "not-a-token")
    assert code == 1 and err.startswith("stripemq tokens show: malformed token")
    code, _, err = run(capsys, "show", "-f", str(tmp_path / "missing"))
    assert code == 1 and "No such file" in err and len(err.splitlines()) == 1


def test_a_key_must_be_given_exactly_once(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["create", "-s", "alice"])
    assert stopped.value.code == 2
    assert "one of the arguments -sk/--secret-key -pk/--private-key" in capsys.readouterr().err


def test_a_bad_expiry_time_is_refused_with_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["create", "-sk", "AAAA", "-s", "alice", "-e", "soon"])
    assert stopped.value.code == 2
    assert "not a duration: 'soon'" in capsys.readouterr().err


def test_the_stripemq_command_runs_tokens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli_main.main(["tokens", "create-secret-key", "-o", str(tmp_path / "k")])
    assert stopped.value.code == 0
    assert len((tmp_path / "k").read_bytes()) == 32
    args = cli_main.build_parser().parse_args(["tokens", "show", "x.y.z"])
    assert (args.command, args.tokens_command, args.token) == ("tokens", "show", "x.y.z")


def test_tokens_imports_no_broker_module() -> None:
    script = (
        "import sys\n"
        "from stripemq.cli.main import main\n"
        "try:\n"
        "    main(['tokens', 'create-secret-key'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith(('stripemq.broker', "
        "'stripemq.bookie', 'stripemq.client'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.splitlines()[-1] == "[]"
