"""Writing checkpoints without stalling training.

`save()` copies the state to CPU memory (the only part training waits for) and hands the copy
to a background thread that serializes, checksums and uploads it; the next save first waits for
the previous one. Every rank uploads its own part and a small record of it; rank 0 writes the
manifest last, once every rank's record for this attempt is in the store.
"""

from __future__ import annotations

import io
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from gpujobs.checkpoints import (
    MANIFEST_FILE,
    SHARED_FILE,
    FileEntry,
    Manifest,
    rank_file,
    rank_record,
    step_dir,
    steps_in,
)
from trainer.checkpoint.store import Store

log = logging.getLogger(__name__)


def to_cpu(obj: Any) -> Any:
    """A deep copy of a state tree with every tensor copied to CPU memory."""
    return SnapshotBuffers().copy(obj)


class SnapshotBuffers:
    """CPU copies of a state tree, reusing the buffers of the previous save.

    Reuse matters: allocating (and first touching) fresh memory for every save costs more than
    the copy itself, and on CUDA pinned buffers let the device-to-host copies run at full speed.
    A buffer is only rewritten by the next save, which waits for the previous upload to finish.

    Tensors are copied storage by storage: tensors that share memory (tied weights, views of
    one flat buffer) share it in the copy too, so torch.save writes it once and torch.load
    gives it back shared.
    """

    def __init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}
        self._copied: dict[tuple[torch.device, int, int], torch.UntypedStorage] = {}
        self._cuda = False

    def copy(self, obj: Any) -> Any:
        self._cuda = False
        self._copied = {}
        try:
            result = self._copy(obj, "")
        finally:
            self._copied = {}  # it holds the source storages' addresses only for this walk
        if self._cuda:
            torch.cuda.synchronize()  # the non-blocking copies must land before upload
        return result

    def _copy(self, obj: Any, path: str) -> Any:
        if isinstance(obj, torch.Tensor):
            return self._tensor(obj.detach(), path)
        if isinstance(obj, dict):
            return {k: self._copy(v, f"{path}/{k}") for k, v in obj.items()}
        if isinstance(obj, list | tuple):
            items = [self._copy(v, f"{path}/{i}") for i, v in enumerate(obj)]
            return items if isinstance(obj, list) else tuple(items)
        return obj

    def _tensor(self, tensor: torch.Tensor, path: str) -> torch.Tensor:
        if tensor.layout != torch.strided:
            return tensor.to("cpu", copy=True)  # sparse and friends have no single storage
        source = tensor.untyped_storage()
        key = (tensor.device, source.data_ptr(), source.nbytes())
        storage = self._copied.get(key) if source.nbytes() else None
        if storage is None:
            storage = self._storage(source, tensor.device, path)
            self._copied[key] = storage
        copy = torch.empty(0, dtype=tensor.dtype)
        return copy.set_(storage, tensor.storage_offset(), tensor.size(), tensor.stride())

    def _storage(
        self, source: torch.UntypedStorage, device: torch.device, path: str
    ) -> torch.UntypedStorage:
        nbytes = source.nbytes()
        buffer = self._buffers.get(path)
        if buffer is None or buffer.numel() != nbytes:
            buffer = torch.empty(nbytes, dtype=torch.uint8, pin_memory=device.type == "cuda")
            self._buffers[path] = buffer
        raw = torch.empty(0, dtype=torch.uint8, device=device).set_(source)
        self._cuda = self._cuda or device.type == "cuda"
        buffer.copy_(raw, non_blocking=device.type == "cuda")
        return buffer.untyped_storage()


