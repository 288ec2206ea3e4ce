#!/usr/bin/env bash
# Can this machine run the local cluster? Says plainly what is missing, and exits 1 if anything is.
set -uo pipefail
missing=()
[ "$(id -u)" = 0 ] || missing+=("root (the kubelet and containerd mount, and make network namespaces)")
grep -qw overlay /proc/filesystems || missing+=("the overlay filesystem (containerd's snapshotter)")
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  for c in cpu memory pids; do
    grep -qw $c /sys/fs/cgroup/cgroup.controllers || missing+=("the $c cgroup controller")
  done
else
  for c in cpu cpuacct memory pids devices freezer cpuset; do
    [ -d /sys/fs/cgroup/$c ] || missing+=("the $c cgroup (v1) hierarchy")
  done
fi
ip link add gjprobe0 type bridge 2>/dev/null && ip link del gjprobe0 || missing+=("bridge network devices")
ip netns add gjprobe 2>/dev/null && ip netns del gjprobe || missing+=("network namespaces")
command -v iptables >/dev/null || missing+=("iptables (Debian package iptables)")
command -v openssl >/dev/null || missing+=("openssl")
command -v docker >/dev/null && docker info >/dev/null 2>&1 || missing+=("a running Docker engine (images are built with it: make docker)")
command -v go >/dev/null || missing+=("Go (the components are built from the Go module proxy)")
command -v gcc >/dev/null || missing+=("gcc (runc and the pause binary)")
[ -f /usr/include/seccomp.h ] || missing+=("libseccomp-dev (runc's seccomp support)")
if [ ${#missing[@]} -gt 0 ]; then
  echo "cluster: this machine cannot run the local cluster; missing:" >&2
  printf '  - %s\n' "${missing[@]}" >&2
  exit 1
fi
