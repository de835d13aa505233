"""Reading a Prometheus text page in tests: its metric families, and one sample's value."""

from __future__ import annotations

from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families


def families(text: str | bytes) -> dict[str, Metric]:
    """The page's metric families by name."""
    if isinstance(text, bytes):
        text = text.decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def value(found: dict[str, Metric], name: str, **labels: str) -> float:
    """The one sample called ``name`` (in any family) whose labels include ``labels``."""
    samples = [
        s.value
        for family in found.values()
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(samples) == 1, (name, labels, samples)
    return samples[0]
