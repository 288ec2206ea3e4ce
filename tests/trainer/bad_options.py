"""A workload module whose OPTIONS is not a list of WorkloadOption: refused before it builds."""

from __future__ import annotations

from typing import Any

OPTIONS = {"features": 4}


def build(args: dict[str, Any]) -> object:
    raise AssertionError("never built: OPTIONS is checked first")
