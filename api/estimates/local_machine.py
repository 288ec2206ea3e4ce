"""What the local launcher can run: every rank of a job, on the one machine of its worker.

It starts one process per GPU the spec asks for (nodes x gpus_per_node, one torchrun on this
machine), each with its DataLoader workers: `nodes: 256, gpus_per_node: 8` was placed as 2,048
processes on one machine. Submit and estimate refuse what the machine cannot hold, naming the
field; the bound is an operator's setting (Settings.local_max_ranks, default the CPU count).
A launcher that gives each node a machine of its own (Kubernetes) has nothing to check here
(LauncherTraits.on_this_machine).
"""

from __future__ import annotations

from api.errors import InvalidRequest
from api.settings import Settings
from gpujobs.resources import FieldError
from gpujobs.spec import DataLoaderSpec, JobSpec

# Processes one rank starts with the default DataLoader (itself and its workers): a job may
# start as many processes as the most ranks the machine allows would with the default loader.
PROCESSES_PER_RANK = 1 + DataLoaderSpec().num_workers


def check(spec: JobSpec, *, settings: Settings) -> None:
    """Refuse a shape the local launcher's machine cannot run: a 422 naming each field."""
    if not settings.launcher_traits().on_this_machine:
        return
    found = problems(spec, max_ranks=settings.local_max_ranks)
    if found:
        fields = [FieldError(field=where, reason=reason) for where, reason in found]
        raise InvalidRequest("; ".join(f"{f.field}: {f.reason}" for f in fields), fields=fields)


def problems(spec: JobSpec, *, max_ranks: int) -> list[tuple[str, str]]:
    """(field, reason) for each way the spec exceeds a machine that runs `max_ranks` ranks."""
    r, workers = spec.resources, spec.trainer.dataloader.num_workers
    found = []
    if r.nodes > 1:
        found.append(
            (
                "resources.nodes",
                "the local launcher runs a job on one machine: 1 node (several nodes need the "
                "kubernetes launcher)",
            )
        )
    ranks = r.gpus_per_node  # on one node, which the local launcher runs
    if ranks > max_ranks:
        found.append(
            (
                "resources.gpus_per_node",
                f"the local launcher starts a process per GPU on this machine, which runs at "
                f"most {max_ranks} for a job (GPUJOBS_LOCAL_MAX_RANKS)",
            )
        )
    elif r.nodes == 1 and ranks * (1 + workers) > max_ranks * PROCESSES_PER_RANK:
        most = max_ranks * PROCESSES_PER_RANK // ranks - 1
        found.append(
            (
                "trainer.dataloader.num_workers",
                f"{ranks} ranks with {workers} workers each start {ranks * (1 + workers)} "
                f"processes on this machine, which runs at most {max_ranks * PROCESSES_PER_RANK} "
                f"for a job: at most {most} workers per rank",
            )
        )
    return found
