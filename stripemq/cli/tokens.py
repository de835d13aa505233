"""``stripemq tokens``: make keys and JWT tokens and check them, as ``pulsar tokens`` does.

Pulsar's subcommands and flags:

- ``create-secret-key [-a HS256] [-o FILE [-b]]``: a random HMAC key (32 bytes for HS256).
  With ``-o`` the raw key goes to FILE (mode 0600; base64 text with ``-b``), as Pulsar
  writes it. Without ``-o`` the key is printed as one line of base64 (``-b`` or not): Pulsar
  writes raw bytes to stdout, which a terminal mangles; the line printed here is itself a
  key option value (bare base64).
- ``create-key-pair [-a RS256] --output-private-key F --output-public-key F``: DER files as
  Pulsar writes them (PKCS#8 private, mode 0600; X.509 public).
- ``create (-sk KEY | -pk KEY) -s ROLE [-e 1d] [-a ALG] [--headers K=V ...]``: a signed
  token on stdout. ``-a`` defaults to HS256 for a secret key, RS256 or ES256 (by key type)
  for a private key.
- ``validate (-sk KEY | -pk KEY [-a ALG]) [TOKEN | -i | -f FILE]``: checks the signature and
  ``exp`` as a broker does, then prints the claims as JSON. ``-pk`` is the public key here;
  ``-a`` defaults to the public key's own kind (RS256, or ES256/384/512 by curve).
- ``show [TOKEN | -i | -f FILE]``: the header and claims, unverified, as Pulsar prints them
  (header JSON, ``---``, claims JSON).

A KEY is what a broker's ``token_secret_key`` / ``token_public_key`` take (``file:///path``,
``data:;base64,<base64>``, bare base64) or, for convenience, a plain path. ``show`` and
``validate`` read the token from ``$TOKEN`` when none is given, as Pulsar does.

Exit 0; 1 when a key or token cannot be used (unreadable, malformed, badly signed,
expired), with one line on stderr; 2 on bad arguments. Building the parser imports neither
the token library nor any broker module.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stripemq.cli.admin_formats import ArgumentFormatError

if TYPE_CHECKING:
    from stripemq.security.tokens import TokenVerifier

__all__ = ["TOKEN_ENV", "add_tokens_parser", "main", "read_key", "run_tokens"]

TOKEN_ENV = "TOKEN"  # where show and validate find the token when none is given (Pulsar's)
KEY_HELP = "file:///path, data:;base64,<base64>, base64, or a path"


def add_tokens_parser(sub: argparse._SubParsersAction) -> None:
    tokens = sub.add_parser(
        "tokens",
        help="make secret keys, key pairs and JWT tokens; validate and show tokens",
        description=__doc__.split("\n\n")[0],
        allow_abbrev=False,
    )
    commands = tokens.add_subparsers(dest="tokens_command", required=True)

    secret = _command(commands, "create-secret-key", _create_secret_key, "make a secret key")
    _algorithm_option(secret, "HS256, HS384 or HS512 (default HS256)", default="HS256")
    secret.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write the raw key to this file (mode 0600) instead of stdout",
    )
    secret.add_argument(
        "-b",
        "--base64",
        action="store_true",
        help="write the key to --output as base64 text (stdout always gets base64)",
    )

    pair = _command(commands, "create-key-pair", _create_key_pair, "make a key pair (DER files)")
    _algorithm_option(pair, "RS256/384/512, PS256/384/512, ES256/384/512", default="RS256")
    pair.add_argument(
        "--output-private-key",
        required=True,
        metavar="FILE",
        help="file for the PKCS#8 DER private key (mode 0600)",
    )
    pair.add_argument(
        "--output-public-key",
        required=True,
        metavar="FILE",
        help="file for the X.509 DER public key",
    )

    create = _command(commands, "create", _create, "make a token signed with a key")
    signing = create.add_mutually_exclusive_group(required=True)
    signing.add_argument("-sk", "--secret-key", metavar="KEY", help=f"secret key: {KEY_HELP}")
    signing.add_argument("-pk", "--private-key", metavar="KEY", help=f"private key: {KEY_HELP}")
    create.add_argument(
        "-s", "--subject", required=True, help="the role (subject, 'sub' claim) of the token"
    )
    create.add_argument(
        "-e",
        "--expiry-time",
        type=_duration,
        metavar="TIME",
        help="expire this long after now: 30s, 15m, 1h, 7d, 2w, 1y (default: never)",
    )
    _algorithm_option(create, "default HS256 for a secret key, RS256 or ES256 for a private key")
    create.add_argument(
        "--headers",
        action="append",
        type=_header,
        default=[],
        metavar="KEY=VALUE",
        help="an extra JWT header such as kid=key-1 (repeatable)",
    )

    validate = _command(
        commands, "validate", _validate, "check a token's signature and expiry; print its claims"
    )
    checking = validate.add_mutually_exclusive_group(required=True)
    checking.add_argument("-sk", "--secret-key", metavar="KEY", help=f"secret key: {KEY_HELP}")
    checking.add_argument("-pk", "--public-key", metavar="KEY", help=f"public key: {KEY_HELP}")
    _algorithm_option(
        validate, "the one accepted (default: any HS for -sk; RS256, or ES256/384/512 by curve)"
    )
    _token_options(validate)

    show = _command(commands, "show", _show, "print a token's header and claims (unverified)")
    _token_options(show)


def _command(
    commands: argparse._SubParsersAction,
    name: str,
    handler: Callable[[argparse.Namespace], None],
    about: str,
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=about, description=about[:1].upper() + about[1:] + ".", allow_abbrev=False
    )
    parser.set_defaults(tokens_handler=handler)
    return parser


def _algorithm_option(
    parser: argparse.ArgumentParser, about: str, default: str | None = None
) -> None:
    parser.add_argument(
        "-a",
        "--signature-algorithm",
        "--algorithm",
        dest="algorithm",
        default=default,
        metavar="ALG",
        help=f"signature algorithm: {about}",
    )


def _token_options(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("token", nargs="?", metavar="TOKEN", help=f"the token (or ${TOKEN_ENV})")
    source.add_argument("-i", "--stdin", action="store_true", help="read the token from stdin")
    source.add_argument("-f", "--token-file", metavar="FILE", help="read the token from a file")


def _duration(text: str) -> int:
    from stripemq.security.tokens import TokenError, parse_duration

    try:
        return parse_duration(text)
    except TokenError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _header(text: str) -> tuple[str, str]:
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise argparse.ArgumentTypeError(f"a header is KEY=VALUE, not {text!r}")
    if name == "alg":
        raise argparse.ArgumentTypeError("the alg header is set by -a/--signature-algorithm")
    return name, value


def main(argv: list[str]) -> int:
    """``stripemq tokens ...`` without building the other roles' parsers (exit code)."""
    parser = argparse.ArgumentParser(prog="stripemq")
    add_tokens_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["tokens", *argv])
    try:
        return run_tokens(args)
    except KeyboardInterrupt:  # waiting on --stdin
        return 130