def serialize(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


@dataclass
class SaveResult:
    step: int
    ok: bool
    upload_s: float = 0.0
    nbytes: int = 0


class Checkpointer:
    def __init__(
        self,
        store: Store,
        *,
        rank: int,
        world_size: int,
        nonce: str,
        keep_last: int,
        part_timeout_s: float = 600.0,
        on_complete: Callable[[SaveResult], None] | None = None,
    ) -> None:
        self.store = store
        self.rank = rank
        self.world_size = world_size
        self.nonce = nonce
        self.keep_last = keep_last
        self.part_timeout_s = part_timeout_s
        self.on_complete = on_complete
        self.last_complete_step: int | None = None
        self.last_result: SaveResult | None = None
        self._thread: threading.Thread | None = None
        self._buffers = SnapshotBuffers()

    def save(
        self,
        step: int,
        *,
        shared: dict[str, Any] | None,
        part: dict[str, Any],
        meta: dict[str, Any] | None = None,
        wait: bool = False,
    ) -> float:
        """Checkpoint `step`; `shared` is rank 0's. Returns how long training was held up."""
        start = time.perf_counter()
        self.wait()
        snapshot = self._buffers.copy((shared, part))
        self._thread = threading.Thread(
            target=self._write,
            args=(step, snapshot[0], snapshot[1], meta or {}),
            name=f"checkpoint-{step}",
            daemon=True,
        )
        self._thread.start()
        if wait:
            self.wait()
        return time.perf_counter() - start

    def wait(self) -> SaveResult | None:
        """Block until the save in flight (if any) is finished; return how it went."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        return self.last_result

    def _write(
        self, step: int, shared: dict[str, Any] | None, part: dict[str, Any], meta: dict[str, Any]
    ) -> None:
        start = time.perf_counter()
        try:
            nbytes = self._upload(step, shared, part, meta)
        except Exception:
            log.exception("checkpoint at step %d failed; it will not be used", step)
            self.last_result = SaveResult(step=step, ok=False)
            return
        self.last_result = SaveResult(
            step=step, ok=True, upload_s=time.perf_counter() - start, nbytes=nbytes
        )
        self.last_complete_step = step
        if self.on_complete is not None:
            self.on_complete(self.last_result)

    def _upload(
        self, step: int, shared: dict[str, Any] | None, part: dict[str, Any], meta: dict[str, Any]
    ) -> int:
        prefix = step_dir(step)
        data = serialize(part)
        entry = FileEntry.of(data)
        self.store.put(f"{prefix}/{rank_file(self.rank)}", data)
        record = {"nonce": self.nonce, "file": rank_file(self.rank), **vars(entry)}
        self.store.put(f"{prefix}/{rank_record(self.rank)}", json.dumps(record).encode())
        nbytes = len(data)
        if self.rank != 0:
            return nbytes
        assert shared is not None, "rank 0 saves the shared state"
        data = serialize(shared)
        files = {SHARED_FILE: FileEntry.of(data)}
        self.store.put(f"{prefix}/{SHARED_FILE}", data)
        nbytes += len(data)
        files.update(self._rank_entries(step))
        manifest = Manifest(step=step, world_size=self.world_size, files=files, meta=meta)
        self.store.put(f"{prefix}/{MANIFEST_FILE}", manifest.dumps())
        self._prune()
        return nbytes

    def _rank_entries(self, step: int) -> dict[str, FileEntry]:
        """Wait for every rank's record from this attempt (an older attempt may have left stale
        ones under the same step) and return their entries."""
        prefix = step_dir(step)
        deadline = time.monotonic() + self.part_timeout_s
        entries: dict[str, FileEntry] = {}
        while True:
            for rank in range(self.world_size):
                name = rank_file(rank)
                if name in entries:
                    continue
                try:
                    record = json.loads(self.store.get(f"{prefix}/{rank_record(rank)}"))
                except Exception:
                    continue  # not there yet
                if record.get("nonce") == self.nonce:
                    entries[name] = FileEntry(size=record["size"], sha256=record["sha256"])
            if len(entries) == self.world_size:
                return entries
            if time.monotonic() > deadline:
                missing = self.world_size - len(entries)
                raise TimeoutError(f"{missing} rank(s) did not save step {step} in time")
            time.sleep(0.02)

    def _prune(self) -> None:
        """Keep the newest `keep_last` complete checkpoints; drop older ones and leftovers."""
        steps = steps_in(self.store.list())
        complete = sorted((s for s, names in steps.items() if MANIFEST_FILE in names), reverse=True)
        if len(complete) < self.keep_last:
            return
        oldest_kept = complete[self.keep_last - 1]
        for step in sorted(s for s in steps if s < oldest_kept):
            delete_step(self.store, step, steps[step])


def delete_step(store: Store, step: int, names: set[str] | None = None) -> None:
    """Remove one checkpoint, manifest first so that it is never seen half-deleted."""
    prefix = step_dir(step)
    if names is None:
        names = steps_in(store.list(prefix + "/")).get(step, set())
    if MANIFEST_FILE in names:
        store.delete([f"{prefix}/{MANIFEST_FILE}"])
    store.delete([f"{prefix}/{name}" for name in sorted(names - {MANIFEST_FILE})])


def discard_after(store: Store, step: int | None) -> list[int]:
    """Remove checkpoints newer than the one being resumed from (partial or unreadable ones a
    previous attempt left), so that this attempt rewrites those steps from scratch."""
    steps = steps_in(store.list())
    stale = sorted(s for s in steps if step is None or s > step)
    for s in stale:
        delete_step(store, s, steps[s])
    return stale
