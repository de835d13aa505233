"""``stripemq admin``: pulsar-admin's command tree and flags over a broker's ``/admin/v2``
REST API (``clusters``, ``tenants``, ``namespaces``, ``topics``, ``brokers``, ``schemas``).

A thin client: each command turns its arguments into one or a few requests
(``stripemq.cli.admin_http``) and prints the answer as pulsar-admin does
(``stripemq.cli.admin_output``; ``-o table`` for a table). Sizes, times and names are read
in pulsar-admin's formats (``stripemq.cli.admin_formats``) and refused before anything is
sent when malformed. The broker is ``--admin-url``, else ``STRIPEMQ_ADMIN_URL``, else
``http://127.0.0.1:8080``. A failure prints the server's reason with the method and URL
that got it, and exits 1 (2 for a malformed command line).

This module imports only the standard library and the small modules above, so a command
starts fast; output goes to stdout (a command-line tool, not library code).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stripemq.cli import security_options
from stripemq.cli.admin_formats import (
    ArgumentFormatError,
    Namespace,
    check_name,
    message_id_body,
    parse_key_values,
    parse_message_id,
    parse_relative_millis,
    parse_relative_seconds,
    parse_size,
    parse_topic,
    retention_megabytes,
    retention_minutes,
    split_list,
)
from stripemq.cli.admin_http import AdminClient, AdminError, AdminHttpError
from stripemq.cli.admin_output import (
    Text,
    decode_peek,
    format_message_id,
    render,
    render_peeked,
    render_table,
)
from stripemq.cli.security_options import add_security_options
from stripemq.clock import now_ms
from stripemq.errors import InvalidConfigurationError
from stripemq.proto.topic_name import TopicName
from stripemq.subscription_types import SUBSCRIPTION_TYPES, subscription_type_named
from stripemq.topic_limits import Limit, LimitNames

DEFAULT_ADMIN_URL = "http://127.0.0.1:8080"
ADMIN_URL_ENV = "STRIPEMQ_ADMIN_URL"
BACKLOG_QUOTA_TYPES = ("destination_storage", "message_age")
BACKLOG_QUOTA_POLICIES = (
    "producer_request_hold",
    "producer_exception",
    "consumer_backlog_eviction",
)
TOPIC_TYPES = ("partitioned", "non-partitioned")
# Pulsar's SchemaCompatibilityStrategy names (UNDEFINED: the broker's strategy applies).
SCHEMA_STRATEGIES = (
    "UNDEFINED",
    "ALWAYS_INCOMPATIBLE",
    "ALWAYS_COMPATIBLE",
    "BACKWARD",
    "FORWARD",
    "FULL",
    "BACKWARD_TRANSITIVE",
    "FORWARD_TRANSITIVE",
    "FULL_TRANSITIVE",
)

NOTHING = object()  # a command that prints nothing when it succeeds (every write)

Handler = Callable[[argparse.Namespace, AdminClient], Any]


# --- the command tree ---------------------------------------------------------------------


def add_admin_parser(sub: argparse._SubParsersAction) -> None:
    """``stripemq admin ...`` under the ``stripemq`` command."""
    admin = sub.add_parser(
        "admin",
        help="administer tenants, namespaces, topics (pulsar-admin's commands, over HTTP)",
        description=__doc__.split("\n\n")[0],
        allow_abbrev=False,
    )
    populate_admin_parser(admin)


def build_admin_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser of ``stripemq admin`` on its own (what ``stripemq admin`` runs). With
    ``argv``, only the commands of the group it names are built (a faster start); the
    other groups are listed without their commands."""
    parser = argparse.ArgumentParser(
        prog="stripemq admin", description=__doc__.split("\n\n")[0], allow_abbrev=False
    )
    named = next((word for word in argv or () if word in GROUPS), None)
    populate_admin_parser(parser, only=named)
    return parser


def populate_admin_parser(parser: argparse.ArgumentParser, only: str | None = None) -> None:
    """Add the connection options and the groups (with ``only``: that group's commands
    only)."""
    _add_connection_options(parser, suppress=False)
    groups = parser.add_subparsers(dest="admin_group", required=True, metavar="GROUP")
    for name, (about, add_commands) in GROUPS.items():
        group = groups.add_parser(name, help=about, description=about, allow_abbrev=False)
        commands = group.add_subparsers(dest="admin_command", required=True, metavar="COMMAND")
        if only is None or only == name:
            add_commands(commands)


