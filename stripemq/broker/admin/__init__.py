"""The admin REST API: Pulsar's ``/admin/v2`` resources and ``/lookup/v2``, one module per
resource (clusters, tenants, namespaces, persistent topics, brokers, lookup), each with an
``add_routes(router, ctx)``; ``rest`` holds what they share."""
