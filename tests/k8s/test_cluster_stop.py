"""Issue 35: stopping the local cluster leaves nothing running or mounted, with a pod running when
it stops, and the cluster starts again from its kept state (warm) with its images still there.

Marker `cluster_stop`: it stops the cluster every other test uses, so it runs after them
(scripts/run-tests.sh runs it once the rest of the k8s half is done; a serial run orders it last).
"""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import pytest

from devstack.cluster import SCRIPTS, TRAINER_IMAGE, RealCluster, cluster_setting, start_cluster

pytestmark = pytest.mark.cluster_stop


def _processes() -> dict[int, tuple[str, str]]:
    """pid -> (executable, command line) of every process this machine shows."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            exe = os.readlink(entry / "exe")
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone, or a kernel thread
        found[int(entry.name)] = (exe, cmdline)
    return found


def _left(*, bin_dir: str, roots: tuple[str, ...], socket: str, marker: str) -> list[str]:
    """Everything of the cluster's still there: its processes, its pods' processes, mounts under
    its folders, pod network namespaces, its bridge, the kubelet's and kube-proxy's rules."""
    left = []
    for pid, (exe, cmdline) in _processes().items():
        if exe.startswith(bin_dir + "/"):
            left.append(f"process {pid}: {cmdline}")
        elif "containerd-shim" in cmdline and socket in cmdline:
            left.append(f"shim {pid}: {cmdline}")
        elif marker in cmdline:
            left.append(f"the pod's process {pid}: {cmdline}")
    for line in Path("/proc/mounts").read_text().splitlines():
        target = line.split()[1]
        if any(target == root or target.startswith(root + "/") for root in roots):
            left.append(f"mount {target}")
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    left += [f"netns {line.split()[0]}" for line in netns.splitlines() if line.startswith("cni-")]
    bridge = cluster_setting("BRIDGE")
    if subprocess.run(["ip", "link", "show", bridge], capture_output=True).returncode == 0:
        left.append(f"link {bridge}")
    for family in ("iptables", "ip6tables"):
        for table in ("filter", "nat", "mangle", "raw"):
            rules = subprocess.run([family, "-t", table, "-S"], capture_output=True, text=True)
            left += [f"{family} {table}: {r}" for r in rules.stdout.splitlines() if "KUBE-" in r]
    return left


def test_stop_leaves_nothing_running_or_mounted_and_starts_again_warm(
    real_cluster: RealCluster,
) -> None:
    cluster = real_cluster
    namespace = cluster.namespace(restricted=False)
    # A number no other process on this machine has in its command line.
    seconds = str(random.randint(10**8, 10**9))
    cluster.kubectl(
        "run", "left-running", "-n", namespace, f"--image={TRAINER_IMAGE}",
        "--image-pull-policy=IfNotPresent", "--restart=Never", "--command", "--", "sleep", seconds,
    )  # fmt: skip
    cluster.wait(
        lambda: (
            cluster.core.read_namespaced_pod("left-running", namespace).status.phase == "Running"
        ),
        timeout=120,
        what="the pod to run",
    )
    assert any(seconds in cmdline for _, cmdline in _processes().values())
    settings = {
        name: cluster_setting(name) for name in ("BIN_DIR", "STATE", "RUN", "CONTAINERD_SOCK")
    }

    stopped = subprocess.run(["bash", str(SCRIPTS / "down.sh")], capture_output=True, text=True)
    assert stopped.returncode == 0, stopped.stderr
    left = _left(
        bin_dir=settings["BIN_DIR"],
        roots=(settings["STATE"], settings["RUN"]),
        socket=settings["CONTAINERD_SOCK"],
        marker=seconds,
    )
    try:
        assert left == [], "\n".join(left)
    finally:
        # The kept state is a warm start: the same kubeconfig, the node back, the image still
        # imported (no build, no import here), and the pod's namespace still known.
        assert start_cluster() == cluster.kubeconfig
    cluster.wait(
        lambda: any(
            c.type == "Ready" and c.status == "True"
            for c in cluster.core.read_node(cluster_setting("NODE_NAME")).status.conditions or []
        ),
        timeout=120,
        what="the node to be Ready again",
    )
    images = subprocess.run(
        [f"{settings['BIN_DIR']}/ctr", "--address", settings["CONTAINERD_SOCK"], "-n", "k8s.io",
         "images", "ls", "-q"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert any(TRAINER_IMAGE in line for line in images.splitlines()), images
    cluster.delete_namespace(namespace)