def _add_connection_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """``--admin-url``, ``-o``, ``--request-timeout`` and pulsar-admin's authentication and
    TLS options: before the group, or (with ``suppress``, so an option given earlier is not
    reset) after the command."""

    def default(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    parser.add_argument(
        "--admin-url",
        dest="admin_url",
        default=default(None),
        help=f"the broker's web service URL (default: ${ADMIN_URL_ENV}, else {DEFAULT_ADMIN_URL})",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("json", "table"),
        default=default("json"),
        help="json: as pulsar-admin prints (objects as pretty JSON, lists one per line); "
        "table: a table",
    )
    parser.add_argument(
        "--request-timeout",
        type=float,
        default=default(60.0),
        metavar="SECONDS",
        help="give up on a request after this long (default 60)",
    )
    add_security_options(parser, url="an https:// admin URL", default=default)


def _command(
    commands: Any,
    name: str,
    about: str,
    handler: Handler,
    *,
    label: str = "value",
    aliases: tuple[str, ...] = (),
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=about, description=about, allow_abbrev=False, aliases=list(aliases)
    )
    _add_connection_options(parser, suppress=True)
    parser.set_defaults(handler=handler, label=label)
    return parser


def _namespace_command(commands: Any, name: str, about: str, handler: Handler, **kw: Any) -> Any:
    parser = _command(commands, name, about, handler, **kw)
    parser.add_argument("namespace", metavar="tenant/namespace")
    return parser


def _topic_command(commands: Any, name: str, about: str, handler: Handler, **kw: Any) -> Any:
    parser = _command(commands, name, about, handler, **kw)
    parser.add_argument("topic", metavar="persistent://tenant/namespace/topic")
    return parser


def _add_clusters(commands: Any) -> None:
    listing = _command(
        commands, "list", "List the existing clusters", _clusters_list, label="cluster"
    )
    listing.add_argument(
        "-c", "--current", action="store_true", help="mark the current cluster with (*)"
    )
    _command(
        commands, "get", "Get the configuration data for a cluster", _clusters_get
    ).add_argument("cluster", metavar="cluster-name")
    for name, about, handler in (
        ("create", "Provision a new cluster", _clusters_create),
        ("update", "Update the configuration of a cluster", _clusters_update),
    ):
        parser = _command(commands, name, about, handler)
        parser.add_argument("cluster", metavar="cluster-name")
        parser.add_argument("--url", dest="service_url", help="service-url (http://...)")
        parser.add_argument("--url-secure", dest="service_url_tls", help="service-url for TLS")
        parser.add_argument("--broker-url", dest="broker_url", help="broker-service-url")
        parser.add_argument(
            "--broker-url-secure", dest="broker_url_tls", help="broker-service-url for TLS"
        )
    delete = _command(commands, "delete", "Delete an existing cluster", _clusters_delete)
    delete.add_argument("cluster", metavar="cluster-name")
    delete.add_argument(
        "-a", "--all", action="store_true", help="delete all data (tenants) of the cluster too"
    )


def _add_tenants(commands: Any) -> None:
    _command(commands, "list", "List the existing tenants", _tenants_list, label="tenant")
    _command(commands, "get", "Get the configuration of a tenant", _tenants_get).add_argument(
        "tenant", metavar="tenant-name"
    )
    for name, about, handler in (
        ("create", "Create a new tenant", _tenants_create),
        ("update", "Update the configuration of a tenant", _tenants_update),
    ):
        parser = _command(commands, name, about, handler)
        parser.add_argument("tenant", metavar="tenant-name")
        parser.add_argument(
            "-r",
            "--admin-roles",
            action="append",
            help="comma separated roles allowed to administer the tenant",
        )
        parser.add_argument(
            "-c",
            "--allowed-clusters",
            action="append",
            help="comma separated clusters the tenant may use (create: default all clusters; "
            "update: default unchanged)",
        )
    delete = _command(commands, "delete", "Delete an existing tenant", _tenants_delete)
    delete.add_argument("tenant", metavar="tenant-name")
    delete.add_argument(
        "-f", "--force", action="store_true", help="delete its namespaces and topics too"
    )


def _add_namespaces(commands: Any) -> None:
    _command(
        commands, "list", "List the namespaces of a tenant", _namespaces_list, label="namespace"
    ).add_argument("tenant", metavar="tenant-name")
    _system_topics_option(
        _namespace_command(
            commands, "topics", "List the topics of a namespace", _namespaces_topics, label="topic"
        )
    )
    _namespace_command(
        commands, "policies", "Get the configuration policies of a namespace", _namespaces_policies
    )
    create = _namespace_command(commands, "create", "Create a new namespace", _namespaces_create)
    create.add_argument(
        "-c", "--clusters", action="append", help="clusters this namespace is assigned to"
    )
    create.add_argument("-b", "--bundles", type=int, default=0, help="number of bundles")
    delete = _namespace_command(commands, "delete", "Delete a namespace", _namespaces_delete)
    delete.add_argument(
        "-f", "--force", action="store_true", help="delete the topics of the namespace too"
    )
    _namespace_command(
        commands, "permissions", "Get the permissions on a namespace", _ns_permissions
    )
    grant = _namespace_command(
        commands,
        "grant-permission",
        "Grant permissions on a namespace to a role",
        _ns_grant_permission,
    )
    grant.add_argument("--role", required=True, help="client role to which to grant permissions")
    grant.add_argument(
        "--actions",
        action="append",
        required=True,
        help="actions to grant, comma-separated: produce, consume (also functions, sources, "
        "sinks, packages)",
    )
    _namespace_command(
        commands,
        "revoke-permission",
        "Revoke the permissions of a role on a namespace",
        _ns_revoke_permission,
    ).add_argument("--role", required=True, help="client role whose permissions to revoke")

    _add_policy_commands(commands, NAMESPACE_LEVEL)

    max_topics = _namespace_command(
        commands,
        "set-max-topics-per-namespace",
        "Set the maximum of topics (partitions counting) of a namespace",
        _ns_set_limit,
    )
    max_topics.add_argument(
        "-t",
        "--max-topics-per-namespace",
        dest="limit",
        type=int,
        required=True,
        help="0: no limit",
    )
    max_topics.set_defaults(endpoint="maxTopicsPerNamespace")
    _policy_get_remove(
        commands,
        "max-topics-per-namespace",
        "maxTopicsPerNamespace",
        "the maximum of topics",
    )

    encryption = _namespace_command(
        commands,
        "set-encryption-required",
        "Require (or not) producers to encrypt the messages of a namespace",
        _ns_set_flag,
    )
    encryption.set_defaults(endpoint="encryptionRequired")
    _enable_disable(encryption, "encryption required")
    _policy_get_remove(
        commands,
        "encryption-required",
        "encryptionRequired",
        "whether encryption is required",
        remove=False,
    )

    expiration = _namespace_command(
        commands,
        "set-subscription-expiration-time",
        "Set the subscription expiration time of a namespace",
        _ns_set_subscription_expiration,
    )
    expiration.add_argument(
        "-t",
        "--time",
        type=int,
        required=True,
        help="minutes without a consumer before a subscription is deleted; 0 never",
    )
    _policy_get_remove(
        commands,
        "subscription-expiration-time",
        "subscriptionExpirationTime",
        "the subscription expiration time",
    )

    auto_update = _namespace_command(
        commands,
        "set-is-allow-auto-update-schema",
        "Allow or forbid producers to register new schemas in a namespace",
        _ns_set_flag,
    )
    auto_update.set_defaults(endpoint="isAllowAutoUpdateSchema")
    _enable_disable(auto_update, "schema auto-update")
    _namespace_command(
        commands,
        "get-is-allow-auto-update-schema",
        "Get whether producers may register new schemas in a namespace",
        _ns_get_policy,
    ).set_defaults(endpoint="isAllowAutoUpdateSchema")
    enforce = _namespace_command(
        commands,
        "set-schema-validation-enforce",
        "Refuse (or not) producers without a schema on topics that have one",
        _ns_set_flag,
    )
    enforce.set_defaults(endpoint="schemaValidationEnforced")
    _enable_disable(enforce, "schema validation enforcement")
    get_enforce = _namespace_command(
        commands,
        "get-schema-validation-enforce",
        "Get whether producers without a schema are refused on topics that have one",
        _ns_get_policy,
    )
    get_enforce.set_defaults(endpoint="schemaValidationEnforced")
    _applied_option(get_enforce, NAMESPACE_APPLIES)

    auto = _namespace_command(
        commands,
        "set-auto-topic-creation",
        "Enable or disable auto topic creation for a namespace, overriding broker settings",
        _ns_set_auto_topic_creation,
    )
    _enable_disable(auto, "auto topic creation")
    auto.add_argument(
        "-t",
        "--type",
        dest="topic_type",
        default="non-partitioned",
        help="type of the topics made: partitioned, non-partitioned (default)",
    )
    auto.add_argument(
        "-n",
        "--num-partitions",
        type=int,
        help="number of partitions of the topics made, for partitioned topics",
    )
    _policy_get_remove(
        commands, "auto-topic-creation", "autoTopicCreation", "the auto topic creation override"
    )

    unload = _namespace_command(
        commands, "unload", "Unload a namespace from the brokers serving it", _ns_unload
    )
    unload.add_argument("-b", "--bundle", help="{start-boundary}_{end-boundary}")
    clear = _namespace_command(
        commands, "clear-backlog", "Clear the backlog of a namespace", _ns_clear_backlog
    )
    clear.add_argument("-s", "--sub", dest="subscription", help="only this subscription")
    clear.add_argument("-b", "--bundle", help="{start-boundary}_{end-boundary}")
    clear.add_argument(
        "-force", "--force", dest="force", action="store_true", help="do not ask for confirmation"
    )
    unsubscribe = _namespace_command(
        commands,
        "unsubscribe",
        "Delete a subscription from every topic of a namespace",
        _ns_unsubscribe,
    )
    unsubscribe.add_argument("-s", "--sub", dest="subscription", required=True)
    unsubscribe.add_argument("-b", "--bundle", help="{start-boundary}_{end-boundary}")


@dataclass(frozen=True)
class PolicyLevel:
    """Where the policy commands of a group act (pulsar-admin's namespaces or
    topicPolicies), and the few flags and names that differ between the two."""

    make: Callable[..., argparse.ArgumentParser]  # the command, with its positional
    of: str  # "of a namespace", "of a topic"
    every: str  # what a rate limits: "of every topic of a namespace", "of a topic"
    ttl_flags: tuple[str, str]
    strategy_flags: tuple[str, str]
    deduplication: str  # its endpoint
    quota_getter: str  # get-backlog-quotas, get-backlog-quota
    applied: bool  # the get- commands take -ap
    # The limits' commands (the first, then aliases), option and REST path at this level
    # (``topic_limits``).
    limit_cli: Callable[[LimitNames], tuple[tuple[str, ...], tuple[str, str], str]]


def _policy_get_remove(
    commands: Any,
    name: str,
    endpoint: str,
    about: str,
    level: PolicyLevel | None = None,
    *,
    of: str | None = None,
    remove: bool = True,
    aliases: tuple[str, ...] = (),
) -> None:
    """``get-<name>`` and ``remove-<name>`` of a policy at ``/<endpoint>`` (and the same
    under each of ``aliases``)."""
    level = level or NAMESPACE_LEVEL
    of = of or level.of
    get = level.make(
        commands,
        f"get-{name}",
        f"Get {about} {of}",
        _ns_get_policy,
        aliases=tuple(f"get-{alias}" for alias in aliases),
    )
    get.set_defaults(endpoint=endpoint)
    if level.applied:
        _applied_option(get)
    if remove:
        dropped = level.make(
            commands,
            f"remove-{name}",
            f"Remove {about} {of}",
            _ns_remove_policy,
            aliases=tuple(f"remove-{alias}" for alias in aliases),
        )
        dropped.set_defaults(endpoint=endpoint)


TOPIC_APPLIES = "the topic's, else its namespace's, else the broker's"
NAMESPACE_APPLIES = "the namespace's, else the broker's"


def _applied_option(parser: argparse.ArgumentParser, whence: str = TOPIC_APPLIES) -> None:
    parser.add_argument("-ap", "--applied", action="store_true", help=f"what applies: {whence}")


def _add_policy_commands(commands: Any, level: PolicyLevel) -> None:
    """The policies namespaces and topics both have, with pulsar-admin's commands."""
    make, of = level.make, level.of
    retention = make(commands, "set-retention", f"Set the retention policy {of}", _ns_set_retention)
    retention.add_argument(
        "-t",
        "--time",
        required=True,
        help="retention time: seconds, or with a unit (100m, 3h, 2d, 5w); 0 none, -1 infinite",
    )
    retention.add_argument(
        "-s",
        "--size",
        required=True,
        help="retention size: bytes, or with a unit (10M, 16G, 3T); 0 none, -1 infinite",
    )
    _policy_get_remove(commands, "retention", "retention", "the retention policy", level)

    ttl = make(commands, "set-message-ttl", f"Set the message TTL {of}", _ns_set_message_ttl)
    ttl.add_argument(
        *level.ttl_flags,
        dest="message_ttl",
        required=True,
        help="message TTL: seconds, or with a unit (100m, 3h, 2d, 5w); 0 disables TTL",
    )
    _policy_get_remove(commands, "message-ttl", "messageTTL", "the message TTL", level)

    quota = make(commands, "set-backlog-quota", f"Set a backlog quota {of}", _ns_set_backlog_quota)
    quota.add_argument("-l", "--limit", help="size limit (10M, 16G), for destination_storage")
    quota.add_argument(
        "-lt",
        "--limitTime",
        dest="limit_time",
        help="time limit: seconds, or with a unit (100m, 3h, 2d, 5w), for message_age",
    )
    quota.add_argument(
        "-p",
        "--policy",
        required=True,
        help=f"what to do when the limit is reached: {', '.join(BACKLOG_QUOTA_POLICIES)}",
    )
    quota.add_argument(
        "-t",
        "--type",
        dest="quota_type",
        default="destination_storage",
        help=f"backlog quota type: {', '.join(BACKLOG_QUOTA_TYPES)} (default destination_storage)",
    )
    others = ("get-backlog-quota",) if level.quota_getter == "get-backlog-quotas" else ()
    quotas = make(
        commands,
        level.quota_getter,
        f"Get the backlog quota policies {of}",
        _ns_get_backlog_quotas,
        aliases=others,
    )
    if level.applied:
        _applied_option(quotas)
    remove_quota = make(
        commands,
        "remove-backlog-quota",
        f"Remove a backlog quota policy {of}",
        _ns_remove_backlog_quota,
    )
    remove_quota.add_argument(
        "-t", "--type", dest="quota_type", default="destination_storage", help="backlog quota type"
    )

    for limit in Limit:
        (command, *aliases), flags, path = level.limit_cli(limit.names)
        about = command.replace("-", " ").replace("max ", "the maximum of ")
        limited = make(
            commands,
            f"set-{command}",
            f"Set {about} {of}",
            _ns_set_limit,
            aliases=tuple(f"set-{alias}" for alias in aliases),
        )
        limited.add_argument(*flags, dest="limit", type=int, required=True, help="0: no limit")
        limited.set_defaults(endpoint=path)
        _policy_get_remove(commands, command, path, about, level, aliases=tuple(aliases))

    threshold = make(
        commands,
        "set-compaction-threshold",
        f"Set the compaction threshold {of}",
        _ns_set_compaction_threshold,
    )
    threshold.add_argument(
        "-t",
        "--threshold",
        required=True,
        help="uncompacted backlog before compaction runs (eg: 10M, 16G, 3T); "
        "0 disables automatic compaction",
    )
    _policy_get_remove(
        commands, "compaction-threshold", "compactionThreshold", "the compaction threshold", level
    )

    persistence = make(
        commands,
        "set-persistence",
        f"Set the persistence policies {of}: how its ledgers are replicated",
        _ns_set_persistence,
    )
    for flags, dest, about in (
        (("-e", "--bookkeeper-ensemble"), "ensemble", "bookies each ledger is striped over"),
        (("-w", "--bookkeeper-write-quorum"), "write_quorum", "bookies each entry is written to"),
        (("-a", "--bookkeeper-ack-quorum"), "ack_quorum", "bookies that must confirm an entry"),
    ):
        persistence.add_argument(*flags, dest=dest, type=int, default=2, help=f"{about} (2)")
    persistence.add_argument(
        "-r",
        "--ml-mark-delete-max-rate",
        dest="mark_delete_rate",
        type=float,
        default=0.0,
        help="times a second a cursor persists its position, at most (0: no throttle)",
    )
    _policy_get_remove(commands, "persistence", "persistence", "the persistence policies", level)

    inactive = make(
        commands,
        "set-inactive-topic-policies",
        f"Set the inactive topic policies {of}",
        _ns_set_inactive_topic_policies,
    )
    inactive.add_argument(
        "-e",
        "--enable-delete-while-inactive",
        dest="enable",
        action="store_true",
        help="delete the topic once inactive",
    )
    inactive.add_argument(
        "-d",
        "--disable-delete-while-inactive",
        dest="disable",
        action="store_true",
        help="never delete it for inactivity",
    )
    inactive.add_argument(
        "-t",
        "--max-inactive-duration",
        required=True,
        help="how long it stays inactive before it is deleted (1s, 10m, 5h, 3d)",
    )
    inactive.add_argument(
        "-m",
        "--delete-mode",
        required=True,
        help="delete_when_no_subscriptions or delete_when_subscriptions_caught_up",
    )
    _policy_get_remove(
        commands,
        "inactive-topic-policies",
        "inactiveTopicPolicies",
        "the inactive topic policies",
        level,
    )

    types = make(
        commands,
        "set-subscription-types-enabled",
        f"Set the subscription types consumers may use {of}",
        _ns_set_subscription_types,
    )
    types.add_argument(
        "-t",
        "--types",
        required=True,
        help="comma-separated: " + ", ".join(SUBSCRIPTION_TYPES),
    )
    _policy_get_remove(
        commands,
        "subscription-types-enabled",
        "subscriptionTypesEnabled",
        "the subscription types enabled",
        level,
    )

    delayed = make(
        commands,
        "set-delayed-delivery",
        f"Set the delayed delivery policy {of}",
        _ns_set_delayed_delivery,
    )
    _enable_disable(delayed, "delayed delivery")
    delayed.add_argument(
        "-t",
        "--time",
        default="1s",
        help="tick time: how often due messages are released (1s, 10s, 1m; default 1s)",
    )
    delayed.add_argument(
        "-md",
        "--maxDelay",
        dest="max_delay",
        default="0",
        help="the longest delay a producer may ask for (10m, 3h, 2d; 0: any)",
    )
    _policy_get_remove(
        commands, "delayed-delivery", "delayedDelivery", "the delayed delivery policy", level
    )

    dedup = make(
        commands, "set-deduplication", f"Enable or disable deduplication {of}", _ns_set_flag
    )
    dedup.set_defaults(endpoint=level.deduplication)
    _enable_disable(dedup, "deduplication")
    _policy_get_remove(commands, "deduplication", level.deduplication, "deduplication", level)

    every = level.every
    publish = make(
        commands, "set-publish-rate", f"Set the publish rate {every}", _ns_set_publish_rate
    )
    publish.add_argument(
        "-m", "--msg-publish-rate", type=int, default=-1, help="messages a second (-1: no limit)"
    )
    publish.add_argument(
        "-b", "--byte-publish-rate", type=int, default=-1, help="bytes a second (-1: no limit)"
    )
    _policy_get_remove(commands, "publish-rate", "publishRate", "the publish rate", level, of=every)

    for name, endpoint, about, where in (
        ("dispatch-rate", "dispatchRate", "the message dispatch rate", every),
        (
            "subscription-dispatch-rate",
            "subscriptionDispatchRate",
            "the message dispatch rate of every subscription",
            of,
        ),
    ):
        rate = make(commands, f"set-{name}", f"Set {about} {where}", _ns_set_dispatch_rate)
        rate.set_defaults(endpoint=endpoint)
        rate.add_argument(
            "-md", "--msg-dispatch-rate", type=int, default=-1, help="messages per period (-1)"
        )
        rate.add_argument(
            "-bd", "--byte-dispatch-rate", type=int, default=-1, help="bytes per period (-1)"
        )
        rate.add_argument(
            "-dt",
            "--dispatch-rate-period",
            type=int,
            default=1,
            help="the period in seconds (default 1)",
        )
        rate.add_argument(
            "-rp",
            "--relative-to-publish-rate",
            action="store_true",
            help="throttle to the publish rate plus this rate",
        )
        _policy_get_remove(commands, name, endpoint, about, level, of=where)

    strategy = make(
        commands,
        "set-schema-compatibility-strategy",
        f"Set the schema compatibility strategy {of}",
        _ns_set_schema_strategy,
    )
    strategy.add_argument(
        *level.strategy_flags,
        dest="compatibility",
        required=True,
        help="strategy: " + ", ".join(SCHEMA_STRATEGIES),
    )
    _policy_get_remove(
        commands,
        "schema-compatibility-strategy",
        "schemaCompatibilityStrategy",
        "the schema compatibility strategy",
        level,
        remove=level is not NAMESPACE_LEVEL,  # pulsar-admin has no namespace command for it
    )


def _topic_policy_command(commands: Any, name: str, about: str, handler: Handler, **kw: Any) -> Any:
    parser = _topic_command(commands, name, about, handler, **kw)
    parser.add_argument(
        "-g", "--global", dest="is_global", action="store_true", help=argparse.SUPPRESS
    )
    return parser


NAMESPACE_LEVEL = PolicyLevel(
    make=_namespace_command,
    of="of a namespace",
    every="of every topic of a namespace",
    ttl_flags=("-ttl", "--messageTTL"),
    strategy_flags=("-c", "--compatibility"),
    deduplication="deduplication",
    quota_getter="get-backlog-quotas",
    applied=False,
    limit_cli=lambda n: ((n.namespace_command,), n.namespace_flag, n.namespace_path),
)
TOPIC_LEVEL = PolicyLevel(
    make=_topic_policy_command,
    of="of a topic",
    every="of a topic",
    ttl_flags=("-t", "--ttl"),
    strategy_flags=("-s", "--strategy"),
    deduplication="deduplicationEnabled",
    quota_getter="get-backlog-quota",
    applied=True,
    limit_cli=lambda n: ((n.topic_command,), n.topic_flag, n.topic_path),
)
# pulsar-admin topics' topic-level commands (older than topicPolicies, still there): the
# same policies, some under names of their own.
TOPICS_LEVEL = dataclasses.replace(
    TOPIC_LEVEL,
    make=_topic_command,
    quota_getter="get-backlog-quotas",
    limit_cli=lambda n: (*n.topics_cli, n.topic_path),
)


def _add_topic_policies(commands: Any) -> None:
    _add_policy_commands(commands, TOPIC_LEVEL)


def _enable_disable(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("-e", "--enable", action="store_true", help=f"enable {what}")
    parser.add_argument("-d", "--disable", action="store_true", help=f"disable {what}")


def _add_topics(commands: Any) -> None:
    _add_policy_commands(commands, TOPICS_LEVEL)
    listing = _command(
        commands, "list", "List the topics of a namespace", _topics_list, label="topic"
    )
    listing.add_argument("namespace", metavar="tenant/namespace")
    listing.add_argument(
        "-td",
        "--topic-domain",
        choices=("persistent", "non_persistent"),
        default="persistent",
        help="topic domain (stripemq serves persistent topics)",
    )
    _system_topics_option(listing)
    partitioned_listing = _command(
        commands,
        "list-partitioned-topics",
        "List the partitioned topics of a namespace",
        _topics_list_partitioned,
        label="topic",
    )
    partitioned_listing.add_argument("namespace", metavar="tenant/namespace")
    _system_topics_option(partitioned_listing)
    create = _topic_command(commands, "create", "Create a non-partitioned topic", _topics_create)
    create.add_argument("-m", "--metadata", action="append", help="key=value properties (a=a,b=b)")
    partitioned = _topic_command(
        commands,
        "create-partitioned-topic",
        "Create a partitioned topic",
        _topics_create_partitioned,
    )
    partitioned.add_argument(
        "-p", "--partitions", type=int, required=True, help="number of partitions"
    )
    partitioned.add_argument(
        "-m", "--metadata", action="append", help="key=value properties (a=a,b=b)"
    )
    update = _topic_command(
        commands,
        "update-partitioned-topic",
        "Update a partitioned topic (the partition count can only grow)",
        _topics_update_partitioned,
    )
    update.add_argument("-p", "--partitions", type=int, required=True, help="number of partitions")
    update.add_argument(
        "-ulo", "--update-local-only", action="store_true", help="in the local cluster only"
    )
    update.add_argument(
        "-f", "--force", action="store_true", help="without validating the existing topic"
    )
    _topic_command(
        commands,
        "get-partitioned-topic-metadata",
        "Get the partitioned topic metadata (0 partitions for a non-partitioned topic)",
        _topics_partitioned_metadata,
    )
    delete = _topic_command(commands, "delete", "Delete a topic", _topics_delete)
    delete.add_argument(
        "-f", "--force", action="store_true", help="close producers and consumers first"
    )
    delete.add_argument("-d", "--deleteSchema", action="store_true", help=argparse.SUPPRESS)
    delete_partitioned = _topic_command(
        commands,
        "delete-partitioned-topic",
        "Delete a partitioned topic and its partitions",
        _topics_delete_partitioned,
    )
    delete_partitioned.add_argument(
        "-f", "--force", action="store_true", help="close producers and consumers first"
    )
    delete_partitioned.add_argument(
        "-d", "--deleteSchema", action="store_true", help=argparse.SUPPRESS
    )
    stats = _topic_command(commands, "stats", "Get the stats of a topic", _topics_stats)
    _stats_options(stats)
    internal = _topic_command(
        commands, "stats-internal", "Get the internal stats of a topic", _topics_stats_internal
    )
    internal.add_argument("-m", "--metadata", action="store_true", help="include ledger metadata")
    partitioned_stats = _topic_command(
        commands,
        "partitioned-stats",
        "Get the stats of a partitioned topic",
        _topics_partitioned_stats,
    )
    partitioned_stats.add_argument(
        "--per-partition", action="store_true", help="include each partition's stats"
    )
    _stats_options(partitioned_stats)
    _topic_command(
        commands,
        "partitioned-stats-internal",
        "Get the internal stats of a partitioned topic",
        _topics_partitioned_stats_internal,
    )
    _topic_command(
        commands,
        "subscriptions",
        "List the subscriptions of a topic",
        _topics_subscriptions,
        label="subscription",
    )
    create_sub = _topic_command(
        commands, "create-subscription", "Create a subscription on a topic", _topics_create_sub
    )
    create_sub.add_argument("-s", "--subscription", required=True)
    create_sub.add_argument(
        "-m",
        "--messageId",
        dest="message_id",
        default="latest",
        help="where the subscription starts: latest (default), earliest or ledgerId:entryId",
    )
    create_sub.add_argument("-r", "--replicated", action="store_true")
    create_sub.add_argument(
        "-p", "--property", action="append", help="key=value properties (-p a=b -p c=d)"
    )
    unsubscribe = _topic_command(
        commands, "unsubscribe", "Delete a subscription from a topic", _topics_unsubscribe
    )
    unsubscribe.add_argument("-s", "--subscription", required=True)
    unsubscribe.add_argument(
        "-f", "--force", action="store_true", help="disconnect its consumers first"
    )
    clear = _topic_command(
        commands, "clear-backlog", "Skip all the messages of a subscription", _topics_clear_backlog
    )
    clear.add_argument("-s", "--subscription", required=True)
    skip = _topic_command(commands, "skip", "Skip some messages of a subscription", _topics_skip)
    skip.add_argument("-s", "--subscription", required=True)
    skip.add_argument("-n", "--count", type=int, required=True, help="messages to skip")
    expire = _topic_command(
        commands,
        "expire-messages",
        "Expire the messages of a subscription older than a time (or before a position)",
        _topics_expire,
    )
    expire.add_argument("-s", "--subscription", required=True)
    expire.add_argument(
        "-t",
        "--expireTime",
        dest="expire_time",
        help="expire messages older than this: seconds, or with a unit (100m, 3h, 2d, 5w)",
    )
    expire.add_argument(
        "-p", "--position", help="expire messages before this position (ledgerId:entryId)"
    )
    expire.add_argument(
        "-e", "--exclude-reset-position", action="store_true", help="exclude the position itself"
    )
    expire_all = _topic_command(
        commands,
        "expire-messages-all-subscriptions",
        "Expire the messages of every subscription older than a time",
        _topics_expire_all,
    )
    expire_all.add_argument("-t", "--expireTime", dest="expire_time", required=True)
    reset = _topic_command(
        commands,
        "reset-cursor",
        "Reset a subscription to a time or to a message id",
        _topics_reset_cursor,
    )
    reset.add_argument("-s", "--subscription", required=True)
    reset.add_argument(
        "-t",
        "--time",
        help="go back this far: seconds, or with a unit (100m, 3h, 2d, 5w)",
    )
    reset.add_argument(
        "-m",
        "--messageId",
        dest="message_id",
        help="message id to reset to: earliest, latest or ledgerId:entryId",
    )
    reset.add_argument(
        "-e", "--exclude-reset-position", action="store_true", help="start after the message"
    )
    peek = _topic_command(
        commands, "peek-messages", "Peek some messages of a subscription", _topics_peek
    )
    peek.add_argument("-s", "--subscription", required=True)
    peek.add_argument("-n", "--count", type=int, default=1, help="number of messages (default 1)")
    examine = _topic_command(
        commands,
        "examine-message",
        "Examine a message counted from the earliest or the latest end of a topic",
        _topics_examine,
    )
    examine.add_argument(
        "-i",
        "--initialPosition",
        dest="initial_position",
        choices=("earliest", "latest"),
        default="latest",
        help="the end to count from (default latest)",
    )
    examine.add_argument(
        "-m",
        "--messagePosition",
        dest="message_position",
        type=int,
        default=1,
        help="which message from that end, 1 being the first (default 1)",
    )
    by_id = _topic_command(
        commands, "get-message-by-id", "Get a message by its ledger and entry id", _topics_by_id
    )
    by_id.add_argument("-l", "--ledgerId", dest="ledger_id", type=int, required=True)
    by_id.add_argument("-e", "--entryId", dest="entry_id", type=int, required=True)
    _topic_command(
        commands, "last-message-id", "Get the last message id of a topic", _topics_last_message_id
    )
    _topic_command(commands, "unload", "Unload a topic", _topics_unload)
    _topic_command(
        commands,
        "terminate",
        "Terminate a topic: no more messages can be published",
        _topics_terminate,
    )
    _topic_command(commands, "lookup", "Look up the broker serving a topic", _topics_lookup)
    _topic_command(commands, "compact", "Run compaction on the specified topic", _topics_compact)
    _topic_command(
        commands,
        "compaction-status",
        "Status of compaction on a topic",
        _topics_compaction_status,
    ).add_argument(
        "-w",
        "--wait-complete",
        dest="wait_complete",
        action="store_true",
        help="wait for compaction to complete",
    )
    _add_topic_schema_validation(commands)


def _system_topics_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-ist", "--include-system-topic", action="store_true", help="include system topics"
    )


def _system_topics_query(args: argparse.Namespace) -> dict[str, object] | None:
    return {"includeSystemTopic": True} if args.include_system_topic else None


def _stats_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-gpb", "--get-precise-backlog", action="store_true", help="count the backlog exactly"
    )
    parser.add_argument(
        "-sbs",
        "--get-subscription-backlog-size",
        action="store_true",
        help="include each subscription's backlog size (the default)",
    )
    parser.add_argument(
        "-etb",
        "--get-earliest-time-in-backlog",
        action="store_true",
        help="include the publish time of the earliest message in the backlog",
    )


