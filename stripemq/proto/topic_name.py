"""Topic names as Pulsar writes them: ``persistent://tenant/namespace/topic``.

Short forms are completed the way Pulsar completes them: ``orders`` is
``persistent://public/default/orders`` and ``acme/billing/orders`` is
``persistent://acme/billing/orders``. A partition of a partitioned topic is the topic's
name with ``-partition-<n>`` appended.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote, unquote

from stripemq.errors import InvalidTopicNameError

__all__ = ["InvalidTopicNameError", "TopicName", "is_valid_name"]

DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "default"
PARTITION_SUFFIX = "-partition-"
_DOMAINS = ("persistent", "non-persistent")
# Pulsar's ``NamedEntity`` rule for tenant, namespace and cluster names (Java's ``\w`` is
# ASCII: letters, digits and ``_``).
_NAME_PART = re.compile(r"[-=:.\w]+", re.ASCII)


def is_valid_name(name: str) -> bool:
    """Whether ``name`` may name a tenant, a namespace (its local part) or a cluster: the
    one check of such names, for the broker, its admin API and the admin CLI alike. ``.``
    and ``..`` match Pulsar's pattern but name no node of a metadata path (ZooKeeper
    refuses them too), so they are refused here."""
    return _NAME_PART.fullmatch(name) is not None and name not in (".", "..")


@dataclass(frozen=True)
class TopicName:
    domain: str
    tenant: str
    namespace: str
    local_name: str

    @classmethod
    def parse(cls, text: str) -> TopicName:
        """The full name for ``text``; ``InvalidTopicNameError`` when it is not one."""
        if not text or len(text) > 4096:
            raise InvalidTopicNameError(f"invalid topic name {text!r}")
        domain, sep, rest = text.partition("://")
        if not sep:
            domain, rest = "persistent", text
            parts = rest.split("/")
            if len(parts) == 1:
                parts = [DEFAULT_TENANT, DEFAULT_NAMESPACE, parts[0]]
        else:
            parts = rest.split("/", 2)
        if domain not in _DOMAINS:
            raise InvalidTopicNameError(f"topic {text!r}: unknown domain {domain!r}")
        if len(parts) != 3:
            raise InvalidTopicNameError(
                f"topic {text!r} is not <domain>://<tenant>/<namespace>/<topic>"
            )
        tenant, namespace, local = parts
        for part in (tenant, namespace):
            if not is_valid_name(part):
                raise InvalidTopicNameError(f"topic {text!r}: invalid tenant or namespace")
        # ``.`` and ``..`` would be path components of the topic's metadata, which no
        # store takes (Pulsar's stores fail on them too, deeper down).
        if local in ("", ".", "..") or "\n" in local or "\x00" in local:
            raise InvalidTopicNameError(f"topic {text!r}: invalid local name")
        return cls(domain, tenant, namespace, local)

    def __str__(self) -> str:
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self.local_name}"

    @property
    def namespace_name(self) -> str:
        return f"{self.tenant}/{self.namespace}"

    @property
    def persistent(self) -> bool:
        return self.domain == "persistent"

    @property
    def partition_index(self) -> int:
        """The partition number, or -1 for a topic that is not a partition."""
        base, sep, index = self.local_name.rpartition(PARTITION_SUFFIX)
        if sep and base and index.isdigit():
            return int(index)
        return -1

    @property
    def partitioned_topic(self) -> TopicName:
        """The partitioned topic this partition belongs to (itself if not a partition)."""
        if self.partition_index < 0:
            return self
        base = self.local_name.rpartition(PARTITION_SUFFIX)[0]
        return TopicName(self.domain, self.tenant, self.namespace, base)

    def partition(self, index: int) -> TopicName:
        return TopicName(
            self.domain, self.tenant, self.namespace, f"{self.local_name}{PARTITION_SUFFIX}{index}"
        )

    @classmethod
    def from_managed_ledger_name(cls, name: str) -> TopicName:
        """The topic whose ``managed_ledger_name`` is ``name``."""
        tenant, namespace, domain, local = name.split("/", 3)
        return cls(domain, tenant, namespace, unquote(local))

    @property
    def rest_path(self) -> str:
        """``persistent/tenant/namespace/<local name, URL-encoded>``: the topic in the admin
        API's paths (``/admin/v2/<rest_path>/stats``)."""
        parts = (self.tenant, self.namespace, self.local_name)
        return f"{self.domain}/" + "/".join(quote(part, safe="") for part in parts)

    @property
    def managed_ledger_name(self) -> str:
        """``tenant/namespace/persistent/<local name, URL-encoded>`` (Pulsar's layout)."""
        return f"{self.tenant}/{self.namespace}/{self.domain}/{quote(self.local_name, safe='')}"
