"""Metadata-store helpers for tests: the whole tree under a path, to compare before and
after an operation that must write nothing."""

from __future__ import annotations

from stripemq.metadata import MetadataStore


async def metadata_tree(store: MetadataStore, root: str = "/") -> dict[str, tuple[bytes, int]]:
    """Every node under ``root`` (itself included unless it is ``/``): data and version.

    Raises:
        MetadataError: the store failed.
    """
    tree: dict[str, tuple[bytes, int]] = {}
    pending = [root]
    while pending:
        path = pending.pop()
        if path != "/":
            found = await store.get(path)
            if found is None:  # deleted while walking
                continue
            data, stat = found
            tree[path] = (data, stat.version)
        for child in await store.children(path):
            pending.append(f"/{child}" if path == "/" else f"{path}/{child}")
    return tree