# The brokers commands that print one GET's answer: (command, help, path).
_BROKER_READS = (
    (
        "get-runtime-config",
        "Get the broker's settings as it runs",
        "/admin/v2/brokers/configuration/runtime",
    ),
    (
        "get-internal-config",
        "Get where the metadata lives",
        "/admin/v2/brokers/internal-configuration",
    ),
    (
        "list-dynamic-config",
        "List the settings that can be changed while the broker runs",
        "/admin/v2/brokers/configuration",
    ),
    (
        "get-all-dynamic-config",
        "Get the values given to dynamic settings",
        "/admin/v2/brokers/configuration/values",
    ),
)


def _add_topic_schema_validation(commands: Any) -> None:
    """pulsar-admin's only commands for a topic's schemaValidationEnforced (under topics)."""
    enforce = _topic_command(
        commands,
        "set-schema-validation-enforce",
        "Refuse (or not) producers without a schema on a topic with one",
        _topic_set_schema_validation_enforce,
    )
    enforce.add_argument("-e", "--enable", action="store_true", help="enforce (else: do not)")
    get = _topic_command(
        commands,
        "get-schema-validation-enforce",
        "Get whether producers without a schema are refused on a topic",
        _ns_get_policy,
    )
    get.set_defaults(endpoint="schemaValidationEnforced")
    _applied_option(get)


