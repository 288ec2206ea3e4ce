"""The preemption notice: finish the step, save synchronously, exit 75 (76 without a save)."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path
from typing import Any

from gpujobs.runtime import EXIT_PREEMPTED, EXIT_PREEMPTED_NO_CHECKPOINT
from tests.trainer.trainer_runs import TINY_GPT, TrainerProcess, run_config, run_in_process
from trainer.checkpoint import latest_complete_step, load_latest


def preempting_config(
    uri: str, *, notice_at_call: int, on_preemption: bool = True
) -> dict[str, Any]:
    return run_config(
        uri,
        workload="tests.trainer.preempting:build",
        steps=50,
        grad_accum_steps=2,
        checkpoint={"every_steps": 4, "on_preemption": on_preemption},
        args={**TINY_GPT, "notice_at_call": notice_at_call},
    )


def test_sigterm_saves_the_step_it_finishes_and_exits_75(tmp_path: Path) -> None:
    uri = str(tmp_path / "ckpt")
    # The 13th micro-batch is the first half of step 7: the notice arrives mid-step.
    result, records = run_in_process(preempting_config(uri, notice_at_call=13))
    assert result.exit_code == EXIT_PREEMPTED
    assert result.step == 7
    assert latest_complete_step(uri) == 7
    preempted = [r for r in records if r.get("event") == "preempted"]
    assert preempted == [preempted[0]] and preempted[0]["saved"] is True
    assert preempted[0]["checkpoint_step"] == 7
    state = load_latest(uri)
    assert state is not None
    assert state.ranks[0]["data"]["position"]["batches"] == 14  # 7 steps x 2 micro-batches


def test_sigterm_without_checkpoint_on_preemption_exits_76(tmp_path: Path) -> None:
    uri = str(tmp_path / "ckpt")
    result, records = run_in_process(preempting_config(uri, notice_at_call=13, on_preemption=False))
    assert result.exit_code == EXIT_PREEMPTED_NO_CHECKPOINT
    assert result.step == 7
    assert latest_complete_step(uri) == 4  # only the periodic checkpoint
    assert [r["saved"] for r in records if r.get("event") == "preempted"] == [False]


def caught(status: str) -> int:
    """The bitmask of signals a process handles, from its /proc/PID/status."""
    match = re.search(r"SigCgt:\s*([0-9a-f]+)", status)
    assert match is not None
    return int(match.group(1), 16)


def notice_during_startup(config: dict[str, Any], workdir: Path) -> TrainerProcess:
    """Start the trainer and send SIGTERM the moment its handler is in place: it is still
    importing (torch is not loaded yet), where the default action used to kill it (-15)."""
    run = TrainerProcess(config, workdir)
    status = Path(f"/proc/{run.process.pid}/status")
    deadline = time.monotonic() + 60
    while not caught(status.read_text()) & (1 << (signal.SIGTERM - 1)):
        assert time.monotonic() < deadline, "the trainer never caught SIGTERM"
        time.sleep(0.002)
    loaded = Path(f"/proc/{run.process.pid}/maps").read_text()
    run.process.send_signal(signal.SIGTERM)
    assert "libtorch" not in loaded, "the handler came after torch was imported"
    return run


def test_sigterm_while_starting_without_a_checkpoint_exits_76(tmp_path: Path) -> None:
    uri = str(tmp_path / "ckpt")
    run = notice_during_startup(run_config(uri), tmp_path)
    assert run.wait() == EXIT_PREEMPTED_NO_CHECKPOINT, run.stderr()
    assert [(e["step"], e["saved"]) for e in run.events("preempted")] == [(0, False)]
    assert not run.events("start") and not run.events("first_step")
    assert latest_complete_step(uri) is None


def test_sigterm_while_starting_with_a_checkpoint_exits_75(tmp_path: Path) -> None:
    """75: the checkpoint found covers all the work done, nothing new needs saving."""
    uri = str(tmp_path / "ckpt")
    config = preempting_config(uri, notice_at_call=13)
    assert run_in_process(config)[0].exit_code == EXIT_PREEMPTED
    assert latest_complete_step(uri) == 7
    run = notice_during_startup(config, tmp_path)
    assert run.wait() == EXIT_PREEMPTED, run.stderr()
    assert [(e["step"], e["checkpoint_step"]) for e in run.events("preempted")] == [(7, 7)]
    assert not run.events("resume") and not run.events("first_step")
    assert latest_complete_step(uri) == 7