def run_tokens(args: argparse.Namespace) -> int:
    """Run the parsed subcommand; its output on stdout, one line on stderr if it fails."""
    from stripemq.errors import StripeMQError

    try:
        args.tokens_handler(args)
    except ArgumentFormatError as exc:
        sys.stderr.write(f"stripemq tokens {args.tokens_command}: error: {exc}\n")
        return 2
    except StripeMQError as exc:
        sys.stderr.write(f"stripemq tokens {args.tokens_command}: {exc}\n")
        return 1
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        sys.stderr.write(f"stripemq tokens {args.tokens_command}: {where}{exc.strerror or exc}\n")
        return 1
    return 0


def read_key(spec: str) -> bytes:
    """The bytes a key option names: a broker's key setting (``file:///path``,
    ``data:;base64,...``, base64) or a plain path. Raises ``KeySpecError``."""
    from stripemq.security.tokens import KeySpecError, read_key_spec

    if spec.startswith(("file:", "data:")):
        return read_key_spec(spec)
    path = Path(spec).expanduser()
    if path.is_file():
        return read_key_spec(str(path))  # a plain path ("~" expanded)
    try:
        return read_key_spec(spec)
    except KeySpecError as exc:
        raise KeySpecError(
            f"{spec[:40]!r} is neither a key file nor base64 (a key is {KEY_HELP})"
        ) from exc