def _add_brokers(commands: Any) -> None:
    listing = _command(
        commands, "list", "List the active brokers of the cluster", _brokers_list, label="broker"
    )
    listing.add_argument("cluster", nargs="?", metavar="cluster-name")
    _command(commands, "leader-broker", "Get the information of the leader broker", _brokers_leader)
    health = _command(
        commands, "healthcheck", "Run a health check against the broker", _brokers_healthcheck
    )
    health.add_argument("-tv", "--topic-version", help="topic version (V1 or V2)")
    _command(commands, "version", "Get the version of the broker", _brokers_version)
    for name, about, path in _BROKER_READS:
        _command(commands, name, about, _brokers_get).set_defaults(path=path)
    _command(
        commands,
        "backlog-quota-check",
        "Check the backlog quotas of the broker's topics now",
        _brokers_backlog_quota_check,
    )
    update = _command(
        commands, "update-dynamic-config", "Change a dynamic setting", _brokers_update_config
    )
    update.add_argument("-c", "--config", required=True, help="the setting's name")
    update.add_argument("-v", "--value", required=True, help="its new value")
    delete = _command(
        commands, "delete-dynamic-config", "Remove a dynamic setting", _brokers_delete_config
    )
    delete.add_argument("-c", "--config", required=True, help="the setting's name")


