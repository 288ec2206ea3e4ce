"""The `gpujobs` command against a real running API: output, JSON and exit codes."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from api.models import utcnow
from gpujobs.cli import main, render
from gpujobs.cli.render import ProgressBar, money
from gpujobs.client import Client, load_spec
from gpujobs.resources import SIMULATED_NOTICE, Job, JobEvent, JobStatus, Progress
from gpujobs.spec import JobSpec
from gpujobs.version import __version__
from tests.sdk.server import LiveApi, free_port

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GPT_SMALL = str(EXAMPLES / "gpt-small.yaml")


def gpujobs(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def test_examples_are_valid_job_specs() -> None:
    files = sorted(EXAMPLES.glob("*.yaml"))
    assert {f.name for f in files} >= {"gpt-small.yaml", "resnet-spot.yaml", "deadline.yaml"}
    for file in files:
        assert isinstance(load_spec(file), JobSpec), file


def test_submit_ls_show_cancel(env: dict[str, str]) -> None:
    code, out = gpujobs("submit", GPT_SMALL)
    assert code == 0 and out.startswith("submitted ")
    job_id = out.split()[1]

    code, out = gpujobs("submit", str(EXAMPLES / "resnet-spot.yaml"), "--json")
    assert code == 0
    second = json.loads(out)
    assert second["name"] == "resnet-spot" and second["status"] == "PENDING"

    code, out = gpujobs("ls")
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[:4] == ["ID", "NAME", "TEAM", "STATUS"]
    assert [line.split()[1] for line in lines[1:-1]] == ["resnet-spot", "gpt-small"]
    assert lines[-1] == SIMULATED_NOTICE  # the test API's launcher is local

    code, out = gpujobs("cancel", job_id)
    assert code == 0 and out.split() == [job_id, "gpt-small", "CANCELLED"]

    code, out = gpujobs("ls", "--status", "cancelled", "--json")
    assert [j["id"] for j in json.loads(out)] == [job_id]

    code, out = gpujobs("show", job_id)
    assert code == 0
    assert "status:" in out and "CANCELLED (cancelled by user)" in out
    code, out = gpujobs("show", job_id, "--json")
    assert json.loads(out)["job"]["id"] == job_id and json.loads(out)["attempts"] == []


def test_ls_shows_resources_capacity_and_the_servers_cost(
    env: dict[str, str], api: LiveApi
) -> None:
    ids = {}
    for name, example in (("moved", GPT_SMALL), ("tiny", GPT_SMALL), ("queued", GPT_SMALL)):
        spec = load_spec(example).model_copy(update={"name": name})
        with Client() as gj:
            ids[name] = gj.submit(spec).id
    now = utcnow()
    api.add_attempt(
        ids["moved"], 1, capacity_type="spot", zone="use1-az2", gpu_model="A100", nodes=2,
        started_at=now - timedelta(hours=2), ended_at=now - timedelta(hours=1),
        end_reason="preempted", cost_microusd=1_234_567, samples_per_s=1234.5,
    )  # fmt: skip
    api.add_attempt(
        ids["moved"], 2, gpu_model="A100", nodes=2, price_per_hour=2.0,
        started_at=now - timedelta(hours=1),
    )  # fmt: skip
    api.add_attempt(
        ids["tiny"], 1, capacity_type="spot", started_at=now - timedelta(seconds=30),
        ended_at=now, end_reason="succeeded", cost_microusd=4_200,
    )  # fmt: skip

    code, out = gpujobs("ls")
    header, *lines = out.splitlines()
    assert code == 0
    assert header.split()[4:8] == ["PROGRESS", "RESOURCES", "CAPACITY", "COST"]
    row = {line.split()[1]: line for line in lines}
    # $1.234567 recorded + an hour on demand at $2/h so far, summed by the server.
    assert "1x A100 x2 nodes" in row["moved"] and "on-demand aws/use1-az1" in row["moved"]
    assert "$3.23" in row["moved"].split()
    assert "1x T4" in row["tiny"] and "spot aws/use1-az1" in row["tiny"]
    assert "$0.0042" in row["tiny"].split()  # under a cent, not $0.00
    assert "1x A100|H100|L4" in row["queued"] and "$0.00" in row["queued"].split()
    # Ids as short as the API takes them (a UUIDv7's millisecond), whole where two share it.
    short = row["moved"].split()[0]
    assert len(short) == 13 and ids["moved"].startswith(short)
    assert json.loads(gpujobs("show", short, "--json")[1])["job"]["id"] == ids["moved"]
    same_ms = ["01a23905-c91e-7a99-1", "01a23905-c91e-7a99-2", "01a23905-c91f-7a99-3"]
    assert render.short_ids(same_ms) == {
        same_ms[0]: same_ms[0],
        same_ms[1]: same_ms[1],
        same_ms[2]: "01a23905-c91f",
    }

    code, out = gpujobs("ls", "--json")
    listed = {j["name"]: j for j in json.loads(out)}
    assert listed["tiny"]["cost_microusd"] == 4_200 and listed["queued"]["placement"] is None
    assert listed["moved"]["placement"]["capacity_type"] == "on_demand"
    assert 3_234_567 <= listed["moved"]["cost_microusd"] < 3_334_567

    # A job still running costs "so far"; one that ended simply costs.
    _, out = gpujobs("show", "moved")
    assert "cost so far:" in out and "on-demand at $2.00/h" in out
    # Each attempt's measured rate on its GPU: what the scheduler learns speeds from.
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if "SAMPLES/S" in line)
    first, second = lines[head + 1].split(), lines[head + 2].split()
    assert first[4:9] == ["1x", "A100", "x2", "nodes", "1,234.5"]  # GPUS, then its rate
    assert second[4:9] == ["1x", "A100", "x2", "nodes", "-"]  # not reported yet
    with Client() as gj:
        gj.cancel(ids["tiny"])
    _, out = gpujobs("show", "tiny")
    assert "cost so far" not in out
    assert [line.split() for line in out.splitlines() if line.startswith("cost:")] == [
        ["cost:", "$0.0042"]
    ]


def test_submit_wait_exits_1_when_the_job_is_cancelled(
    env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    def cancel_once_submitted() -> None:
        with Client(env["url"], env["token"]) as gj:
            while True:
                pending = list(gj.list(status="PENDING"))
                if pending:
                    gj.cancel(pending[0].id)
                    return
                time.sleep(0.01)

    canceller = threading.Thread(target=cancel_once_submitted, daemon=True)
    canceller.start()
    code, out = gpujobs("submit", GPT_SMALL, "--wait", "--poll", "0.02")
    canceller.join(timeout=30)
    assert code == 1
    assert out.split()[1:3] == ["gpt-small", "CANCELLED"]
    progress = capsys.readouterr().err
    assert "waiting for the scheduler to place it" in progress and "CANCELLED" in progress
    assert "cancelled: cancelled by user" in progress  # each event gets a line above the bar


def test_the_submit_screen_gives_one_chance_of_the_deadline_the_quotes(
    env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = gpujobs("submit", str(EXAMPLES / "first-run.yaml"))  # no terminal: submitted
    shown = capsys.readouterr().err
    assert code == 0
    assert "plan: " in shown and "quote (the policy as it will run)" in shown
    [odds] = [line for line in shown.splitlines() if "P(meet deadline)" in line]
    assert odds.startswith("quote ")


def test_event_lines_say_where_the_job_went_and_why() -> None:
    def event(to: str, frm: str | None, reason: str, **data: object) -> JobEvent:
        return JobEvent(id=1, job_id="j", at=datetime.now(UTC), from_status=frm, to_status=to,
                        reason=reason, data=data)  # fmt: skip

    placed = event(
        "SCHEDULED", "PENDING", "spot: cheapest expected cost while slack remains", attempt=2,
        offer="aws:use1-az1:g5.xlarge:A10Gx1", capacity_type="spot", price_per_hour=0.45,
        expected_cost=1.234, p_meet_deadline=0.97,
    )  # fmt: skip
    # The job's P(meet deadline) is its quote's; this placement's own would be a second one.
    assert render.event_line(placed) == (
        "attempt 2 placed on spot aws:use1-az1:g5.xlarge:A10Gx1 ($0.45/h, expected $1.23 to "
        "finish there): spot: cheapest expected cost while slack remains"
    )
    preempted = event("PREEMPTED", "RUNNING", "spot capacity was reclaimed", attempt=2, step=32)
    assert render.event_line(preempted) == (
        "attempt 2 preempted at step 32: spot capacity was reclaimed"
    )
    moved = event(
        "PREEMPTED", "RUNNING", "moved to cheaper or safer capacity", attempt=1, step=5,
        end_reason="migrated",
    )  # fmt: skip
    assert render.event_line(moved) == (
        "attempt 1 stopped to move at step 5: moved to cheaper or safer capacity"
    )
    again = event("PENDING", "PREEMPTED", "spot capacity was reclaimed", resume_from_step=30)
    assert "will resume from step 30" in render.event_line(again)
    # A note (no status change): a standby held, a handover; its reason is the whole line.
    handed = "handed over at step 61 from attempt 1 (on-demand use1-az1) to attempt 2 (spot ..."
    note = event("RUNNING", "RUNNING", handed, attempt=1, to_attempt=2, overlap_cost=0.01)
    assert render.event_line(note) == handed


def test_wait_timeout_exits_7(env: dict[str, str]) -> None:
    code, _ = gpujobs("submit", GPT_SMALL, "--wait", "--timeout", "0.05", "--poll", "0.01")
    assert code == 7


def test_an_invalid_spec_exits_2_naming_the_fields(
    env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: ok\ntrainer: {steps: 10, amp: fp8}\ncolour: blue\n")
    code, _ = gpujobs("submit", str(spec))
    assert code == 2
    err = capsys.readouterr().err
    assert "trainer.amp:" in err and "colour:" in err


def test_usage_errors_exit_2(env: dict[str, str]) -> None:
    assert gpujobs("frobnicate")[0] == 2
    assert gpujobs("ls", "--status", "SLEEPING")[0] == 2


def test_not_found_auth_and_connection_exit_codes(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert gpujobs("show", "00000000-0000-7000-8000-000000000000")[0] == 3
    assert gpujobs("ls", "--token", "gpj_wrong")[0] == 4
    assert "GPUJOBS_TOKEN" in capsys.readouterr().err
    unreachable = f"http://127.0.0.1:{free_port()}"
    assert gpujobs("ls", "--url", unreachable, "--retries", "1")[0] == 5


def test_usage_prints_a_table_and_json(env: dict[str, str]) -> None:
    code, out = gpujobs("usage", "--group-by", "capacity_type")
    assert code == 0 and "TOTAL" in out and "GPU-H" in out
    code, out = gpujobs(
        "usage", "--from", "2025-01-01T00:00:00Z", "--to", "2025-02-01T00:00:00Z", "--json"
    )
    report = json.loads(out)
    assert report["from"] == "2025-01-01T00:00:00Z" and report["total"]["cost_microusd"] == 0
    code, out = gpujobs("usage", "--from", "2025-01-01", "--to", "2025-01-02 12:00", "--json")
    assert (json.loads(out)["from"], json.loads(out)["to"]) == (
        "2025-01-01T00:00:00Z",
        "2025-01-02T12:00:00Z",
    )
    code, _ = gpujobs("usage", "--from", "2025-02-01T00:00:00Z", "--to", "2025-01-01T00:00:00Z")
    assert code == 2
    assert gpujobs("usage", "--from", "last tuesday")[0] == 2


def test_budget_prints_a_table_and_json(env: dict[str, str], api: LiveApi) -> None:
    code, out = gpujobs("budget")
    title, table = out.split("\n\n")
    assert code == 0 and title.startswith("month from ") and title.endswith("-01 00:00 UTC")
    header, row, simulated = table.splitlines()
    assert simulated == SIMULATED_NOTICE
    assert header.split() == ["TEAM", "MONTHLY", "BUDGET", "SPENT", "HELD", "LEFT"]
    assert row.split() == ["team-a", "-", "$0.00", "$0.00", "-"]
    admin = {"Authorization": f"Bearer {api.admin_token}"}
    httpx.put(f"{api.url}/v1/admin/teams/team-a/budget", json={"monthly_usd": 40}, headers=admin)
    code, out = gpujobs("budget", "--json")
    budget = json.loads(out)
    assert code == 0 and budget["monthly_microusd"] == budget["remaining_microusd"] == 40_000_000
    assert (budget["monthly_usd"], budget["held_usd"], budget["remaining_usd"]) == (40, 0, 40)
    code, out = gpujobs("usage")
    assert code == 0 and "HELD" in out
    assert out.splitlines()[-2].split() == ["team-a", "$40.00", "$0.00", "$0.00", "$40.00"]


def test_estimate_and_logs_against_the_api(env: dict[str, str], api: LiveApi) -> None:
    code, out = gpujobs("estimate", GPT_SMALL)
    assert code == 0
    header, *rows, decision, note, quote, simulated = out.splitlines()
    assert simulated == SIMULATED_NOTICE
    assert decision.startswith("place: ") and quote.startswith("quote (the policy as it will run)")
    assert note.startswith("each row: that plan alone to the end")  # which finish time is which
    assert header.split()[:6] == ["#", "WHERE", "INSTANCE", "GPUS", "CAPACITY", "$/H"]
    first = rows[0].split()
    assert first[:2] == ["1", "*"]  # the plan the scheduler would choose now comes first
    assert first[2].count("/") == 2  # cloud/region/zone
    code, out = gpujobs("estimate", GPT_SMALL, "--json")
    with Client() as gj:
        printed = json.loads(out)
        assert {"plans", "decision", "reason", "quote", "generated_at"} <= set(printed)
        ranked = [(p["offer"]["key"], p["capacity_type"]) for p in printed["plans"]]
        estimate = gj.estimate(GPT_SMALL)
        assert ranked == [(p.offer.key, p.capacity_type.value) for p in estimate.plans]
        job = gj.submit(GPT_SMALL)
    # Without -f, a job that has not ended yet: what is there, at once (no following).
    run = subprocess.run(
        [sys.executable, "-m", "gpujobs.cli", "logs", job.id],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (run.returncode, run.stdout, run.stderr) == (0, "", "")
    api.finish_with_log(job.id, "loss 2.1\nloss 1.9\n")
    for follow in ((), ("-f",)):  # -f follows, and stops when the job has ended
        code, out = gpujobs("logs", job.id, *follow)
        assert code == 0
        assert out.startswith("=== attempt 1:") and out.endswith("loss 2.1\nloss 1.9\n")
    code, out = gpujobs("logs", job.id[:8], "--json")
    assert code == 0
    assert [json.loads(line) for line in out.splitlines()] == [
        {"attempt": 1, "line": "loss 2.1"},
        {"attempt": 1, "line": "loss 1.9"},
    ]


def test_logs_print_lines_for_people_and_the_raw_lines_with_json(
    env: dict[str, str], api: LiveApi
) -> None:
    with Client() as gj:
        job = gj.submit(GPT_SMALL)
    start = (
        '{"event": "start", "time": 1735732800.123, "step": 0, "total_steps": 6000, '
        '"device": "cpu"}'
    )
    report = (
        '{"time": 1735732803.5, "step": 500, "total_steps": 6000, "loss": 2.3456789012345678, '
        '"samples_per_s": 1234.5678901234567, "attempt_id": "01a23905-c9af-7000-8000-0000"}'
    )
    note = '{"event": "note", "time": 1735732804.0, "message": "resuming on 2 ranks"}'
    raw = [start, report, note, "Traceback (most recent call last):"]
    api.finish_with_log(job.id, "\n".join(raw) + "\n")
    code, out = gpujobs("logs", job.id)
    header, *lines = out.splitlines()
    assert code == 0 and header.startswith("=== attempt 1:")
    assert lines == [
        "2025-01-01 12:00:00  start  step=0 total_steps=6000 device=cpu",
        "2025-01-01 12:00:03  step 500/6000  loss=2.346 samples/s=1235",
        "2025-01-01 12:00:04  note: resuming on 2 ranks",
        "Traceback (most recent call last):",
    ]
    code, out = gpujobs("logs", job.id, "--json")  # the trainer's lines as they are
    assert [json.loads(line) for line in out.splitlines()] == [
        {"attempt": 1, "line": line} for line in raw
    ]


def test_log_lines_fit_80_columns_without_none_or_a_repeated_checkpoint(
    env: dict[str, str], api: LiveApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a trainer writes (its start line names an unset interval), read at 80 columns:
    every line fits, nothing reads `None`, and a step line names the checkpoint only when it is
    new."""
    with Client() as gj:
        job = gj.submit(GPT_SMALL)
    start = {
        "event": "start", "time": 1735732800.1, "step": 0, "total_steps": 6000,
        "world_size": 1, "device": "cpu", "amp": "off", "checkpoint_every_steps": 500,
        "checkpoint_every_seconds": None, "deterministic": False, "compiled": False,
    }  # fmt: skip
    steps = [
        {"time": 1735732800.0 + step, "step": step, "total_steps": 6000, "loss": 2.4813,
         "samples_per_s": 49.17, "data_wait_fraction": 0.001186,
         "checkpoint_stall_s": 0.08 if step > 500 else 0,
         "checkpoint_step": 500 if step > 500 else None}
        for step in (400, 600, 700)
    ]  # fmt: skip
    raw = [json.dumps(line) for line in (start, *steps)]
    api.finish_with_log(job.id, "\n".join(raw) + "\n")
    monkeypatch.setenv("COLUMNS", "80")
    code, out = gpujobs("logs", job.id)
    assert code == 0
    assert max(len(line) for line in out.splitlines()) <= 80, out
    assert "None" not in out and "checkpoint_every_seconds" not in out
    assert out.count("checkpoint_step=500") == 1, out  # on step 600's line, not again on 700's
    assert out.count("checkpoint_stall_s=0.08") == 1, out  # that checkpoint's, with it
    assert "2025-01-01 12:11:40  step 700/6000  loss=2.481 samples/s=49.17 data_wait=0%\n" in out


