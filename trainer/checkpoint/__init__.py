"""Complete, checksummed, asynchronously written checkpoints in a local directory or on S3."""

from trainer.checkpoint.reader import (
    CheckpointState,
    StoreUnavailable,
    complete_checkpoints,
    latest_complete_step,
    load_latest,
    load_step,
)
from trainer.checkpoint.store import LocalStore, S3Store, Store, open_store
from trainer.checkpoint.writer import Checkpointer, discard_after

__all__ = [
    "CheckpointState",
    "Checkpointer",
    "LocalStore",
    "S3Store",
    "Store",
    "StoreUnavailable",
    "complete_checkpoints",
    "discard_after",
    "latest_complete_step",
    "load_latest",
    "load_step",
    "open_store",
]
