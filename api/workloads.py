"""What a job may run, as the API refuses it at submit and estimate: a 422 naming the field.

The rules are the contract's (gpujobs.workloads); the allowed module prefixes come from the
settings for the caller's team (Settings.workload_prefixes_for).
"""

from __future__ import annotations

from collections.abc import Sequence

from api.errors import InvalidRequest
from gpujobs import workloads
from gpujobs.resources import FieldError
from gpujobs.spec import TrainerSpec


def check(trainer: TrainerSpec, *, allowed_prefixes: Sequence[str]) -> None:
    found = workloads.problems(trainer.workload, trainer.args, allowed_prefixes)
    if found:
        fields = [FieldError(field=where, reason=reason) for where, reason in found]
        summary = "; ".join(f"{f.field}: {f.reason}" for f in fields[:5])
        raise InvalidRequest(summary, fields=fields)