def test_the_progress_bar_redraws_one_line_on_a_terminal() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    bar = ProgressBar(screen, width=10)
    job = Job.model_validate(
        {
            "id": "j",
            "team": "t",
            "name": "n",
            "status": JobStatus.RUNNING,
            "spec": {"name": "n", "trainer": {"steps": 200}},
            "created_at": "2025-01-01T00:00:00Z",
            "updated_at": "2025-01-01T00:00:00Z",
            "attempts": 2,
            "cost_microusd": 1_500_000,
        }
    )
    job.progress = Progress(step=120, total_steps=200)
    bar.update(job)
    bar.finish()
    text = screen.getvalue()
    assert text.startswith("\r") and text.endswith("\n")
    assert "[######....] 120/200 steps  60%" in text
    assert "attempts 2" in text and "$1.50" in text


def test_off_a_terminal_the_bar_writes_a_line_per_tenth_not_per_report() -> None:
    log = io.StringIO()
    bar = ProgressBar(log)
    job = Job.model_validate(
        {
            "id": "j", "team": "t", "name": "n", "status": JobStatus.RUNNING,
            "spec": {"name": "n", "trainer": {"steps": 200}},
            "created_at": "2025-01-01T00:00:00Z", "updated_at": "2025-01-01T00:00:00Z",
        }
    )  # fmt: skip
    for step in range(0, 201, 4):
        job.progress = Progress(step=step, total_steps=200)
        bar.update(job)
    lines = log.getvalue().splitlines()
    assert len(lines) == 11 and "0/200" in lines[0] and "200/200" in lines[-1]