def _add_schemas(commands: Any) -> None:
    get = _topic_command(commands, "get", "Get the schema of a topic", _schemas_get)
    get.add_argument("-v", "--version", type=int, help="the schema version to get")
    get.add_argument("-a", "--all-version", action="store_true", help="every version of the schema")
    upload = _topic_command(commands, "upload", "Upload a schema for a topic", _schemas_upload)
    upload.add_argument(
        "-f",
        "--filename",
        required=True,
        help='a JSON file: {"type": "AVRO", "schema": "<definition>", "properties": {}}',
    )
    delete = _topic_command(commands, "delete", "Delete the schema of a topic", _schemas_delete)
    delete.add_argument(
        "-f", "--force", action="store_true", help="delete every version (numbering restarts)"
    )
    compatibility = _topic_command(
        commands,
        "compatibility",
        "Test whether a schema is compatible with a topic's",
        _schemas_compatibility,
    )
    compatibility.add_argument("-f", "--filename", required=True, help="a JSON file, as for upload")


GROUPS: dict[str, tuple[str, Callable[[Any], None]]] = {
    "clusters": ("Operations about clusters", _add_clusters),
    "tenants": ("Operations about tenants", _add_tenants),
    "namespaces": ("Operations about namespaces", _add_namespaces),
    "topics": ("Operations on persistent topics", _add_topics),
    "brokers": ("Operations about brokers", _add_brokers),
    "schemas": ("Operations about schemas", _add_schemas),
    "topicPolicies": ("Operations on the policies of persistent topics", _add_topic_policies),
}


# --- handlers: arguments in, requests out, a value to print back --------------------------


def _clusters_list(args: argparse.Namespace, client: AdminClient) -> Any:
    clusters = client.get("/admin/v2/clusters").json() or []
    if not args.current:
        return clusters
    try:
        config = client.get("/admin/v2/brokers/configuration/runtime").json()
        current = config.get("clusterName") if isinstance(config, dict) else None
    except AdminError:
        current = None
    return [f"{c}(*)" if c == current else c for c in clusters]


def _cluster_path(args: argparse.Namespace) -> str:
    return f"/admin/v2/clusters/{check_name('cluster', args.cluster)}"


def _clusters_get(args: argparse.Namespace, client: AdminClient) -> Any:
    return client.get(_cluster_path(args)).json()


def _cluster_data(args: argparse.Namespace) -> dict[str, str]:
    fields = {
        "serviceUrl": args.service_url,
        "serviceUrlTls": args.service_url_tls,
        "brokerServiceUrl": args.broker_url,
        "brokerServiceUrlTls": args.broker_url_tls,
    }
    return {key: value for key, value in fields.items() if value is not None}


def _clusters_create(args: argparse.Namespace, client: AdminClient) -> Any:
    client.put(_cluster_path(args), body=_cluster_data(args))
    return NOTHING


def _clusters_update(args: argparse.Namespace, client: AdminClient) -> Any:
    client.post(_cluster_path(args), body=_cluster_data(args))
    return NOTHING


def _clusters_delete(args: argparse.Namespace, client: AdminClient) -> Any:
    path = _cluster_path(args)
    if args.all:
        for tenant in client.get("/admin/v2/tenants").json() or []:
            for namespace in client.get(f"/admin/v2/namespaces/{tenant}").json() or []:
                ns = Namespace.parse(namespace)
                base = f"/admin/v2/persistent/{ns.path}"
                for topic in client.get(f"{base}/partitioned").json() or []:
                    client.delete(
                        f"/admin/v2/{parse_topic(topic).rest_path}/partitions",
                        query={"force": True},
                    )
                for topic in client.get(base).json() or []:
                    client.delete(
                        f"/admin/v2/{parse_topic(topic).rest_path}", query={"force": True}
                    )
                client.delete(f"/admin/v2/namespaces/{ns.path}", query={"force": True})
            client.delete(f"/admin/v2/tenants/{tenant}")
    client.delete(path)
    return NOTHING


def _tenant_path(args: argparse.Namespace) -> str:
    return f"/admin/v2/tenants/{check_name('tenant', args.tenant)}"


def _tenants_list(args: argparse.Namespace, client: AdminClient) -> Any:
    return client.get("/admin/v2/tenants").json() or []


def _tenants_get(args: argparse.Namespace, client: AdminClient) -> Any:
    return client.get(_tenant_path(args)).json()


def _tenants_create(args: argparse.Namespace, client: AdminClient) -> Any:
    path = _tenant_path(args)
    clusters = split_list(args.allowed_clusters)
    if not clusters:  # as pulsar-admin: every cluster there is
        clusters = list(client.get("/admin/v2/clusters").json() or [])
    body = {"adminRoles": split_list(args.admin_roles), "allowedClusters": clusters}
    client.put(path, body=body)
    return NOTHING


def _tenants_update(args: argparse.Namespace, client: AdminClient) -> Any:
    path = _tenant_path(args)
    roles = split_list(args.admin_roles) if args.admin_roles is not None else None
    clusters = split_list(args.allowed_clusters) if args.allowed_clusters is not None else None
    if roles is None or clusters is None:  # what is not given stays as it is
        current = client.get(path).json() or {}
        roles = roles if roles is not None else list(current.get("adminRoles") or [])
        clusters = clusters if clusters is not None else list(current.get("allowedClusters") or [])
    client.post(path, body={"adminRoles": roles, "allowedClusters": clusters})
    return NOTHING


def _tenants_delete(args: argparse.Namespace, client: AdminClient) -> Any:
    client.delete(_tenant_path(args), query={"force": True} if args.force else None)
    return NOTHING


def _schema_path(args: argparse.Namespace) -> str:
    """A topic's schemas resource (a partition's are its partitioned topic's; the domain
    does not count)."""
    topic = _topic(args).partitioned_topic
    return "/admin/v2/schemas/" + topic.rest_path.removeprefix(f"{topic.domain}/")


def _schema_info(args: argparse.Namespace, doc: dict[str, Any]) -> dict[str, Any]:
    """A ``GetSchemaResponse`` as pulsar-admin prints it (its ``SchemaInfo``)."""
    info: dict[str, Any] = {"name": _topic(args).partitioned_topic.local_name}
    data = doc.get("data", "")
    try:
        info["schema"] = json.loads(data) if data else ""
    except ValueError:
        info["schema"] = data
    info.update(type=doc.get("type"), timestamp=doc.get("timestamp"))
    info["properties"] = doc.get("properties") or {}
    return info


def _schemas_get(args: argparse.Namespace, client: AdminClient) -> Any:
    if args.version is not None and args.all_version:
        raise ArgumentFormatError(
            "Only one or neither of --version and --all-version can be specified."
        )
    if args.version is not None and args.version < 0:
        raise ArgumentFormatError(
            f"Option --version must be greater than 0, but found {args.version}"
        )
    path = _schema_path(args)
    if args.all_version:
        docs = client.get(f"{path}/schemas").json().get("getSchemaResponses", [])
        return [{"version": d.get("version"), "schemaInfo": _schema_info(args, d)} for d in docs]
    if args.version is not None:
        return _schema_info(args, client.get(f"{path}/schema/{args.version}").json())
    doc = client.get(f"{path}/schema").json()
    return {"version": doc.get("version"), "schemaInfo": _schema_info(args, doc)}


def _schema_file(filename: str) -> Any:
    try:
        with open(filename, encoding="utf-8") as file:
            return json.load(file)
    except FileNotFoundError:
        raise ArgumentFormatError(f"Schema file {filename} is not found.") from None
    except (OSError, ValueError) as exc:
        raise ArgumentFormatError(f"Schema file {filename} cannot be read: {exc}") from None


def _schemas_upload(args: argparse.Namespace, client: AdminClient) -> Any:
    client.post(f"{_schema_path(args)}/schema", body=_schema_file(args.filename))
    return NOTHING


def _schemas_delete(args: argparse.Namespace, client: AdminClient) -> Any:
    client.delete(f"{_schema_path(args)}/schema", query={"force": True} if args.force else None)
    return NOTHING


def _schemas_compatibility(args: argparse.Namespace, client: AdminClient) -> Any:
    body = _schema_file(args.filename)
    return client.post(f"{_schema_path(args)}/compatibility", body=body).json()


