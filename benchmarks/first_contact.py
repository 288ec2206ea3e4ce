"""A newcomer's first contact, as root, from a clone in a private folder: the README's steps.

    python -m benchmarks.first_contact [--spec examples/first-run.yaml]

`git clone` into a folder of mode 0700 (as `/root` is), then what `make run` starts (the
embedded service, `python -m worker.standalone`) and the README's first job through the CLI
(`gpujobs submit examples/first-run.yaml --wait -y`). To stay fast it uses the installed
environment: this checkout's virtualenv, hard-linked into the clone as `.venv` (so the
interpreter's packages are out of other users' reach too, as a newcomer's would be), not a fresh
`pip install`. Trainers still run as their jobs' own uids; the service lays out what they need
where they can reach it (worker/launchers/runtime.py), and nothing of the private folder is
opened. Measures the time to a serving API (the first start lays out the trainers' runtime) and
from submit to SUCCEEDED; writes benchmarks/results/first_contact.json. The e2e test
(tests/e2e/test_first_contact.py) runs the same steps and checks what happened, not how fast.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from devstack.ports import free_port, wait_for

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SPEC = "examples/first-run.yaml"
START_TIMEOUT_S = 300.0
JOB_TIMEOUT_S = 900.0
CANCEL_TIMEOUT_S = 120.0
TRAINERS_LINE = "trainers' directories:"


@dataclass
class FirstContact:
    clone: Path
    spec: str
    start_s: float = 0.0  # `make run` to a serving API
    job_s: float = 0.0  # submit to SUCCEEDED
    exit_code: int | None = None
    output: str = ""
    trainer_uids: tuple[int, ...] = ()
    trainer_home: str = ""
    private_mode: int = 0


@contextmanager
def private_clone() -> Iterator[Path]:
    """A clone of this repository's HEAD, with its virtualenv, in a folder only root may enter."""
    private = Path(tempfile.mkdtemp(prefix="gpujobs-private-"))
    os.chmod(private, 0o700)
    clone = private / "gpujobs"
    try:
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        _overlay_working_tree(clone)
        subprocess.run(["cp", "-al", str(ROOT / ".venv"), str(clone / ".venv")], check=True)
        yield clone
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _overlay_working_tree(clone: Path) -> None:
    """What is here and not yet committed, on top of the clone (nothing, on CI's clean tree)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    here = {name for name in listed if name and (ROOT / name).is_file()}
    for name in here:
        target = clone / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    committed = (
        subprocess.run(["git", "ls-files", "-z"], cwd=clone, capture_output=True, check=True)
        .stdout.decode()
        .split("\0")
    )
    for name in committed:
        if name and name not in here:
            (clone / name).unlink(missing_ok=True)


def run(clone: Path, *, spec: str = SPEC) -> FirstContact:
    """The README's steps in `clone`, as its user would run them; the service is stopped after."""
    result = FirstContact(clone=clone, spec=spec, private_mode=clone.parent.stat().st_mode & 0o777)
    with service(clone, result) as newcomer:
        if newcomer is None:
            return result
        submitted = time.monotonic()
        cli = subprocess.run(
            [newcomer.python, "-m", "gpujobs.cli", "submit", spec, "--wait", "-y"], cwd=clone,
            env=newcomer.env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S, check=False,
        )  # fmt: skip
        result.job_s = time.monotonic() - submitted
        result.exit_code = cli.returncode
        result.output = cli.stdout + cli.stderr
    return result


def run_curl(clone: Path, *, timeout_s: float = JOB_TIMEOUT_S) -> FirstContact:
    """The README's job over plain HTTP: its curl body, with its headers and the token from
    where its line reads it, then the job polled until it ends. `exit_code` is 0 when it
    SUCCEEDED; `output` holds the job as shown at the end and its events."""
    result = FirstContact(
        clone=clone, spec="README curl", private_mode=clone.parent.stat().st_mode & 0o777
    )
    with service(clone, result) as newcomer:
        if newcomer is None:
            return result
        credentials = Path(newcomer.env["HOME"]) / ".config" / "gpujobs" / "credentials.json"
        token = json.loads(credentials.read_text())["token"]
        headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "first-try"}
        submitted = time.monotonic()
        with httpx.Client(base_url=f"http://127.0.0.1:{newcomer.port}", headers=headers) as api:
            job = api.post("/v1/jobs", json=readme_curl_body()).raise_for_status().json()
            while job["status"] not in ENDED and time.monotonic() - submitted < timeout_s:
                time.sleep(1.0)
                job = api.get(f"/v1/jobs/{job['id']}").raise_for_status().json()
            events = api.get(f"/v1/jobs/{job['id']}/events").json()
            if job["status"] not in ENDED:  # its trainer would outlive the service
                api.post(f"/v1/jobs/{job['id']}/cancel")
                with contextlib.suppress(AssertionError):  # the job as it was is the result
                    wait_for(
                        lambda: api.get(f"/v1/jobs/{job['id']}").json()["status"] in ENDED,
                        timeout=CANCEL_TIMEOUT_S,
                        what="the job to be cancelled",
                    )
        result.job_s = time.monotonic() - submitted
        result.exit_code = 0 if job["status"] == "SUCCEEDED" else 1
        result.output = json.dumps({"job": job, "events": events}, indent=1)
    return result


