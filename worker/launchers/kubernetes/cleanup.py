"""`python -m worker.launchers.kubernetes.cleanup`: delete every attempt the Kubernetes launcher
made in its namespace (GPUJOBS_K8S_NAMESPACE), and wait for their pods to stop.

The Helm chart runs it as its pre-delete hook, as the worker's service account, so `helm
uninstall` leaves no trainer Job, pod or Secret behind. The database is the chart's to keep: its
jobs' attempts read lost on the next install and resume from their checkpoints.
"""

from __future__ import annotations

import argparse
import sys

from api.settings import Settings
from worker.launchers.kubernetes.launcher import KubernetesLauncher


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=180.0,
        help="how long to wait for the pods to stop (their trainers checkpoint first)",
    )
    args = parser.parse_args(argv)
    launcher = KubernetesLauncher.from_settings(Settings())
    names = launcher.delete_all_attempts(timeout_s=args.timeout_s)
    print(f"deleted {len(names)} attempt(s) in namespace {launcher.config.namespace}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