def _ns_path(args: argparse.Namespace) -> str:
    return f"/admin/v2/namespaces/{Namespace.parse(args.namespace).path}"


def _namespaces_list(args: argparse.Namespace, client: AdminClient) -> Any:
    return client.get(f"/admin/v2/namespaces/{check_name('tenant', args.tenant)}").json() or []


def _namespaces_topics(args: argparse.Namespace, client: AdminClient) -> Any:
    return client.get(f"{_ns_path(args)}/topics", query=_system_topics_query(args)).json() or []


def _namespaces_policies(args: argparse.Namespace, client: AdminClient) -> Any:
    return client.get(_ns_path(args)).json()


def _namespaces_create(args: argparse.Namespace, client: AdminClient) -> Any:
    path = _ns_path(args)
    if args.bundles < 0 or args.bundles > 2**32:
        raise ArgumentFormatError("invalid number of bundles: it has to be in (0, 2^32]")
    body: dict[str, Any] = {}
    if args.bundles > 0:
        body["bundles"] = {"numBundles": args.bundles}
    clusters = split_list(args.clusters)
    if clusters:
        body["replication_clusters"] = clusters
    client.put(path, body=body)
    return NOTHING


def _namespaces_delete(args: argparse.Namespace, client: AdminClient) -> Any:
    client.delete(_ns_path(args), query={"force": True} if args.force else None)
    return NOTHING


def _ns_permissions(args: argparse.Namespace, client: AdminClient) -> Any:
    return client.get(f"{_ns_path(args)}/permissions").json() or {}


def _ns_grant_permission(args: argparse.Namespace, client: AdminClient) -> Any:
    role = _quote(args.role)
    client.post(f"{_ns_path(args)}/permissions/{role}", body=split_list(args.actions))
    return NOTHING


def _ns_revoke_permission(args: argparse.Namespace, client: AdminClient) -> Any:
    client.delete(f"{_ns_path(args)}/permissions/{_quote(args.role)}")
    return NOTHING


def _ns_set_retention(args: argparse.Namespace, client: AdminClient) -> Any:
    path = _policy_path(args)
    body = {
        "retentionTimeInMinutes": retention_minutes(parse_relative_seconds(args.time)),
        "retentionSizeInMB": retention_megabytes(parse_size(args.size)),
    }
    client.post(f"{path}/retention", body=body)
    return NOTHING


def _ns_set_message_ttl(args: argparse.Namespace, client: AdminClient) -> Any:
    path, seconds = _policy_path(args), parse_relative_seconds(args.message_ttl)
    if _topic_level(args):  # Pulsar takes a topic's TTL as a query parameter
        client.post(f"{path}/messageTTL", query={"messageTTL": seconds})
    else:
        client.post(f"{path}/messageTTL", body=seconds)
    return NOTHING


def _ns_set_limit(args: argparse.Namespace, client: AdminClient) -> Any:
    if args.limit < 0:
        raise ArgumentFormatError(f"{args.endpoint} must be 0 or more")
    client.post(f"{_policy_path(args)}/{args.endpoint}", body=args.limit)
    return NOTHING


def _ns_set_compaction_threshold(args: argparse.Namespace, client: AdminClient) -> Any:
    threshold = parse_size(args.threshold)
    if threshold < 0:
        raise ArgumentFormatError("the compaction threshold must be 0 or more bytes")
    path = f"{_policy_path(args)}/compactionThreshold"
    if _topic_level(args):  # Pulsar sets a topic's with POST, a namespace's with PUT
        client.post(path, body=threshold)
    else:
        client.put(path, body=threshold)
    return NOTHING


def _ns_set_subscription_expiration(args: argparse.Namespace, client: AdminClient) -> Any:
    if args.time < 0:
        raise ArgumentFormatError("the subscription expiration time must be 0 or more minutes")
    client.post(f"{_ns_path(args)}/subscriptionExpirationTime", body=args.time)
    return NOTHING


def _ns_set_backlog_quota(args: argparse.Namespace, client: AdminClient) -> Any:
    path = _policy_path(args)
    if args.policy not in BACKLOG_QUOTA_POLICIES:
        raise ArgumentFormatError(
            f"invalid retention policy type {args.policy!r}: valid options are "
            f"{', '.join(BACKLOG_QUOTA_POLICIES)}"
        )
    if args.quota_type not in BACKLOG_QUOTA_TYPES:
        raise ArgumentFormatError(
            f"invalid backlog quota type {args.quota_type!r}: valid options are "
            f"{', '.join(BACKLOG_QUOTA_TYPES)}"
        )
    body: dict[str, Any] = {"limitSize": -1, "limitTime": -1, "policy": args.policy}
    if args.quota_type == "destination_storage":
        if args.limit is None:
            raise ArgumentFormatError("quota type 'destination_storage' needs a size limit (-l)")
        body["limitSize"] = parse_size(args.limit)
        body["limit"] = body["limitSize"]  # the deprecated name, which older brokers read
    else:
        if args.limit_time is None:
            raise ArgumentFormatError("quota type 'message_age' needs a time limit (-lt)")
        body["limitTime"] = parse_relative_seconds(args.limit_time)
    client.post(f"{path}/backlogQuota", query={"backlogQuotaType": args.quota_type}, body=body)
    return NOTHING


def _ns_get_backlog_quotas(args: argparse.Namespace, client: AdminClient) -> Any:
    return client.get(f"{_policy_path(args)}/backlogQuotaMap", query=_applied(args)).json()


def _ns_remove_backlog_quota(args: argparse.Namespace, client: AdminClient) -> Any:
    path = _policy_path(args)
    if args.quota_type not in BACKLOG_QUOTA_TYPES:
        raise ArgumentFormatError(
            f"invalid backlog quota type {args.quota_type!r}: valid options are "
            f"{', '.join(BACKLOG_QUOTA_TYPES)}"
        )
    client.delete(f"{path}/backlogQuota", query={"backlogQuotaType": args.quota_type})
    return NOTHING


def _enabled(args: argparse.Namespace) -> bool:
    if args.enable == args.disable:
        raise ArgumentFormatError("need to specify either --enable or --disable")
    return bool(args.enable)


def _ns_set_flag(args: argparse.Namespace, client: AdminClient) -> Any:
    """``--enable`` / ``--disable`` of a bare-bool policy at ``/<endpoint>``."""
    client.post(f"{_policy_path(args)}/{args.endpoint}", body=_enabled(args))
    return NOTHING


def _ns_set_schema_strategy(args: argparse.Namespace, client: AdminClient) -> Any:
    strategy = args.compatibility.strip().upper()
    if strategy not in SCHEMA_STRATEGIES:
        raise ArgumentFormatError(
            f"Illegal schema compatibility strategy {args.compatibility}. Possible values: "
            f"[{', '.join(SCHEMA_STRATEGIES)}]"
        )
    client.put(f"{_policy_path(args)}/schemaCompatibilityStrategy", body=strategy)
    return NOTHING


def _topic_set_schema_validation_enforce(args: argparse.Namespace, client: AdminClient) -> Any:
    """pulsar-admin's ``topics set-schema-validation-enforce``: ``-e`` enforces, else off."""
    client.post(f"{_policy_path(args)}/schemaValidationEnforced", body=bool(args.enable))
    return NOTHING


def _ns_set_publish_rate(args: argparse.Namespace, client: AdminClient) -> Any:
    path = _policy_path(args)
    body = {
        "publishThrottlingRateInMsg": args.msg_publish_rate,
        "publishThrottlingRateInByte": args.byte_publish_rate,
    }
    client.post(f"{path}/publishRate", body=body)
    return NOTHING


INACTIVE_TOPIC_DELETE_MODES = (
    "delete_when_no_subscriptions",
    "delete_when_subscriptions_caught_up",
)


def _ns_set_inactive_topic_policies(args: argparse.Namespace, client: AdminClient) -> Any:
    if args.enable == args.disable:
        raise ArgumentFormatError(
            "need to specify either --enable-delete-while-inactive or "
            "--disable-delete-while-inactive"
        )
    if args.delete_mode not in INACTIVE_TOPIC_DELETE_MODES:
        raise ArgumentFormatError(
            f"delete mode can only be set to {' or '.join(INACTIVE_TOPIC_DELETE_MODES)}"
        )
    body = {
        "inactiveTopicDeleteMode": args.delete_mode,
        "maxInactiveDurationSeconds": parse_relative_seconds(args.max_inactive_duration),
        "deleteWhileInactive": bool(args.enable),
    }
    client.post(f"{_policy_path(args)}/inactiveTopicPolicies", body=body)
    return NOTHING


def _ns_set_subscription_types(args: argparse.Namespace, client: AdminClient) -> Any:
    chosen = []
    for raw in args.types.split(","):
        name = subscription_type_named(raw)
        if name is None:
            raise ArgumentFormatError(
                f"Illegal subscription type {raw.strip()}. Possible values: "
                f"{', '.join(SUBSCRIPTION_TYPES)}"
            )
        chosen.append(name)
    client.post(f"{_policy_path(args)}/subscriptionTypesEnabled", body=chosen)
    return NOTHING


def _ns_set_delayed_delivery(args: argparse.Namespace, client: AdminClient) -> Any:
    body = {
        "active": _enabled(args),
        "tickTime": parse_relative_millis(args.time),
        "maxDeliveryDelayInMillis": parse_relative_millis(args.max_delay),
    }
    client.post(f"{_policy_path(args)}/delayedDelivery", body=body)
    return NOTHING


