"""``stripemq.broker.cluster_metadata``: what initialize-cluster-metadata writes (as Pulsar's
PulsarClusterMetadataSetup), that it is idempotent, and that a second cluster joins the
existing tenants and namespaces rather than being left out of them."""

from __future__ import annotations

from stripemq.broker.cluster_metadata import (
    ClusterData,
    initialize_cluster_metadata,
    list_clusters,
    read_cluster,
)
from stripemq.broker.namespaces import (
    TenantInfo,
    list_namespaces,
    list_tenants,
    read_policies,
    read_tenant,
    update_tenant,
)
from stripemq.metadata import MetadataStore
from stripemq.testing.metadata import metadata_tree


async def test_the_first_cluster_gets_pulsars_tenants_and_namespaces(store: MetadataStore) -> None:
    data = ClusterData(service_url="http://east:8080", broker_service_url="pulsar://east:6650")
    made = await initialize_cluster_metadata(store, "east", cluster_data=data, default_bundles=8)
    assert made == [
        "cluster east",
        "tenant public",
        "tenant pulsar",
        "namespace public/default",
        "namespace pulsar/system",
    ]
    assert (await read_cluster(store, "east"))[0] == data
    assert await list_tenants(store) == ["public", "pulsar"]
    assert await list_namespaces(store, "pulsar") == ["pulsar/system"]
    default, _ = await read_policies(store, "public/default")
    assert (default.bundles, default.replication_clusters) == (8, ("east",))
    system, _ = await read_policies(store, "pulsar/system")
    assert system.replication_clusters == ("east",)
    before = await metadata_tree(store)
    assert await initialize_cluster_metadata(store, "east") == []  # all there: nothing changes
    assert await metadata_tree(store) == before


async def test_a_second_cluster_joins_the_existing_tenants_and_namespaces(
    store: MetadataStore,
) -> None:
    await initialize_cluster_metadata(store, "east")
    info, version = await read_tenant(store, "public")
    await update_tenant(store, "public", TenantInfo(("ops",), info.allowed_clusters), version)
    made = await initialize_cluster_metadata(store, "west")
    assert "cluster west" in made
    assert await list_clusters(store) == ["east", "west"]
    public, _ = await read_tenant(store, "public")
    assert public == TenantInfo(("ops",), ("east", "west"))  # the operators' roles kept
    assert (await read_tenant(store, "pulsar"))[0].allowed_clusters == ("east", "west")
    for namespace in ("public/default", "pulsar/system"):
        policies, _ = await read_policies(store, namespace)
        assert policies.replication_clusters == ("east", "west"), namespace
