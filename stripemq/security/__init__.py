"""Security as Pulsar does it: JWT token authentication (``tokens``, ``authentication``),
role-based authorization on namespaces (``authorization``) and TLS (``tls``).

The decisions are sans-IO: a token is checked against keys already loaded, and a role's
right to an operation is decided from the tenant and namespace records handed in. Reading
those records from the metadata store, and the sockets, sit in the broker.
"""
