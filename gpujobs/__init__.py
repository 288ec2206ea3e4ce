"""gpujobs: run GPU training jobs cheaply and reliably."""

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

__version__ = "0.1.0"

__all__ = [
    "AmpDtype",
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
]