def test_event_figures_read_without_ids_and_microseconds() -> None:
    figures = render.event_figures(
        {"attempt_id": "01a23905-c9af", "attempt": 2, "p_meet_deadline": 0.88861,
         "expected_finish": "2026-12-02T23:43:03.517654+00:00", "offer": "aws:use1-az1"}
    )  # fmt: skip
    assert figures == (
        "attempt=2 p_meet_deadline=0.8886 expected_finish=2026-12-02T23:43:03 offer=aws:use1-az1"
    )


def test_the_console_script_runs_as_a_module(env: dict[str, str]) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "gpujobs.cli", "--help"], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0
    assert "exit codes" in run.stdout and "submit" in run.stdout


def test_jobs_are_found_by_id_prefix_and_by_name(env: dict[str, str], api: LiveApi) -> None:
    code, out = gpujobs("submit", GPT_SMALL, "--json")
    job = json.loads(out)
    for reference in (job["id"], job["id"][:8], "gpt-small"):
        code, out = gpujobs("show", reference, "--json")
        assert code == 0 and json.loads(out)["job"]["id"] == job["id"], reference
    assert gpujobs("show", "no-such-job")[0] == 3

    # A second unfinished job of the same name is refused, naming the field.
    code, _ = gpujobs("submit", GPT_SMALL)
    assert code == 6
    gpujobs("cancel", "gpt-small")
    code, out = gpujobs("submit", GPT_SMALL, "--json")
    assert code == 0
    newest = json.loads(out)["id"]
    code, out = gpujobs("show", "gpt-small", "--json")
    assert json.loads(out)["job"]["id"] == newest  # a name means its newest job


