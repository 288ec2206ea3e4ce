"""A spec file is read bounded (issue 36, attack 5): a YAML alias bomb ("billion laughs", nine
aliases nine deep: 387 bytes that expand to 9^9 strings) hung `gpujobs submit` and `estimate`
for good, in the validation of the expanded document. The CLI runs in a subprocess with a
timeout, against an address where no server listens: the file is refused before any request."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpujobs.spec_files import MAX_SPEC_BYTES, load_spec

LEVELS = "abcdefghi"
BOMB = (
    "\n".join(
        f"{name}: &{name} [" + ",".join([f"*{LEVELS[n - 1]}"] * 9 if n else ['"lol"'] * 9) + "]"
        for n, name in enumerate(LEVELS)
    )
    + "\nname: bomb\ntrainer:\n  steps: 10\n  args:\n    x: *i\n"
)


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {"GPUJOBS_URL": "http://127.0.0.1:9", "GPUJOBS_TOKEN": "gpj_unused", "PATH": ""}
    return subprocess.run(
        [sys.executable, "-m", "gpujobs.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


@pytest.mark.parametrize("command", ["submit", "estimate"])
def test_an_alias_bomb_is_refused_with_a_clear_message(tmp_path: Path, command: str) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BOMB)
    run = cli(command, str(bomb))
    assert run.returncode == 2, run
    assert "aliases" in run.stderr and str(bomb) in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


def test_a_recursive_alias_and_a_huge_file_are_refused(tmp_path: Path) -> None:
    looped = tmp_path / "looped.yaml"
    looped.write_text("name: loop\ntrainer: &t\n  steps: 10\n  args: {x: *t}\n")
    run = cli("estimate", str(looped))  # in-process, it filled 8 GB of memory in seconds
    assert run.returncode == 2, run
    assert "aliases" in run.stderr, run.stderr
    huge = tmp_path / "huge.yaml"
    huge.write_text("name: huge\n# " + "x" * MAX_SPEC_BYTES + "\n")
    run = cli("submit", str(huge))
    assert run.returncode == 2, run
    assert "larger than" in run.stderr, run.stderr


def test_anchors_a_spec_might_use_still_load(tmp_path: Path) -> None:
    spec = tmp_path / "anchored.yaml"
    spec.write_text(
        "name: anchored\n"
        "trainer: {steps: 10}\n"
        "estimated_hours: &hours 2.0\n"
        "deadline_hours: *hours\n"
    )
    loaded = load_spec(spec)
    assert (loaded.estimated_hours, loaded.deadline_hours) == (2.0, 2.0)