def _write_file(path: str, data: bytes, *, private: bool) -> None:
    """Write ``data`` to ``path``; a private one is made, or left, readable by its owner only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as out:
        if private:
            os.fchmod(out.fileno(), 0o600)  # an existing file keeps its mode through O_CREAT
        out.write(data)


def _create_secret_key(args: argparse.Namespace) -> None:
    import base64

    from stripemq.security.tokens import SECRET_ALGORITHMS, create_secret_key

    if args.algorithm not in SECRET_ALGORITHMS:
        raise ArgumentFormatError(
            f"a secret key is for {', '.join(SECRET_ALGORITHMS)}, not {args.algorithm}"
        )
    key = create_secret_key(args.algorithm)  # as long as its hash: 32, 48 or 64 bytes
    if args.output is None:
        print(base64.b64encode(key).decode("ascii"))
        return
    _write_file(args.output, base64.b64encode(key) if args.base64 else key, private=True)


def _create_key_pair(args: argparse.Namespace) -> None:
    from stripemq.security.tokens import PAIR_ALGORITHMS, create_key_pair

    if args.algorithm not in PAIR_ALGORITHMS:
        raise ArgumentFormatError(
            f"no key pair for {args.algorithm}; choose from {', '.join(PAIR_ALGORITHMS)}"
        )
    private, public = create_key_pair(args.algorithm)
    _write_file(args.output_private_key, private, private=True)
    _write_file(args.output_public_key, public, private=False)


def _create(args: argparse.Namespace) -> None:
    from stripemq.security.tokens import create_token

    if not args.subject:
        raise ArgumentFormatError("the subject (-s) must not be empty")
    token = create_token(
        subject=args.subject,
        secret_key=read_key(args.secret_key) if args.secret_key else None,
        private_key=read_key(args.private_key) if args.private_key else None,
        algorithm=args.algorithm,
        expires_in_s=args.expiry_time,
        headers=dict(args.headers),
    )
    print(token)


def _validate(args: argparse.Namespace) -> None:
    token = _read_token(args)
    claims = _verifier(args).verify(token)
    print(json.dumps(dict(claims.claims), sort_keys=True))


def _verifier(args: argparse.Namespace) -> TokenVerifier:
    """The verifier ``validate``'s key options name, for the one algorithm ``-a`` names."""
    import dataclasses

    from cryptography.hazmat.primitives.asymmetric import ec

    from stripemq.security.tokens import (
        PAIR_ALGORITHMS,
        SECRET_ALGORITHMS,
        KeySpecError,
        TokenVerifier,
        check_key_fits,
        default_algorithm,
        load_public_key,
    )

    algorithm: str | None = args.algorithm
    if args.secret_key is not None:
        if algorithm is not None and algorithm not in SECRET_ALGORITHMS:
            raise ArgumentFormatError(
                f"a secret key checks {', '.join(SECRET_ALGORITHMS)}, not {algorithm}"
            )
        verifier = TokenVerifier.from_secret(read_key(args.secret_key))
        return dataclasses.replace(verifier, algorithms=(algorithm,)) if algorithm else verifier
    data = read_key(args.public_key)
    key = load_public_key(data)
    if algorithm is None:
        return TokenVerifier.from_public_key(data, default_algorithm(key))
    if algorithm not in PAIR_ALGORITHMS:
        raise ArgumentFormatError(
            f"a public key checks {', '.join(PAIR_ALGORITHMS)}, not {algorithm}"
        )
    try:
        check_key_fits(key, algorithm)
    except KeySpecError:
        kind = "an EC" if isinstance(key, ec.EllipticCurvePublicKey) else "an RSA"
        raise ArgumentFormatError(f"-a {algorithm} does not fit {kind} public key") from None
    return TokenVerifier.from_public_key(data, algorithm)


def _show(args: argparse.Namespace) -> None:
    import jwt

    from stripemq.security.tokens import TokenError, unverified_claims

    token = _read_token(args)
    claims = unverified_claims(token)
    try:
        header: dict[str, Any] = jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise TokenError(f"malformed token: {exc}") from exc
    print(json.dumps(header, sort_keys=True))
    print("---")
    print(json.dumps(claims, sort_keys=True))


def _read_token(args: argparse.Namespace) -> str:
    """The token from the argument, ``--stdin``, ``--token-file`` or ``$TOKEN``."""
    from stripemq.security.tokens import TokenError

    if args.token is not None:
        text = args.token
    elif args.stdin:
        text = sys.stdin.read()
    elif args.token_file is not None:
        try:
            text = Path(args.token_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not text"
            raise TokenError(f"cannot read token file {args.token_file}: {why}") from exc
    elif os.environ.get(TOKEN_ENV):
        text = os.environ[TOKEN_ENV]
    else:
        raise ArgumentFormatError(
            f"give the token as an argument, with -i/--stdin, -f/--token-file or in ${TOKEN_ENV}"
        )
    token = text.strip()
    if not token:
        raise TokenError("the token is empty")
    return token