def test_cancelling_a_job_that_ended_otherwise_is_a_conflict(
    env: dict[str, str], api: LiveApi, capsys: pytest.CaptureFixture[str]
) -> None:
    """As docs/usage.md says and the API answers: a script learns its cancel changed nothing."""
    with Client() as gj:
        done = gj.submit(GPT_SMALL)
        api.finish_with_log(done.id, "ok\n")
        cancelled = gj.submit(str(EXAMPLES / "resnet-spot.yaml"))
        gj.cancel(cancelled.id)
    code, out = gpujobs("cancel", done.id[:13])
    assert (code, out) == (6, "")
    assert "already ended as SUCCEEDED; nothing to cancel" in capsys.readouterr().err
    code, out = gpujobs("cancel", "resnet-spot")  # already what was asked: nothing to report
    assert code == 0 and out.split() == [cancelled.id, "resnet-spot", "CANCELLED"]


def test_events_and_offers(env: dict[str, str]) -> None:
    _, out = gpujobs("submit", GPT_SMALL, "--json")
    code, out = gpujobs("events", json.loads(out)["id"][:8])
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split() == ["AT", "CHANGE", "REASON", "FIGURES"]
    assert "-> PENDING" in rows[0]
    code, out = gpujobs("offers", "--gpu", "A100", "--capacity", "spot", "--limit", "3")
    assert code == 0
    header, *rows, total = out.splitlines()
    assert header.split()[:4] == ["CLOUD", "REGION", "ZONE", "INSTANCE"]
    assert len(rows) == 3 and all("A100" in row for row in rows)
    spot = [float(row.split()[-1].lstrip("$").replace(",", "")) for row in rows]
    assert spot == sorted(spot)
    assert total.startswith("3 of ")


