"""``stripemq initialize-cluster-metadata``: Pulsar's command of that name, with its flags.

Writes a new cluster's first metadata (its ClusterData with the given URLs, tenants
``public`` and ``pulsar`` allowed on it, namespaces ``public/default`` and ``pulsar/system``)
into the metadata store, through
``stripemq.broker.cluster_metadata.initialize_cluster_metadata`` (which brokers also run at
start). Idempotent: what exists is kept (a second cluster is only added to the tenants'
allowed clusters and the namespaces' replication clusters), so running it twice, or after a
broker started, changes nothing and succeeds. Pulsar's other flags (TLS, authentication,
proxy, BookKeeper and config-file ones) are accepted and have no use here; ``-g`` prints
the command's options.

The store is ``--metadata-store`` (Pulsar's ``zk:host:2181/chroot`` or stripemq's
``zk://host:2181/chroot``, ``local:///dir``), or the deprecated ``--zookeeper`` (a bare
``host:2181`` too). stripemq keeps cluster and configuration metadata in one store, so
``--configuration-metadata-store`` may only name that same store. Output goes to stdout (a
command-line tool, not library code).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from stripemq.cli.admin_formats import ArgumentFormatError, check_name, metadata_store_url


def add_initialize_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "initialize-cluster-metadata",
        help="write a new cluster's metadata: the cluster, tenant public, namespace "
        "public/default (idempotent)",
        description=__doc__.split("\n\n")[0],
        allow_abbrev=False,
    )
    parser.add_argument("-c", "--cluster", required=True, help="cluster name")
    parser.add_argument(
        "-md", "--metadata-store", help="metadata store URL (zk:host:2181/chroot, zk://...)"
    )
    parser.add_argument(
        "-zk", "--zookeeper", help="ZooKeeper connection string (deprecated: --metadata-store)"
    )
    for flags, dest in (
        (("-cms", "--configuration-metadata-store"), "configuration_metadata_store"),
        (("-cs", "--configuration-store"), "configuration_store"),
        (("-gzk", "--global-zookeeper"), "global_zookeeper"),
    ):
        parser.add_argument(
            *flags, dest=dest, help="configuration metadata store (must be the same store)"
        )
    parser.add_argument("-uw", "--web-service-url", default="", help="web service URL (http://)")
    parser.add_argument("-tw", "--web-service-url-tls", default="", help="web service URL (TLS)")
    parser.add_argument(
        "-ub", "--broker-service-url", default="", help="broker service URL (pulsar://)"
    )
    parser.add_argument(
        "-tb", "--broker-service-url-tls", default="", help="broker service URL (TLS)"
    )
    parser.add_argument(
        "-bn",
        "--default-namespace-bundle-number",
        type=int,
        default=0,
        help="bundles of public/default when it is made (default: the broker's, 4)",
    )
    parser.add_argument(
        "-g", "--generate-docs", action="store_true", help="print the options and exit"
    )
    # Accepted so that Pulsar's scripts run unchanged; stripemq has no use for them.
    parser.add_argument("-te", "--tls-enable", action="store_true", help=argparse.SUPPRESS)
    unused: tuple[tuple[str, ...], ...] = (
        ("--zookeeper-session-timeout-ms",),
        ("--initial-num-stream-storage-containers",),
        ("--initial-num-transaction-coordinators",),
        ("--existing-bk-metadata-service-uri",),
        ("--bookkeeper-metadata-service-uri",),
        ("--auth-plugin",),
        ("--auth-parameters",),
        ("-pu", "--proxy-url"),
        ("-pp", "--proxy-protocol"),
        ("-mscp", "--metadata-store-config-path"),
        ("-cmscp", "--configuration-metadata-store-config-path"),
    )
    for names in unused:
        parser.add_argument(*names, help=argparse.SUPPRESS)
    parser.set_defaults(initialize_parser=parser)
    parser.add_argument("--log-level", default="WARNING")


def store_url(args: argparse.Namespace) -> str:
    """The one metadata store the arguments name.

    Raises:
        ArgumentFormatError: none is named, or a second, different store is.
    """
    given = args.metadata_store or args.zookeeper
    if not given:
        raise ArgumentFormatError("the metadata store is required (--metadata-store)")
    url = metadata_store_url(given)
    for other in (
        args.configuration_metadata_store,
        args.configuration_store,
        args.global_zookeeper,
    ):
        if other and metadata_store_url(other) != url:
            raise ArgumentFormatError(
                "stripemq keeps configuration metadata in the metadata store: "
                f"{other!r} is not {given!r}"
            )
    return url


async def initialize(args: argparse.Namespace) -> list[str]:
    """Initialize the store the arguments name; returns what was made (empty: all there).

    Raises:
        ArgumentFormatError: malformed arguments.
        StripeMQError: the store could not be reached or written.
    """
    from stripemq.broker.cluster_metadata import ClusterData, initialize_cluster_metadata
    from stripemq.broker.ownership import DEFAULT_BUNDLES
    from stripemq.broker.policies import MAX_BUNDLES
    from stripemq.metadata import create_metadata_store

    cluster = check_name("cluster", args.cluster)
    url = store_url(args)
    data = ClusterData(
        service_url=args.web_service_url,
        service_url_tls=args.web_service_url_tls,
        broker_service_url=args.broker_service_url,
        broker_service_url_tls=args.broker_service_url_tls,
    )
    bundles = args.default_namespace_bundle_number
    if not 0 <= bundles <= MAX_BUNDLES:
        raise ArgumentFormatError(
            f"--default-namespace-bundle-number {bundles}: need 1 to {MAX_BUNDLES}"
        )
    store = create_metadata_store(url)
    await store.start()
    try:
        return await initialize_cluster_metadata(
            store, cluster, cluster_data=data, default_bundles=bundles or DEFAULT_BUNDLES
        )
    finally:
        await store.close()


def run_initialize(args: argparse.Namespace) -> int:
    """The command: initialize, say what was made, return the exit code."""
    from stripemq.errors import StripeMQError

    if args.generate_docs:
        args.initialize_parser.print_help()
        return 0
    try:
        made = asyncio.run(initialize(args))
    except ArgumentFormatError as exc:
        sys.stderr.write(f"stripemq initialize-cluster-metadata: error: {exc}\n")
        return 2
    except (StripeMQError, OSError) as exc:
        sys.stderr.write(f"stripemq initialize-cluster-metadata: {exc}\n")
        return 1
    if made:
        print(f"Cluster metadata for '{args.cluster}' set up: made {', '.join(made)}")
    else:
        print(f"Cluster metadata for '{args.cluster}' was already set up: nothing changed")
    return 0
