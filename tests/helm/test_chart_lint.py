"""``helm lint --strict`` of helm/stripemq (Helm's own linter, through helm-python-sdk) for
every value set of ``helm_chart.VALUE_SETS``: no errors and no warnings (informational
messages, such as "icon is recommended", are allowed)."""

from __future__ import annotations

from typing import Any

import helm_python
import pytest
from helm_chart import CHART, NAMESPACE, VALUE_SETS

INFO, WARNING, ERROR = 1, 2, 3


def _lint(values: dict[str, Any]) -> dict[str, Any]:
    return helm_python.lint(CHART, values, strict=True, namespace=NAMESPACE)


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_strict_lint_has_no_errors_or_warnings(values: dict[str, Any]) -> None:
    result = _lint(values)
    assert result["errors"] == []
    serious = [m for m in result["messages"] if m["severity"] >= WARNING]
    assert serious == [], serious


def test_lint_reports_values_the_schema_refuses() -> None:
    """The linter really checks the values: a negative replica count is an error."""
    result = _lint({"broker": {"replicaCount": -1}})
    assert result["errors"], result
    assert any(
        m["severity"] == ERROR and "/broker/replicaCount" in m["error"] for m in result["messages"]
    ), result["messages"]
