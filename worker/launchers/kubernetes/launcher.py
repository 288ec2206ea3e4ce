"""The Kubernetes launcher: one batch/v1 Job per attempt, handles are `namespace/job-name`."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

from worker.launchers.base import Capability, LaunchRequest, Observation, ObservedState
from worker.launchers.kubernetes import kueue
from worker.launchers.kubernetes.config import KubernetesLauncherConfig
from worker.launchers.kubernetes.manifests import (
    ATTEMPT_ID_LABEL,
    ATTEMPT_NAME_LABEL,
    CONTAINER_NAME,
    KUEUE_QUEUE_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    build_manifests,
    label_value,
    owner_reference,
    secret_name,
)
from worker.launchers.kubernetes.observe import (
    VERDICT_ANNOTATION,
    assess,
    rank_order,
    scale_up_refused,
    unschedulable_pods,
    verdict_annotation,
)

if TYPE_CHECKING:
    from api.settings import Settings

log = logging.getLogger(__name__)


def load_api_client() -> client.ApiClient:
    """In-cluster credentials when running in a pod, else the local kubeconfig."""
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        config.load_kube_config(client_configuration=configuration)
    return client.ApiClient(configuration)


def make_handle(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def parse_handle(handle: str) -> tuple[str, str]:
    namespace, sep, name = handle.partition("/")
    if not (sep and namespace and name):
        raise ValueError(f"not a Kubernetes attempt handle: {handle!r}")
    return namespace, name


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _is(exc: ApiException, status: int) -> bool:
    return bool(exc.status == status)


class KubernetesLauncher:
    name = "kubernetes"
    # Spot comes and goes per node pool, which the cluster does not say ahead: no probe. Its
    # pods die with their nodes, not with the worker: nothing to drain. Standby: each attempt is
    # its own Job, Secret and Service, named after the attempt and deleted by name, never by a
    # job-wide selector, so a standby lives and ends beside the running attempt.
    capabilities: frozenset[Capability] = frozenset({Capability.STANDBY})

    def __init__(
        self,
        launcher_config: KubernetesLauncherConfig,
        *,
        api_client: client.ApiClient | None = None,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self.config = launcher_config
        self._api_client = api_client
        self._clock = clock
        self._events_forbidden = False
        self._workloads_unreadable = False

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        api_client: client.ApiClient | None = None,
        **overrides: Any,
    ) -> KubernetesLauncher:
        launcher_config = KubernetesLauncherConfig.from_settings(settings, **overrides)
        return cls(launcher_config, api_client=api_client)

    # Credentials are loaded on first use, not at construction: a process that builds the
    # launcher but never calls it (the API without pods to read logs from, a CLI) starts
    # without a kubeconfig.
    @functools.cached_property
    def _api(self) -> client.ApiClient:
        return self._api_client if self._api_client is not None else load_api_client()

    @functools.cached_property
    def _batch(self) -> client.BatchV1Api:
        return client.BatchV1Api(self._api)

    @functools.cached_property
    def _core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self._api)

    @functools.cached_property
    def _custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self._api)

    # -- Launcher protocol -------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> str:
        manifests = build_manifests(request, self.config)
        namespace = self.config.namespace
        # The Secret comes first so the pod never starts without its token.
        self._create(self._core.create_namespaced_secret, namespace, manifests.secret)
        if manifests.service is not None:
            self._create(self._core.create_namespaced_service, namespace, manifests.service)
        job = self._create(self._batch.create_namespaced_job, namespace, manifests.job)
        if job is None:
            job = self._batch.read_namespaced_job(manifests.job.metadata.name, namespace)
            labels = job.metadata.labels or {}
            if labels.get(ATTEMPT_ID_LABEL) != label_value(request.attempt_id):
                raise RuntimeError(
                    f"Job {namespace}/{job.metadata.name} exists for another attempt "
                    f"({labels.get(ATTEMPT_ID_LABEL)!r}), not {request.attempt_id!r}"
                )
        self._adopt(
            job,
            secret_name=manifests.secret.metadata.name,
            has_service=manifests.service is not None,
        )
        return make_handle(namespace, job.metadata.name)

    def status(self, handle: str) -> Observation:
        namespace, name = parse_handle(handle)
        job = self._read_job(namespace, name)
        pods = self._pods(namespace, name) if job is not None else []
        seen = functools.partial(
            assess,
            job,
            pods,
            now=self._clock(),
            unschedulable_timeout_s=self.config.unschedulable_timeout_s,
            start_timeout_s=self.config.start_timeout_s,
            gone_nodes=self._gone_nodes(pods),
            workload=self._workload(job) if job is not None else None,
        )
        assessment = seen()
        # The autoscaler's word is read only for a live attempt that is pending, not for one
        # being deleted or already given up (a cancel reads status too).
        if assessment.observation.state is ObservedState.PENDING and self.config.autoscaler_verdict:
            refusal = self._scale_up_refused(namespace, pods)
            if refusal is not None:
                assessment = seen(scale_up_refused=refusal)
        if assessment.give_up:
            self._give_up(namespace, name, assessment.observation)
        return assessment.observation

    def cancel(self, handle: str) -> None:
        """Delete the Job; its pods get SIGTERM and the grace period to checkpoint."""
        namespace, name = parse_handle(handle)
        self._delete_attempt(namespace, name)

    def delete_all_attempts(self, *, timeout_s: float) -> list[str]:
        """Delete every attempt this launcher made in its namespace, running or finished, and
        wait up to `timeout_s` for their pods to stop (a running trainer checkpoints in its
        grace period). What `helm uninstall` runs first (the chart's pre-delete hook), so no
        trainer Job, pod or Secret outlives the release; the database keeps the jobs, whose
        attempts read lost on the next install and resume from their checkpoints."""
        namespace = self.config.namespace
        selector = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
        jobs = self._batch.list_namespaced_job(namespace, label_selector=selector).items
        # The label checked again: nothing but the launcher's own Jobs is ever deleted, even by
        # a server that ignored the selector.
        names = [
            job.metadata.name
            for job in jobs
            if (job.metadata.labels or {}).get(MANAGED_BY_LABEL) == MANAGED_BY
        ]
        for name in names:
            self._delete_attempt(namespace, name)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            pods = self._core.list_namespaced_pod(namespace, label_selector=selector).items
            if not pods:
                break
            time.sleep(1.0)
        return names

    def _give_up(self, namespace: str, name: str, observation: Observation) -> None:
        """End an attempt that would never end by itself, and free the nodes its pods hold.

        The verdict goes on the Job first: while the deletion runs, status() reads it back
        instead of "being deleted", so a retried reconcile pass closes the attempt the same way.
        """
        log.warning("giving up attempt %s/%s: %s", namespace, name, observation.message)
        patch = {"metadata": {"annotations": {VERDICT_ANNOTATION: verdict_annotation(observation)}}}
        try:
            self._batch.patch_namespaced_job(name, namespace, patch)
        except ApiException as exc:
            if _is(exc, 404):
                return
            raise
        self._delete_attempt(namespace, name)

    def _delete_attempt(self, namespace: str, name: str) -> None:
        # Foreground keeps the Job visible (status: cancelled) until its pods are gone.
        options = client.V1DeleteOptions(propagation_policy="Foreground")
        self._delete(self._batch.delete_namespaced_job, name, namespace, body=options)
        # Owner references collect these too; deleting them here also covers a launch that
        # stopped before adopting them.
        self._delete(self._core.delete_namespaced_service, name, namespace)
        self._delete(self._core.delete_namespaced_secret, secret_name(self.config, name), namespace)

    def logs(self, handle: str, *, follow: bool = False) -> Iterator[str]:
        """Rank 0's log (best effort: nothing while the pod has not started)."""
        namespace, name = parse_handle(handle)
        pods = self._pods(namespace, name)
        if not pods:
            return
        pod = min(pods, key=rank_order)
        # Raw response, decoded here: kubernetes 36 returns the repr of the bytes for text
        # responses and its Watch sends `watch=True` instead of `follow=True` to the log
        # endpoint (kubernetes-client/python#2596).
        try:
            response = self._core.read_namespaced_pod_log(
                pod.metadata.name,
                namespace,
                container=CONTAINER_NAME,
                follow=follow,
                _preload_content=False,
            )
        except ApiException as exc:
            # 400: the container has not started yet; 404: the pod went away.
            if exc.status in (400, 404):
                return
            raise
        try:
            # Text with its line ends, as every launcher's logs are: the API's reader joins
            # what it is given, and bare lines ran together into one (seen on a real cluster).
            for line in iter_resp_lines(response):
                yield line + "\n"
        finally:
            # Closed, not returned to the pool: a follow stream stopped early still has data.
            response.close()
            response.release_conn()

    # -- Internals ---------------------------------------------------------------------------

    def _create(self, create: Callable[..., Any], namespace: str, body: Any) -> Any:
        """The created object, or None when it already existed (a retried launch)."""
        try:
            return create(namespace, body)
        except ApiException as exc:
            if _is(exc, 409):
                return None
            raise

    def _delete(self, delete: Callable[..., Any], name: str, namespace: str, **kwargs: Any) -> None:
        try:
            delete(name, namespace, **kwargs)
        except ApiException as exc:
            if not _is(exc, 404):
                raise

    def _adopt(self, job: client.V1Job, *, secret_name: str, has_service: bool) -> None:
        if not job.metadata.uid:
            log.warning("Job %s has no uid; its Secret and Service stay unowned", job.metadata.name)
            return
        reference = self._api.sanitize_for_serialization(owner_reference(job))
        patch = {"metadata": {"ownerReferences": [reference]}}
        namespace = self.config.namespace
        self._core.patch_namespaced_secret(secret_name, namespace, patch)
        if has_service:
            self._core.patch_namespaced_service(job.metadata.name, namespace, patch)

    def _read_job(self, namespace: str, name: str) -> client.V1Job | None:
        try:
            return self._batch.read_namespaced_job(name, namespace)
        except ApiException as exc:
            if _is(exc, 404):
                return None
            raise

    def _scale_up_refused(self, namespace: str, pods: list[client.V1Pod]) -> str | None:
        """The autoscaler's refusal to add a node for any of the attempt's unschedulable pods:
        a gang that cannot get a node for one of them cannot start."""
        for stuck in unschedulable_pods(pods) if not self._events_forbidden else []:
            try:
                events = self._core.list_namespaced_event(
                    namespace,
                    field_selector=f"involvedObject.name={stuck.pod}",
                    resource_version="0",  # from the API server's cache, not etcd
                ).items
            except ApiException as exc:
                if not _is(exc, 403):
                    raise
                # An operator's own Role without events: the timeout alone decides.
                if not self._events_forbidden:
                    log.warning("cannot list events in %s (403): %s", namespace, exc.reason)
                self._events_forbidden = True
                return None
            # Filtered here as well, as pods are.
            mine = [e for e in events if e.involved_object and e.involved_object.name == stuck.pod]
            refusal = scale_up_refused(mine, since=stuck.since)
            if refusal is not None:
                return refusal
        return None

    def _workload(self, job: client.V1Job) -> kueue.Workload | None:
        """Kueue's Workload of a suspended Job in a queue: whether it waits for quota or was
        evicted. None without one (not yet made), or where the API has no Workloads (Kueue
        not installed) or the launcher may not list them: it then reads as waiting."""
        labels = job.metadata.labels or {}
        suspended = job.spec is not None and job.spec.suspend
        if not suspended or KUEUE_QUEUE_LABEL not in labels or self._workloads_unreadable:
            return None
        try:
            found = self._custom.list_namespaced_custom_object(
                kueue.GROUP,
                kueue.VERSION,
                job.metadata.namespace,
                kueue.WORKLOADS,
                label_selector=f"{kueue.JOB_UID_LABEL}={job.metadata.uid}",
            )
        except ApiException as exc:
            if _is(exc, 404):
                return None  # no Workloads in this API (yet): asked again next time
            if not _is(exc, 403):
                raise
            # An operator's own Role without workloads: not asked again.
            log.warning(
                "cannot list Kueue workloads in %s (403): a Job Kueue evicts reads as waiting",
                job.metadata.namespace,
            )
            self._workloads_unreadable = True
            return None
        # Filtered here as well, as pods are.
        mine = [
            item
            for item in found.get("items") or []
            if (item.get("metadata", {}).get("labels") or {}).get(kueue.JOB_UID_LABEL)
            == job.metadata.uid
        ]
        return mine[0] if mine else None

    def _pods(self, namespace: str, name: str) -> list[client.V1Pod]:
        pods = self._core.list_namespaced_pod(
            namespace, label_selector=f"{ATTEMPT_NAME_LABEL}={name}"
        ).items
        # Filtered here as well: the selector is a request, not every server (or test
        # emulator) honours it.
        return [
            pod
            for pod in pods
            if (pod.metadata.labels or {}).get(ATTEMPT_NAME_LABEL) == name
            and (pod.metadata.labels or {}).get(MANAGED_BY_LABEL) == MANAGED_BY
        ]

    def _gone_nodes(self, pods: list[client.V1Pod]) -> frozenset[str]:
        """Nodes of pods that look cut off and whose Node object was deleted (spot reclaim)."""
        gone: set[str] = set()
        for pod in pods:
            node = pod.spec.node_name if pod.spec else None
            if node is None or node in gone or not _looks_cut_off(pod):
                continue
            try:
                self._core.read_node(node)
            except ApiException as exc:
                if _is(exc, 404):
                    gone.add(node)
                elif not _is(exc, 403):  # no RBAC for nodes: skip the check
                    raise
        return frozenset(gone)


def _looks_cut_off(pod: client.V1Pod) -> bool:
    """A running pod the node controller marked not ready: only then is a Node lookup worth it."""
    if pod.status is None or pod.status.phase not in ("Running", "Unknown"):
        return False
    return any(c.type == "Ready" and c.status != "True" for c in pod.status.conditions or [])
