"""``stripemq client produce|consume``: send and receive from the command line, like
``pulsar-client``. Output goes to stdout (a command-line tool, not library code).

Security options as pulsar-client's: ``--auth-plugin`` and ``--auth-params`` (token
authentication: ``token:<jwt>``, ``file:///path``, ``env:NAME``; see
``stripemq.client.auth``), and for a ``pulsar+ssl://`` URL ``--tls-trust-certs-file-path``,
``--tls-allow-insecure`` and ``--tls-enable-hostname-verification``. A refused token or a
missing permission is one line on stderr and exit code 2, as every other failure."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from stripemq.cli import security_options
from stripemq.cli.security_options import add_security_options
from stripemq.client import Client, CompressionType, ConsumerType, InitialPosition, Result
from stripemq.client.auth import authentication_from_params
from stripemq.errors import AuthenticationError, AuthorizationError, StripeMQError

SERVICE_URL_ENV = "STRIPEMQ_SERVICE_URL"
DEFAULT_SERVICE_URL = "pulsar://localhost:6650"

SUBSCRIPTION_TYPES = {
    "Exclusive": ConsumerType.Exclusive,
    "Shared": ConsumerType.Shared,
    "Failover": ConsumerType.Failover,
    "Key_Shared": ConsumerType.KeyShared,
}
COMPRESSION = {
    "none": CompressionType.NONE,
    "lz4": CompressionType.LZ4,
    "zlib": CompressionType.ZLib,
    "zstd": CompressionType.ZSTD,
    "snappy": CompressionType.SNAPPY,
}


def add_client_parser(sub: argparse._SubParsersAction) -> None:
    client = sub.add_parser("client", help="produce and consume messages (like pulsar-client)")
    client.add_argument(
        "--url",
        default=os.environ.get(SERVICE_URL_ENV, DEFAULT_SERVICE_URL),
        help=f"service URL (default: ${SERVICE_URL_ENV}, else {DEFAULT_SERVICE_URL})",
    )
    client.add_argument("--log-level", default="WARNING")
    add_security_options(client, url="pulsar+ssl://")
    commands = client.add_subparsers(dest="client_command", required=True)

    produce = commands.add_parser("produce", help="send messages to a topic")
    produce.add_argument("topic")
    produce.add_argument(
        "-m", "--messages", action="append", required=True, help="message body (repeatable)"
    )
    produce.add_argument(
        "-n", "--num-produce", type=int, default=1, help="send the messages this many times"
    )
    produce.add_argument("-k", "--key", help="partition key of every message")
    produce.add_argument(
        "-p", "--property", action="append", default=[], metavar="KEY=VALUE", help="repeatable"
    )
    produce.add_argument("-z", "--compression", choices=sorted(COMPRESSION), default="none")
    produce.add_argument("-b", "--batching", action="store_true", help="batch the messages")

    consume = commands.add_parser("consume", help="receive (and acknowledge) messages")
    consume.add_argument("topic")
    consume.add_argument("-s", "--subscription-name", required=True)
    consume.add_argument(
        "-t", "--subscription-type", choices=sorted(SUBSCRIPTION_TYPES), default="Exclusive"
    )
    consume.add_argument(
        "-p",
        "--subscription-position",
        choices=["Latest", "Earliest"],
        default="Latest",
        help="where a new subscription starts",
    )
    consume.add_argument(
        "-n", "--num-messages", type=int, default=1, help="how many to receive (0: forever)"
    )
    consume.add_argument(
        "--timeout", type=float, default=0, help="give up after this many seconds idle (0: never)"
    )


def client_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``Client`` arguments the security options give.

    Raises:
        InvalidConfigurationError: bad --auth-plugin or --auth-params.
    """
    params = security_options.auth_params(args.auth_params)
    return {
        "authentication": authentication_from_params(args.auth_plugin, params),
        "tls_trust_certs_file_path": security_options.tls_trust_certs(
            args.tls_trust_certs_file_path
        ),
        "tls_allow_insecure_connection": args.tls_allow_insecure,
        "tls_validate_hostname": args.tls_enable_hostname_verification,
    }


def _properties(items: list[str]) -> dict[str, str]:
    properties = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"property {item!r} is not KEY=VALUE")
        properties[key] = value
    return properties


def _produce(client: Client, args: argparse.Namespace) -> int:
    producer = client.create_producer(
        args.topic,
        compression_type=COMPRESSION[args.compression],
        batching_enabled=args.batching,
        block_if_queue_full=True,
    )
    properties = _properties(args.property)
    failures: list[Result] = []

    def sent(result: Result, _message_id: object) -> None:
        if result is not Result.Ok:
            failures.append(result)

    count = 0
    for _ in range(args.num_produce):
        for body in args.messages:
            producer.send_async(body.encode(), sent, partition_key=args.key, properties=properties)
            count += 1
    producer.flush()
    producer.close()
    if failures:
        print(f"{len(failures)} of {count} messages failed: {failures[0].name}", file=sys.stderr)
        return 1
    print(f"{count} messages produced to {args.topic}")
    return 0


def _consume(client: Client, args: argparse.Namespace) -> int:
    consumer = client.subscribe(
        args.topic,
        args.subscription_name,
        consumer_type=SUBSCRIPTION_TYPES[args.subscription_type],
        initial_position=getattr(InitialPosition, args.subscription_position),
    )
    timeout = int(args.timeout * 1000) if args.timeout > 0 else None
    received = 0
    while args.num_messages <= 0 or received < args.num_messages:
        try:
            message = consumer.receive(timeout_millis=timeout)
        except TimeoutError:
            break
        print(
            f"----- got message -----\n"
            f"id: {message.message_id()}, key: [{message.partition_key()}], "
            f"properties: {message.properties()}\n"
            f"content: {message.data().decode(errors='replace')}"
        )
        consumer.acknowledge(message)
        received += 1
    consumer.close()
    print(f"{received} messages received")
    return 0 if args.num_messages <= 0 or received == args.num_messages else 1


def run_client(args: argparse.Namespace) -> int:
    try:
        with Client(args.url, **client_options(args)) as client:
            if args.client_command == "produce":
                return _produce(client, args)
            return _consume(client, args)
    except AuthenticationError as exc:
        print(f"error: authentication failed: {exc}", file=sys.stderr)
        return 2
    except AuthorizationError as exc:
        print(f"error: not authorized: {exc}", file=sys.stderr)
        return 2
    except StripeMQError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
