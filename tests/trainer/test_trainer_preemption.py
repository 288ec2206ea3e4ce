"""The preemption notice: finish the step, save synchronously, exit 75 (76 without a save)."""

from __future__ import annotations

from pathlib import Path

from gpujobs.runtime import EXIT_PREEMPTED, EXIT_PREEMPTED_NO_CHECKPOINT
from tests.trainer.trainer_runs import TINY_GPT, run_config, run_in_process
from trainer.checkpoint import latest_complete_step, load_latest


def preempting_config(uri: str, *, notice_at_call: int, on_preemption: bool = True) -> dict:
    config = run_config(
        uri,
        workload="tests.trainer.preempting:build",
        steps=50,
        grad_accum_steps=2,
        checkpoint={"every_steps": 4, "on_preemption": on_preemption},
        args={**TINY_GPT, "notice_at_call": notice_at_call},
    )
    return {**config, "allowed_workload_prefixes": ["tests.trainer"]}


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
