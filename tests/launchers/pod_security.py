"""The `restricted` Pod Security Standard (Kubernetes 1.33), rule by rule, on a pod spec dict.

Written from https://kubernetes.io/docs/concepts/security/pod-security-standards/: the baseline
rules plus the restricted ones. There is no API server here to run the admission plugin.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

PodSpec = dict[str, Any]

BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
SELINUX_TYPES = {
    None,
    "",
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
}
RESTRICTED_VOLUME_TYPES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
SECURE_SECCOMP = {"RuntimeDefault", "Localhost"}


def _containers(spec: PodSpec) -> Iterator[dict[str, Any]]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def restricted_violations(spec: PodSpec, annotations: dict[str, str] | None = None) -> list[str]:
    """Every rule of the restricted profile that `spec` breaks (empty: it passes)."""
    problems: list[str] = []
    pod_sc = spec.get("securityContext") or {}
    containers = list(_containers(spec))

    # -- baseline ----------------------------------------------------------------------------
    if (pod_sc.get("windowsOptions") or {}).get("hostProcess"):
        problems.append("pod: windowsOptions.hostProcess")
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            problems.append(f"pod: {field}")
    for volume in spec.get("volumes") or []:
        if "hostPath" in volume:
            problems.append(f"volume {volume['name']}: hostPath")
    for sysctl in pod_sc.get("sysctls") or []:
        if sysctl["name"] not in SAFE_SYSCTLS:
            problems.append(f"pod: sysctl {sysctl['name']}")
    for key, value in (annotations or {}).items():
        if (
            key.startswith("container.apparmor.security.beta.kubernetes.io/")
            and value not in ("runtime/default",)
            and not value.startswith("localhost/")
        ):
            problems.append(f"annotation {key}: {value}")
    for where, sc in [("pod", pod_sc)] + [
        (c["name"], c.get("securityContext") or {}) for c in containers
    ]:
        apparmor = (sc.get("appArmorProfile") or {}).get("type")
        if apparmor not in (None, "RuntimeDefault", "Localhost"):
            problems.append(f"{where}: appArmorProfile {apparmor}")
        selinux = sc.get("seLinuxOptions") or {}
        if selinux.get("type") not in SELINUX_TYPES or selinux.get("user") or selinux.get("role"):
            problems.append(f"{where}: seLinuxOptions {selinux}")
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            problems.append(f"{where}: seccompProfile Unconfined")
        if sc.get("runAsUser") == 0:
            problems.append(f"{where}: runAsUser 0")
    for container in containers:
        name, sc = container["name"], container.get("securityContext") or {}
        if sc.get("privileged"):
            problems.append(f"{name}: privileged")
        if sc.get("procMount") not in (None, "Default"):
            problems.append(f"{name}: procMount {sc['procMount']}")
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            problems.append(f"{name}: windowsOptions.hostProcess")
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                problems.append(f"{name}: hostPort {port['hostPort']}")
        added = set((sc.get("capabilities") or {}).get("add") or [])
        if added - BASELINE_CAPABILITIES:
            problems.append(f"{name}: capabilities.add {sorted(added - BASELINE_CAPABILITIES)}")

    # -- restricted --------------------------------------------------------------------------
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUME_TYPES:
            problems.append(f"volume {volume['name']}: {sorted(kinds)}")
    pod_non_root = pod_sc.get("runAsNonRoot") is True
    pod_seccomp = (pod_sc.get("seccompProfile") or {}).get("type") in SECURE_SECCOMP
    for container in containers:
        name, sc = container["name"], container.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation is not false")
        non_root = sc.get("runAsNonRoot")
        if non_root is False or (non_root is None and not pod_non_root):
            problems.append(f"{name}: runAsNonRoot is not true")
        seccomp = (sc.get("seccompProfile") or {}).get("type")
        if seccomp is None and not pod_seccomp:
            problems.append(f"{name}: no RuntimeDefault/Localhost seccompProfile")
        capabilities = sc.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            problems.append(f"{name}: capabilities.drop lacks ALL")
        if set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
            problems.append(f"{name}: capabilities.add beyond NET_BIND_SERVICE")
    return problems
