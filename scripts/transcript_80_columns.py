"""What a newcomer sees in an 80-column terminal: the README's first job through the CLI against
the embedded service (`python -m worker.standalone`, what `make run` serves), written to
docs/transcripts/80-columns.txt, and checked: no line over 80 columns.

    .venv/bin/python scripts/transcript_80_columns.py [--steps N] [OUTPUT]

The service runs in a temporary home on a free port, with the caller's GPUJOBS_SPOT_* settings
(none: no spot market, the job runs through once). `--steps N` trains the example for N steps,
its estimated hours scaled alike, on a machine too loaded to train 6,000 in minutes (the
transcript says so). Exit 1 when a line is wider than 80.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "docs" / "transcripts" / "80-columns.txt"
COLUMNS = 80
FIRST_RUN = "examples/first-run.yaml"
COMMANDS = (
    ("submit", FIRST_RUN, "--wait", "-y"),
    ("show", "first-run"),
    ("events", "first-run"),
    ("logs", "first-run"),
    ("estimate", "examples/gpt-small.yaml"),
)


def shortened(folder: Path, steps: int) -> tuple[Path, str]:
    """The first job with `steps` steps (its hours and checkpoint interval scaled alike), and
    the line that says so above the transcript."""
    spec = yaml.safe_load((ROOT / FIRST_RUN).read_text())
    ratio = steps / spec["trainer"]["steps"]
    spec["trainer"]["steps"] = steps
    every = spec["trainer"]["checkpoint"]["every_steps"]
    spec["trainer"]["checkpoint"]["every_steps"] = max(1, round(every * ratio))
    spec["estimated_hours"] = round(spec["estimated_hours"] * ratio, 4)
    path = folder / "first-run.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path, f"# {FIRST_RUN} with steps: {steps} (a loaded machine: not 6,000)\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_serving(url: str, server: subprocess.Popen[bytes], timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the service exited with {server.returncode}")
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"the service did not answer at {url} in {timeout_s:.0f} s")


def transcript(env: dict[str, str], spec: Path | None = None) -> str:
    """Each command as typed, then what it printed on stdout and stderr, in order; `spec`: the
    first job's file in place of the example's."""
    parts = []
    for argv in COMMANDS:
        given = [str(spec) if spec is not None and arg == FIRST_RUN else arg for arg in argv]
        run = subprocess.run(
            [sys.executable, "-m", "gpujobs.cli", *given],
            cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, timeout=1800,
        )  # fmt: skip
        parts.append(f"$ gpujobs {' '.join(argv)}\n{run.stdout}")
        if run.returncode != 0:
            parts.append(f"(exit {run.returncode})\n")
    return "\n".join(parts)


def too_wide(text: str) -> list[str]:
    return [line for line in text.splitlines() if len(line) > COLUMNS]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, help="train the first job this many steps")
    parser.add_argument("output", nargs="?", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    output: Path = args.output
    with tempfile.TemporaryDirectory(prefix="gpujobs-transcript-") as tmp:
        spec, said = None, ""
        if args.steps is not None:
            spec, said = shortened(Path(tmp), args.steps)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        keep = ("GPUJOBS_SPOT_",)  # the market to show; nothing else of the caller's
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUJOBS_")}
        env |= {k: v for k, v in os.environ.items() if k.startswith(keep)}
        env |= {
            "GPUJOBS_HOME": f"{tmp}/home",
            "GPUJOBS_PORT": str(port),
            "GPUJOBS_CREDENTIALS_FILE": f"{tmp}/credentials.json",
            "PYTHONUNBUFFERED": "1",
        }
        with open(f"{tmp}/service.log", "wb") as log:
            server = subprocess.Popen(
                [sys.executable, "-m", "worker.standalone"], cwd=ROOT, env=env, stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
            try:
                wait_serving(url, server)
                shown = env | {"GPUJOBS_URL": url, "COLUMNS": str(COLUMNS)}
                text = said + transcript(shown, spec).replace(tmp + "/", "")
            finally:
                server.terminate()
                server.wait(timeout=60)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    wide = too_wide(text)
    for line in wide:
        print(f"{len(line)} columns: {line}", file=sys.stderr)
    print(f"{output}: {len(text.splitlines())} lines, {len(wide)} over {COLUMNS} columns")
    return 1 if wide else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