ENDED = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})


def readme_curl_body(readme: Path = ROOT / "README.md") -> dict[str, object]:
    """The body of the README's `curl -X POST .../v1/jobs`, as a reader copies it."""
    text = readme.read_text()
    command = text[text.index("curl -s -X POST") :]
    quoted = command[command.index("-d '") + len("-d '") :]
    body: dict[str, object] = json.loads(quoted[: quoted.index("'")])
    return body


@dataclass(frozen=True)
class Newcomer:
    """The service a newcomer started, and how they reach it."""

    python: str
    port: int
    env: dict[str, str]


@contextmanager
def service(clone: Path, result: FirstContact) -> Iterator[Newcomer | None]:
    """What `make run` starts in `clone`, as its user; None when it never served (its log is
    then `result.output`). Stopped after; what ran is recorded in `result`."""
    home = clone.parent / "home"  # the newcomer's $HOME, beside the clone, as private
    home.mkdir(mode=0o700, exist_ok=True)
    python = str(clone / ".venv" / "bin" / "python")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUJOBS_")}
    env |= {"HOME": str(home), "GPUJOBS_PORT": str(port), "PYTHONUNBUFFERED": "1"}
    log = open(clone.parent / "server.log", "wb")  # noqa: SIM115 - the server's, closed below
    started = time.monotonic()
    server = subprocess.Popen(
        [python, "-m", "worker.standalone"], cwd=clone, env=env, stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        wait_for(
            lambda: _serving(port) or server.poll() is not None,
            timeout=START_TIMEOUT_S,
            what="the embedded service",
        )
        if server.poll() is not None:
            result.output = (clone.parent / "server.log").read_text()
            yield None
            return
        result.start_s = time.monotonic() - started
        yield Newcomer(python=python, port=port, env=env)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()
        _what_ran(result, clone=clone)  # a failed run's trainers' directories are cleaned too
        result.output += "\n--- server ---\n" + (clone.parent / "server.log").read_text()[-4000:]


def _serving(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _what_ran(result: FirstContact, *, clone: Path) -> None:
    """Where the service put the trainers' directories (it says so at start) and which uids
    owned their working directories."""
    log = (clone.parent / "server.log").read_text()
    said = [line for line in log.splitlines() if line.startswith(TRAINERS_LINE)]
    if not said:
        return
    trainers = Path(said[0].removeprefix(TRAINERS_LINE).strip())
    result.trainer_home = str(trainers)
    attempts = sorted((trainers / "attempts").glob("*/work"))
    result.trainer_uids = tuple(sorted({work.stat().st_uid for work in attempts}))


def cleanup(result: FirstContact) -> None:
    """Trainers' directories outside the clone (under /var/lib/gpujobs when root)."""
    if result.trainer_home and not Path(result.trainer_home).is_relative_to(result.clone):
        shutil.rmtree(result.trainer_home, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default=SPEC)
    args = parser.parse_args()
    with private_clone() as clone:
        result = run(clone, spec=args.spec)
        cleanup(result)
    succeeded = result.exit_code == 0 and "SUCCEEDED" in result.output
    report = {
        "spec": result.spec,
        "as_root": os.geteuid() == 0,
        "private_folder_mode": oct(result.private_mode),
        "succeeded": succeeded,
        "start_s": round(result.start_s, 1),
        "job_s": round(result.job_s, 1),
        "trainer_uids_not_root": all(uid != 0 for uid in result.trainer_uids),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average": [round(v, 2) for v in os.getloadavg()],
        },
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "first_contact.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    if not succeeded:
        print(asdict(result)["output"][-6000:])
    return 0 if succeeded else 1


if __name__ == "__main__":
    raise SystemExit(main())