def test_version_and_money_below_a_cent() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "gpujobs.cli", "--version"], capture_output=True, text=True
    )
    assert run.returncode == 0 and run.stdout.strip() == f"gpujobs {__version__}"
    assert money(0.0042) == "$0.0042"
    assert money(0) == "$0.00"
    assert money(1234.5) == "$1,234.50"
    assert money(-0.005) == "-$0.005"
    assert money(0.00097) == "$0.001"
    assert money(0.00004) == "<$0.0001"


def test_submit_shows_the_plan_and_asks_on_a_terminal(
    env: dict[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdin", Terminal("n\n"))
    code, out = gpujobs("submit", GPT_SMALL)
    shown = capsys.readouterr().err
    assert code == 1 and out == ""  # nothing submitted: not a success a script would trust
    assert (
        shown.startswith(f"{SIMULATED_NOTICE}\nplan: ")
        and " at $" in shown
        and "P(meet deadline)" in shown
    )
    assert "quote (the policy as it will run)" in shown and "Submit? [y/N]" in shown
    assert "not submitted (-y submits without asking)" in shown
    monkeypatch.setattr(sys, "stdin", Terminal(""))  # a terminal at EOF (Ctrl-D): no answer
    code, out = gpujobs("submit", GPT_SMALL)
    shown = capsys.readouterr().err
    assert code == 1 and out == ""
    assert "no answer: stdin is closed" in shown and "not submitted" in shown
    with Client() as gj:
        assert list(gj.list()) == []

    monkeypatch.setattr(sys, "stdin", Terminal("y\n"))
    code, out = gpujobs("submit", GPT_SMALL)
    assert code == 0 and out.startswith("submitted ")
    capsys.readouterr()
    code, out = gpujobs("submit", str(EXAMPLES / "resnet-spot.yaml"), "-y")  # no question
    shown = capsys.readouterr().err
    assert code == 0 and "Submit?" not in shown
    # ... but the quote the job was admitted with is still shown, its likely cost first.
    assert (
        shown.startswith(f"{SIMULATED_NOTICE}\nquote (the policy as it will run): $")
        and " likely, " in shown
    )
