"""Fixtures for the tests on the real local cluster (marker `k8s`)."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devstack.cluster import (
    TRAINER_IMAGE,
    RealCluster,
    build_trainer_image,
    cluster_setting,
    import_images,
    service_env,
    start_cluster,
)
from devstack.confinement import open_directory
from devstack.relay import Relay
from devstack.s3server import S3Server
from devstack.stack import Stack, free_port
from worker.launchers.kubernetes.config import TrainerS3Keys


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/k8s/" in item.nodeid:
            item.add_marker(pytest.mark.k8s)
    # The test that stops the cluster runs after every test that uses it.
    items.sort(key=lambda item: item.get_closest_marker("cluster_stop") is not None)


@pytest.fixture(scope="session")
def real_cluster() -> RealCluster:
    kubeconfig = start_cluster()
    build_trainer_image()
    import_images(TRAINER_IMAGE)
    cluster = RealCluster(kubeconfig=kubeconfig, node_ip=cluster_setting("NODE_IP"))
    cluster.prepare_node()
    return cluster


@pytest.fixture
def namespace(real_cluster: RealCluster) -> Iterator[str]:
    name = real_cluster.namespace()
    yield name
    real_cluster.delete_namespace(name)


@pytest.fixture(scope="session")
def pod_s3(real_cluster: RealCluster, s3_server: S3Server) -> Iterator[str]:
    """The session's S3 server as pods reach it: a relay on the node's address."""
    port = int(s3_server.endpoint_url.rsplit(":", 1)[1])
    relay = Relay(real_cluster.node_ip, port)
    real_cluster.s3_keys = TrainerS3Keys(s3_server.access_key, s3_server.secret_key)
    yield relay.url
    relay.close()


@pytest.fixture
def relay_to() -> Iterator[Callable[..., Relay]]:
    relays: list[Relay] = []

    def make(host: str, port: int, **kwargs: Any) -> Relay:
        relay = Relay(host, port, **kwargs)
        relays.append(relay)
        return relay

    yield make
    for relay in relays:
        relay.close()


@pytest.fixture
def make_k8s_stack(
    real_cluster: RealCluster, namespace: str, s3_server: S3Server, pod_s3: str
) -> Iterator[Callable[..., Stack]]:
    """The whole service (API, Celery worker and beat) with GPUJOBS_LAUNCHER=kubernetes on the
    real cluster, its spot market replaying `trace` (1 = spot available) every `tick_seconds`.
    Every capacity type is the node's one label value: a single node holds them all."""
    tmp = open_directory()
    stacks: list[Stack] = []
    relays: list[Relay] = []

    def make(*, trace: list[int], tick_seconds: float, env: dict[str, str] | None = None) -> Stack:
        port = free_port()
        # Pods reach this machine at the node's address: the API through a relay, S3 through
        # the session's (pod_s3): one listener per address and port.
        api_relay = Relay(real_cluster.node_ip, port)
        relays.append(api_relay)
        stack = Stack(
            tmp=tmp,
            s3=s3_server,
            trace={"metadata": {"gap_seconds": tick_seconds}, "data": trace},
            extra_env={
                **service_env(
                    real_cluster,
                    namespace=namespace,
                    s3=s3_server,
                    pod_s3_url=pod_s3,
                    public_url=api_relay.url,
                ),
                **(env or {}),
            },
        )
        stack.port, stack.url = port, f"http://127.0.0.1:{port}"
        stacks.append(stack)
        stack.start()
        return stack

    yield make
    for stack in stacks:
        stack.stop()
    for relay in relays:
        relay.close()
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def store(s3_server: S3Server) -> str:
    """A checkpoint prefix of the test's own in the session's S3 server."""
    bucket = "gpujobs-k8s"
    s3_server.create_bucket(bucket)
    return f"s3://{bucket}/{uuid.uuid4().hex[:8]}"


@pytest.fixture
def k8s_stack(make_k8s_stack: Callable[..., Stack]) -> Stack:
    """The service on the cluster with spot always available."""
    stack: Stack = make_k8s_stack(trace=[1] * 100, tick_seconds=60)
    return stack
