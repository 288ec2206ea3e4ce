"""gpujobs: run GPU training jobs cheaply and reliably."""

from gpujobs.client import AsyncClient, Client
from gpujobs.resources import Job, JobAttempt, JobEvent, JobStatus, Page, Progress
from gpujobs.spec import (
    AmpDtype,
    CapacitySpec,
    CapacityType,
    CheckpointSpec,
    DataLoaderSpec,
    JobSpec,
    ResourcesSpec,
    TrainerSpec,
)
from gpujobs.version import __version__

__all__ = [
    "AmpDtype",
    "AsyncClient",
    "Client",
    "CapacitySpec",
    "CapacityType",
    "CheckpointSpec",
    "DataLoaderSpec",
    "Job",
    "JobAttempt",
    "JobEvent",
    "JobSpec",
    "JobStatus",
    "Page",
    "Progress",
    "ResourcesSpec",
    "TrainerSpec",
    "__version__",
]
