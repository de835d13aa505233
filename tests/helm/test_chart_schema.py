"""Every object helm/stripemq renders is valid Kubernetes for 1.29 and 1.33, checked with
kubernetes-validate in strict mode (unknown fields and wrong types are errors, which
``helm lint`` does not report), for every value set of ``helm_chart.VALUE_SETS``."""

from __future__ import annotations

import copy
import functools
from typing import Any

import kubernetes_validate
import pytest
from helm_chart import VALUE_SETS, documents, of_kind

KUBERNETES_VERSIONS = ("1.29.0", "1.33.0")


@functools.cache
def _documents(value_set: str) -> list[dict[str, Any]]:
    return documents(VALUE_SETS[value_set])


def _name(doc: dict[str, Any]) -> str:
    return f"{doc['kind']}/{doc['metadata']['name']}"


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_every_document_is_valid_kubernetes(value_set: str, version: str) -> None:
    docs = _documents(value_set)
    assert docs
    problems = []
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{_name(doc)}: {exc.message} at {list(exc.path)}")
    assert problems == []


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_names_are_unique_per_kind(value_set: str) -> None:
    names = [_name(doc) for doc in _documents(value_set)]
    assert len(names) == len(set(names)), names


@pytest.mark.parametrize(
    "spoil",
    [
        lambda pod: pod["containers"][0].update(imagePullPolcy="Always"),  # a misspelt field
        lambda pod: pod["containers"][0]["ports"][0].update(containerPort="8080"),  # a string
        lambda pod: pod.update(terminationGracePeriod=30),  # not a PodSpec field
    ],
    ids=["unknown-field", "wrong-type", "unknown-pod-field"],
)
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_strict_validation_rejects_what_it_should(spoil: Any, version: str) -> None:
    """The check can fail: a spoilt copy of a rendered StatefulSet is refused."""
    statefulset = copy.deepcopy(of_kind(_documents("defaults"), "StatefulSet")[0])
    kubernetes_validate.validate(statefulset, version, strict=True)
    spoil(statefulset["spec"]["template"]["spec"])
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(statefulset, version, strict=True)