def _ns_set_persistence(args: argparse.Namespace, client: AdminClient) -> Any:
    for flag, value in (
        ("--bookkeeper-ensemble", args.ensemble),
        ("--bookkeeper-write-quorum", args.write_quorum),
        ("--bookkeeper-ack-quorum", args.ack_quorum),
    ):
        if value <= 0:
            raise ArgumentFormatError(f"{flag} must be greater than 0")
    if not args.mark_delete_rate >= 0:  # NaN too
        raise ArgumentFormatError("--ml-mark-delete-max-rate cannot be less than 0")
    body = {
        "bookkeeperEnsemble": args.ensemble,
        "bookkeeperWriteQuorum": args.write_quorum,
        "bookkeeperAckQuorum": args.ack_quorum,
        "managedLedgerMaxMarkDeleteRate": args.mark_delete_rate,
    }
    client.post(f"{_policy_path(args)}/persistence", body=body)
    return NOTHING


def _ns_set_dispatch_rate(args: argparse.Namespace, client: AdminClient) -> Any:
    path = _policy_path(args)
    body = {
        "dispatchThrottlingRateInMsg": args.msg_dispatch_rate,
        "dispatchThrottlingRateInByte": args.byte_dispatch_rate,
        "ratePeriodInSecond": args.dispatch_rate_period,
        "relativeToPublishRate": args.relative_to_publish_rate,
    }
    client.post(f"{path}/{args.endpoint}", body=body)
    return NOTHING


def _ns_set_auto_topic_creation(args: argparse.Namespace, client: AdminClient) -> Any:
    path = _ns_path(args)
    enable = _enabled(args)
    topic_type = args.topic_type.strip().lower()
    if enable:
        if topic_type not in TOPIC_TYPES:
            raise ArgumentFormatError(
                "must specify type of topic to be created: partitioned or non-partitioned"
            )
        if topic_type == "partitioned" and (args.num_partitions or 0) <= 0:
            raise ArgumentFormatError("partitioned topics need --num-partitions > 0")
    body: dict[str, Any] = {"allowAutoTopicCreation": enable, "topicType": topic_type}
    if args.num_partitions is not None:
        body["defaultNumPartitions"] = args.num_partitions
    client.post(f"{path}/autoTopicCreation", body=body)
    return NOTHING


def _ns_get_policy(args: argparse.Namespace, client: AdminClient) -> Any:
    return client.get(f"{_policy_path(args)}/{args.endpoint}", query=_applied(args)).json()


def _ns_remove_policy(args: argparse.Namespace, client: AdminClient) -> Any:
    client.delete(f"{_policy_path(args)}/{args.endpoint}")
    return NOTHING


def _topic_level(args: argparse.Namespace) -> bool:
    return getattr(args, "namespace", None) is None


def _policy_path(args: argparse.Namespace) -> str:
    """Where a policy command's policies live: its namespace's, or its topic's."""
    if not _topic_level(args):
        return _ns_path(args)
    return f"/admin/v2/{_topic(args, persistent=True).rest_path}"  # a partition: 412


def _applied(args: argparse.Namespace) -> dict[str, Any] | None:
    return {"applied": True} if getattr(args, "applied", False) else None


def _bundle_path(args: argparse.Namespace) -> str:
    path = _ns_path(args)
    return f"{path}/{_quote(args.bundle)}" if args.bundle else path


def _ns_unload(args: argparse.Namespace, client: AdminClient) -> Any:
    client.put(f"{_bundle_path(args)}/unload")
    return NOTHING


def _ns_clear_backlog(args: argparse.Namespace, client: AdminClient) -> Any:
    path = _bundle_path(args)
    if not args.force and not _confirm("Are you sure you want to clear the backlog?"):
        raise AdminError("not confirmed: the backlog was not cleared (-force skips the question)")
    suffix = f"/{_quote(args.subscription)}" if args.subscription else ""
    client.post(f"{path}/clearBacklog{suffix}")
    return NOTHING


def _ns_unsubscribe(args: argparse.Namespace, client: AdminClient) -> Any:
    client.post(f"{_bundle_path(args)}/unsubscribe/{_quote(args.subscription)}")
    return NOTHING


def _topic(args: argparse.Namespace, *, persistent: bool = False) -> TopicName:
    topic = parse_topic(args.topic)
    if persistent and not topic.persistent:
        raise ArgumentFormatError("need to provide a persistent topic name")
    return topic


def _topic_path(args: argparse.Namespace, *, persistent: bool = False) -> str:
    return f"/admin/v2/{_topic(args, persistent=persistent).rest_path}"


def _sub_path(args: argparse.Namespace, *, persistent: bool = False) -> str:
    return f"{_topic_path(args, persistent=persistent)}/subscription/{_quote(args.subscription)}"


