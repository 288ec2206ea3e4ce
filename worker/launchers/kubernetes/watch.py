"""React to Job and pod changes as they happen, so a preemption reaches the reconciler at once.

A small informer: two watch streams (Jobs, pods) feed one queue; the consumer keeps the last
seen objects per attempt and reports an attempt's observation whenever it changes. Each stream
remembers the resourceVersion of the last event the consumer processed, so the next call
resumes there instead of replaying (or missing) history.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes import client
from kubernetes import watch as k8s_watch
from kubernetes.client.rest import ApiException

from worker.launchers.base import Observation, ObservedState
from worker.launchers.kubernetes.manifests import (
    ATTEMPT_NAME_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
)

log = logging.getLogger(__name__)

SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
ObserveFn = Callable[[client.V1Job | None, list[client.V1Pod]], Observation]


@dataclass
class _Stream:
    kind: str  # "job" or "pod"
    list_fn: Callable[..., Any]
    # Advanced by the consumer only, after it applied the event: an event queued but never
    # consumed (the caller stopped early) is delivered again by the next call.
    resource_version: str | None = None
    active: k8s_watch.Watch | None = field(default=None, repr=False)


# (stream, event or None for "410 Gone", resourceVersion after the event)
Inbox = queue.Queue[tuple[_Stream, dict[str, Any] | None, str | None]]


class AttemptWatcher:
    """Not thread-safe: one consumer (the reconciler loop) calls `events()` at a time."""

    def __init__(
        self,
        *,
        batch: client.BatchV1Api,
        core: client.CoreV1Api,
        namespace: str,
        observe: ObserveFn,
    ) -> None:
        self._namespace = namespace
        self._observe = observe
        self._streams = (
            _Stream("job", batch.list_namespaced_job),
            _Stream("pod", core.list_namespaced_pod),
        )
        self._jobs: dict[str, client.V1Job] = {}
        self._pods: dict[str, dict[str, client.V1Pod]] = {}  # attempt name -> pod name -> pod
        self._reported: dict[str, Observation] = {}

    def events(self, timeout_s: float) -> Iterator[tuple[str, Observation]]:
        deadline = time.monotonic() + timeout_s
        inbox: Inbox = queue.Queue()
        stop = threading.Event()
        pumps: list[threading.Thread] = []
        try:
            # List, then watch from the list's version: a cache filled event by event from two
            # racing streams would report half-synced states (a Job without its pods).
            stale = [s for s in self._streams if s.resource_version is None]
            if stale:
                yield from self._resync(stale)
            pumps += [self._start_pump(s, deadline, inbox, stop) for s in self._streams]
            while (remaining := deadline - time.monotonic()) > 0:
                try:
                    stream, event, resource_version = inbox.get(timeout=remaining)
                except queue.Empty:
                    break
                if event is None:  # 410 Gone: history compacted past our version
                    yield from self._resync([stream])
                    pumps.append(self._start_pump(stream, deadline, inbox, stop))
                    continue
                name = self._apply(stream.kind, event)
                stream.resource_version = resource_version or stream.resource_version
                if name is not None:
                    yield from self._report([name])
        finally:
            stop.set()
            for stream in self._streams:
                if stream.active is not None:
                    stream.active.stop()
            for pump in pumps:
                pump.join(timeout=2)

    # -- Consumer side -------------------------------------------------------------------------

    def _apply(self, kind: str, event: dict[str, Any]) -> str | None:
        """Update the cache; return the attempt (Job name) the event concerns."""
        if event.get("type") not in ("ADDED", "MODIFIED", "DELETED"):
            return None  # BOOKMARK: only its resourceVersion matters
        obj = event["object"]
        labels = obj.metadata.labels or {}
        if labels.get(MANAGED_BY_LABEL) != MANAGED_BY:
            return None  # the server ignored the selector
        deleted = event["type"] == "DELETED"
        if kind == "job":
            name = obj.metadata.name
            if deleted:
                self._jobs.pop(name, None)
            else:
                self._jobs[name] = obj
            return name
        name = labels.get(ATTEMPT_NAME_LABEL)
        if not name:
            return None
        pods = self._pods.setdefault(name, {})
        if deleted:
            pods.pop(obj.metadata.name, None)
        else:
            pods[obj.metadata.name] = obj
        return name

    def _resync(self, streams: list[_Stream]) -> Iterator[tuple[str, Observation]]:
        for stream in streams:
            listing = stream.list_fn(self._namespace, label_selector=SELECTOR)
            managed = [
                obj
                for obj in listing.items
                if (obj.metadata.labels or {}).get(MANAGED_BY_LABEL) == MANAGED_BY
            ]
            if stream.kind == "job":
                self._jobs = {job.metadata.name: job for job in managed}
            else:
                self._pods = {}
                for pod in managed:
                    name = (pod.metadata.labels or {}).get(ATTEMPT_NAME_LABEL)
                    if name:
                        self._pods.setdefault(name, {})[pod.metadata.name] = pod
            stream.resource_version = listing.metadata.resource_version
        yield from self._report(sorted(set(self._jobs) | set(self._reported)))

    def _report(self, names: list[str]) -> Iterator[tuple[str, Observation]]:
        for name in names:
            job = self._jobs.get(name)
            if job is None:
                if name not in self._reported:
                    continue  # pods of an attempt whose Job this watcher never saw
                self._pods.pop(name, None)
                del self._reported[name]
                observation = Observation(ObservedState.LOST, message="the Job was deleted")
            else:
                observation = self._observe(job, list(self._pods.get(name, {}).values()))
                if self._reported.get(name) == observation:
                    continue
                self._reported[name] = observation
            yield f"{self._namespace}/{name}", observation

    # -- Producer side (one thread per stream) ---------------------------------------------------

    def _start_pump(
        self, stream: _Stream, deadline: float, inbox: Inbox, stop: threading.Event
    ) -> threading.Thread:
        pump = threading.Thread(
            target=self._pump,
            args=(stream, stream.resource_version, deadline, inbox, stop),
            name=f"gpujobs-watch-{stream.kind}",
            daemon=True,
        )
        pump.start()
        return pump

    def _pump(
        self,
        stream: _Stream,
        resource_version: str | None,
        deadline: float,
        inbox: Inbox,
        stop: threading.Event,
    ) -> None:
        while not stop.is_set() and (remaining := deadline - time.monotonic()) > 0:
            watcher = k8s_watch.Watch()
            stream.active = watcher
            kwargs: dict[str, Any] = {
                "label_selector": SELECTOR,
                "allow_watch_bookmarks": True,
                # The server ends the stream at the deadline; the read timeout covers servers
                # that do not (it bounds the wait for the next byte).
                "timeout_seconds": max(1, int(remaining)),
                "_request_timeout": (10, remaining + 1),
            }
            if resource_version:
                kwargs["resource_version"] = resource_version
            try:
                for event in watcher.stream(stream.list_fn, self._namespace, **kwargs):
                    resource_version = watcher.resource_version or resource_version
                    inbox.put((stream, event, resource_version))
                    if stop.is_set():
                        return
            except ApiException as exc:
                if exc.status == 410:
                    inbox.put((stream, None, None))  # the consumer re-lists and restarts us
                    return
                log.warning("watching %ss failed: %s", stream.kind, exc)
                stop.wait(min(1.0, max(0.0, deadline - time.monotonic())))
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                if stop.is_set():
                    return
                if not isinstance(exc, urllib3.exceptions.ReadTimeoutError):
                    log.warning("watch stream for %ss broke: %s", stream.kind, exc)
                    stop.wait(min(1.0, max(0.0, deadline - time.monotonic())))
            finally:
                stream.active = None