def _quote(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")


def _topics_list(args: argparse.Namespace, client: AdminClient) -> Any:
    ns = Namespace.parse(args.namespace)
    domain = args.topic_domain.replace("_", "-")
    return (
        client.get(f"/admin/v2/{domain}/{ns.path}", query=_system_topics_query(args)).json() or []
    )


def _topics_list_partitioned(args: argparse.Namespace, client: AdminClient) -> Any:
    ns = Namespace.parse(args.namespace)
    query = _system_topics_query(args)
    return client.get(f"/admin/v2/persistent/{ns.path}/partitioned", query=query).json() or []


def _topics_create(args: argparse.Namespace, client: AdminClient) -> Any:
    path = _topic_path(args)
    properties = parse_key_values(args.metadata)
    client.put(path, body=properties or None)
    return NOTHING


def _topics_create_partitioned(args: argparse.Namespace, client: AdminClient) -> Any:
    path = _topic_path(args)
    properties = parse_key_values(args.metadata)
    body: Any = args.partitions
    if properties:
        body = {"partitions": args.partitions, "properties": properties}
    client.put(f"{path}/partitions", body=body)
    return NOTHING


def _topics_update_partitioned(args: argparse.Namespace, client: AdminClient) -> Any:
    path = _topic_path(args)
    query: dict[str, object] = {}
    if args.update_local_only:
        query["updateLocalTopicOnly"] = True
    if args.force:
        query["force"] = True
    client.post(f"{path}/partitions", query=query, body=args.partitions)
    return NOTHING


def _topics_partitioned_metadata(args: argparse.Namespace, client: AdminClient) -> Any:
    return client.get(f"{_topic_path(args)}/partitions").json()


def _topics_delete(args: argparse.Namespace, client: AdminClient) -> Any:
    client.delete(_topic_path(args), query={"force": True} if args.force else None)
    return NOTHING


def _topics_delete_partitioned(args: argparse.Namespace, client: AdminClient) -> Any:
    path = _topic_path(args)
    client.delete(f"{path}/partitions", query={"force": True} if args.force else None)
    return NOTHING


def _stats_query(args: argparse.Namespace) -> dict[str, object]:
    query: dict[str, object] = {}
    if args.get_precise_backlog:
        query["getPreciseBacklog"] = True
    if args.get_earliest_time_in_backlog:
        query["getEarliestTimeInBacklog"] = True
    return query


def _topics_stats(args: argparse.Namespace, client: AdminClient) -> Any:
    return client.get(f"{_topic_path(args)}/stats", query=_stats_query(args)).json()


def _topics_stats_internal(args: argparse.Namespace, client: AdminClient) -> Any:
    query = {"metadata": True} if args.metadata else None
    return client.get(f"{_topic_path(args)}/internalStats", query=query).json()


def _topics_partitioned_stats(args: argparse.Namespace, client: AdminClient) -> Any:
    query = _stats_query(args)
    query["perPartition"] = bool(args.per_partition)
    return client.get(f"{_topic_path(args)}/partitioned-stats", query=query).json()


def _topics_partitioned_stats_internal(args: argparse.Namespace, client: AdminClient) -> Any:
    return client.get(f"{_topic_path(args)}/partitioned-internalStats").json()


def _topics_subscriptions(args: argparse.Namespace, client: AdminClient) -> Any:
    return client.get(f"{_topic_path(args)}/subscriptions").json() or []


def _topics_create_sub(args: argparse.Namespace, client: AdminClient) -> Any:
    path = _sub_path(args)
    ledger_id, entry_id = parse_message_id(args.message_id)
    body: dict[str, Any] = message_id_body(ledger_id, entry_id)
    properties = parse_key_values(args.property)
    if properties:
        body["properties"] = properties
    query = {"replicated": True} if args.replicated else None
    client.put(path, query=query, body=body)
    return NOTHING


def _topics_unsubscribe(args: argparse.Namespace, client: AdminClient) -> Any:
    client.delete(_sub_path(args), query={"force": True} if args.force else None)
    return NOTHING


def _topics_clear_backlog(args: argparse.Namespace, client: AdminClient) -> Any:
    client.post(f"{_sub_path(args)}/skip_all")
    return NOTHING


def _topics_skip(args: argparse.Namespace, client: AdminClient) -> Any:
    path = _sub_path(args)
    if args.count < 0:
        raise ArgumentFormatError("the number of messages to skip cannot be negative")
    client.post(f"{path}/skip/{args.count}")
    return NOTHING


def _topics_expire(args: argparse.Namespace, client: AdminClient) -> Any:
    topic = _topic(args)
    path = _sub_path(args)
    if args.expire_time is not None and args.position:
        raise ArgumentFormatError(
            "can't expire messages by time and by message position at the same time"
        )
    if args.expire_time is not None:
        seconds = parse_relative_seconds(args.expire_time)
        client.post(f"{path}/expireMessages/{seconds}")
    elif args.position:
        ledger_id, entry_id = parse_message_id(args.position, allow_named=False)
        body = message_id_body(
            ledger_id,
            entry_id,
            partition=topic.partition_index,
            excluded=args.exclude_reset_position,
        )
        client.post(f"{path}/expireMessages", body=body)
    else:
        raise ArgumentFormatError(
            "either time (--expireTime) or message position (--position) has to be provided"
        )
    return NOTHING


def _topics_expire_all(args: argparse.Namespace, client: AdminClient) -> Any:
    path = _topic_path(args)
    seconds = parse_relative_seconds(args.expire_time)
    client.post(f"{path}/all_subscription/expireMessages/{seconds}")
    return NOTHING


def _topics_reset_cursor(args: argparse.Namespace, client: AdminClient) -> Any:
    path = _sub_path(args, persistent=True)
    if args.message_id:
        ledger_id, entry_id = parse_message_id(args.message_id)
        body = message_id_body(ledger_id, entry_id, excluded=args.exclude_reset_position)
        client.post(f"{path}/resetcursor", body=body)
    elif args.time is not None:
        timestamp = now_ms() - parse_relative_millis(args.time)
        client.post(f"{path}/resetcursor/{timestamp}")
    else:
        raise ArgumentFormatError(
            "either a time (--time) or a message id (--messageId) has to be provided"
        )
    return NOTHING


def _topics_peek(args: argparse.Namespace, client: AdminClient) -> Any:
    path = _sub_path(args, persistent=True)  # refuses a non-persistent topic
    messages: list[Any] = []
    position = 1
    while len(messages) < args.count:
        try:
            answer = client.get(f"{path}/position/{position}")
        except AdminHttpError as exc:
            # No message at this position: what was found so far is the answer (as
            # pulsar-admin), unless the first one failed for an unknown subscription.
            if exc.status != 404:
                raise
            if not messages and not _has_subscription(client, args):
                raise
            break
        found = decode_peek(answer.headers, answer.body)
        messages.extend(found[: args.count - len(messages)])
        position += 1
    return Text(render_peeked(messages)) if messages else NOTHING


def _topics_examine(args: argparse.Namespace, client: AdminClient) -> Any:
    query = {"initialPosition": args.initial_position, "messagePosition": args.message_position}
    answer = client.get(f"{_topic_path(args, persistent=True)}/examinemessage", query=query)
    return Text(render_peeked(decode_peek(answer.headers, answer.body)))


def _topics_by_id(args: argparse.Namespace, client: AdminClient) -> Any:
    path = f"{_topic_path(args, persistent=True)}/ledger/{args.ledger_id}/entry/{args.entry_id}"
    answer = client.get(path)
    return Text(render_peeked(decode_peek(answer.headers, answer.body)))


def _has_subscription(client: AdminClient, args: argparse.Namespace) -> bool:
    try:
        subscriptions = client.get(f"{_topic_path(args)}/subscriptions").json() or []
    except AdminHttpError:
        return False
    return args.subscription in subscriptions


def _topics_last_message_id(args: argparse.Namespace, client: AdminClient) -> Any:
    return client.get(f"{_topic_path(args, persistent=True)}/lastMessageId").json()


def _topics_unload(args: argparse.Namespace, client: AdminClient) -> Any:
    client.put(f"{_topic_path(args)}/unload")
    return NOTHING


def _topics_terminate(args: argparse.Namespace, client: AdminClient) -> Any:
    last = client.post(f"{_topic_path(args, persistent=True)}/terminate").json()
    return Text(f"Topic successfully terminated at {format_message_id(last)}")


def _topics_compact(args: argparse.Namespace, client: AdminClient) -> Any:
    client.put(f"{_topic_path(args, persistent=True)}/compaction")
    return Text(f"Topic compaction requested for {_topic(args, persistent=True)}")


COMPACTION_POLL_S = 1.0  # how often ``compaction-status -w`` asks again


def _topics_compaction_status(args: argparse.Namespace, client: AdminClient) -> Any:
    """pulsar-admin's texts; a failed compaction is an error (exit status 1)."""
    path = f"{_topic_path(args, persistent=True)}/compaction"
    status = client.get(path).json()
    while args.wait_complete and status.get("status") == "RUNNING":
        time.sleep(COMPACTION_POLL_S)
        status = client.get(path).json()
    state = status.get("status")
    if state == "NOT_RUN":
        topic = _topic(args, persistent=True)
        return Text(f"Compaction has not been run for {topic} since broker startup")
    if state == "RUNNING":
        return Text("Compaction is currently running")
    if state == "SUCCESS":
        return Text("Compaction was a success")
    raise AdminError(f"Error in compaction: Error compacting: {status.get('lastError', '')}")


def _topics_lookup(args: argparse.Namespace, client: AdminClient) -> Any:
    data = client.get(f"/lookup/v2/topic/{_topic(args).rest_path}").json()
    if isinstance(data, dict) and data.get("brokerUrl"):
        return str(data["brokerUrl"])
    return data


def _brokers_list(args: argparse.Namespace, client: AdminClient) -> Any:
    if args.cluster:
        return client.get(f"/admin/v2/brokers/{check_name('cluster', args.cluster)}").json() or []
    return client.get("/admin/v2/brokers").json() or []


def _brokers_leader(args: argparse.Namespace, client: AdminClient) -> Any:
    return client.get("/admin/v2/brokers/leaderBroker").json()


def _brokers_healthcheck(args: argparse.Namespace, client: AdminClient) -> Any:
    query = {"topicVersion": args.topic_version} if args.topic_version else None
    client.get("/admin/v2/brokers/health", query=query)
    return Text("ok")


def _brokers_get(args: argparse.Namespace, client: AdminClient) -> Any:
    return client.get(args.path).json()


def _brokers_backlog_quota_check(args: argparse.Namespace, client: AdminClient) -> Any:
    client.get("/admin/v2/brokers/backlog-quota-check")
    return NOTHING


def _brokers_update_config(args: argparse.Namespace, client: AdminClient) -> Any:
    client.post(f"/admin/v2/brokers/configuration/{_quote(args.config)}/{_quote(args.value)}")
    return NOTHING


def _brokers_delete_config(args: argparse.Namespace, client: AdminClient) -> Any:
    client.delete(f"/admin/v2/brokers/configuration/{_quote(args.config)}")
    return NOTHING


def _brokers_version(args: argparse.Namespace, client: AdminClient) -> Any:
    version = client.get("/admin/v2/brokers/version").json()
    return Text(str(version) if version is not None else "")


# --- running ------------------------------------------------------------------------------


def _confirm(prompt: str) -> bool:
    """pulsar-admin's confirmation prompt: yes only for an explicit ``y``/``yes``."""
    sys.stdout.write(f"{prompt} (y/n) ")
    sys.stdout.flush()
    answer = sys.stdin.readline()
    return answer.strip().lower() in ("y", "yes")


def admin_url(args: argparse.Namespace) -> str:
    return args.admin_url or os.environ.get(ADMIN_URL_ENV) or DEFAULT_ADMIN_URL


def admin_client(args: argparse.Namespace) -> AdminClient:
    """The client the global options describe. The token and TLS helpers are the Python
    client's (``stripemq.client.auth``, ``stripemq.client.tls``), imported only when
    asked for, so that a plain command starts without the client.

    Raises:
        ArgumentFormatError: bad authentication options or an unreadable trust file.
    """
    url = admin_url(args)
    token = None
    ssl_context = None
    params = security_options.auth_params(args.auth_params)
    trust = security_options.tls_trust_certs(args.tls_trust_certs_file_path)
    try:
        if args.auth_plugin or params:
            from stripemq.client.auth import authentication_from_params

            authentication = authentication_from_params(args.auth_plugin, params)
            token = authentication.token if authentication is not None else None
        secure = trust or args.tls_allow_insecure
        if url.lower().startswith("https:") or secure:
            from stripemq.client.tls import client_ssl_context

            ssl_context = client_ssl_context(
                trust,
                allow_insecure_connection=args.tls_allow_insecure,
                validate_hostname=args.tls_enable_hostname_verification,
            )
    except InvalidConfigurationError as exc:
        raise ArgumentFormatError(str(exc)) from None
    return AdminClient(url, timeout=args.request_timeout, token=token, ssl_context=ssl_context)


def run_admin(args: argparse.Namespace) -> int:
    """Run the parsed command; prints its output (or the error) and returns the exit code."""
    try:
        client = admin_client(args)
    except ArgumentFormatError as exc:
        sys.stderr.write(f"stripemq admin: error: {exc}\n")
        return 2
    try:
        result = args.handler(args, client)
    except ArgumentFormatError as exc:
        sys.stderr.write(f"stripemq admin: error: {exc}\n")
        return 2
    except AdminError as exc:
        sys.stderr.write(f"stripemq admin: {exc}\n")
        return 1
    if result is NOTHING:
        return 0
    try:
        if args.output == "table":
            from rich.console import Console

            Console(markup=False).print(render_table(result, args.label))
        else:
            text = render(result)
            if text or not isinstance(result, list):  # an empty list prints no line at all
                sys.stdout.write(text + "\n")
            sys.stdout.flush()
    except BrokenPipeError:  # `stripemq admin ... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def main(argv: list[str] | None = None) -> int:
    """``stripemq admin <argv>``: parse, run, return the exit code (130 on Ctrl-C)."""
    args = build_admin_parser(argv).parse_args(argv)
    try:
        return run_admin(args)
    except KeyboardInterrupt:
        return 130
