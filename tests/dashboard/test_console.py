"""The dashboard as a console, clicked through in headless Chromium against a real API: sign in,
the job list with every status, its filter and pages, a job page with attempts, events and live
logs, cancel, auto-refresh paused while the tab is hidden, and the signed-out page.

Set GPUJOBS_DASHBOARD_SCREENSHOTS=docs to keep docs/dashboard-jobs.png, docs/dashboard-job.png
and docs/dashboard.png (the spend view) from this data.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from api.database import transaction
from api.jobs import lifecycle
from api.models import Job, JobAttempt, JobEvent, Team, new_id, utcnow
from api.settings import Settings
from api.teams import service as teams
from gpujobs.resources import JobStatus
from tests.dashboard.browser import CHROMIUM, Page, browser
from tests.dashboard.test_dashboard import WEEK, seed_sweep
from tests.sdk.server import LiveApi, live_api
from tests.usage import ledger_seed as L
from worker.launchers.local.processes import start_time

if CHROMIUM is None and not os.environ.get("CI"):
    pytest.skip("Debian's chromium is not installed", allow_module_level=True)

BATCH = 26  # more than a page (25) on its own
BATCH_STATUSES = ["SUCCEEDED", "PENDING", "CANCELLED"]
FIRST_LOG = "step 1300 loss 2.741 samples/s 812\n"


@dataclass
class Console:
    api: LiveApi
    token: str
    failed: str
    running: str
    log: Path
    jobs: int


def _job(session: Any, team: Team, name: str, status: str, age_min: float, **extra: Any) -> Job:
    at = utcnow() - timedelta(minutes=age_min)
    spec = {"name": "console-job", "trainer": {"steps": 2000}}
    job = Job(
        team_id=team.id, name=name, status=status, spec=spec, created_at=at, updated_at=at, **extra
    )
    session.add(job)
    session.flush()
    session.add(JobEvent(job_id=job.id, at=at, to_status="PENDING", reason="submitted", data={}))
    return job


Story = list[tuple[float, str, str, str, dict[str, Any]]]  # minutes ago, from, to, reason, data


def _events(session: Any, job: Job, story: Story) -> None:
    for age_min, before, after, reason, data in story:
        at = utcnow() - timedelta(minutes=age_min)
        session.add(
            JobEvent(
                job_id=job.id, at=at, from_status=before, to_status=after, reason=reason, data=data
            )
        )


def _attempt(session: Any, job: Job, number: int, **fields: Any) -> JobAttempt:
    attempt = JobAttempt(
        job_id=job.id, team_id=job.team_id, number=number, cloud="aws", region="us-east-1",
        gpu_model="A10G", gpu_count=1, nodes=1, on_demand_price_per_hour=1.006, **fields
    )  # fmt: skip
    session.add(attempt)
    return attempt


def seed_console(api: LiveApi, sleeper: subprocess.Popen[bytes]) -> Console:
    now = utcnow()
    with transaction(api.session_factory) as session:
        team, token = teams.create_team(session, name="ml")
        # Ids made in one millisecond are not ordered among themselves; the list's order is theirs.
        ids = iter(sorted(new_id() for _ in range(BATCH + 2)))
        for i in range(BATCH):
            status = BATCH_STATUSES[i % len(BATCH_STATUSES)]
            _job(session, team, f"sweep-lr-{i:02d}", status, age_min=300 - i, id=next(ids))

        failed = _job(
            session, team, "tokenizer-oom", "FAILED", age_min=90, attempts_count=1, id=next(ids),
            status_reason="trainer exited with code 1: CUDA out of memory",
        )  # fmt: skip
        _attempt(
            session, failed, 1, zone="use1-az4", instance_type="g5.xlarge",
            capacity_type="spot", price_per_hour=0.41, started_at=now - timedelta(minutes=85),
            ended_at=now - timedelta(minutes=80), end_reason="failed", cost_microusd=34_000,
            steps_lost=0,
        )  # fmt: skip
        _events(
            session, failed,
            [(86, "PENDING", "SCHEDULED", "placed on spot g5.xlarge in use1-az4",
              {"price_per_hour": 0.41}),
             (85, "SCHEDULED", "RUNNING", "trainer started", {}),
             (80, "RUNNING", "FAILED", "trainer exited with code 1: CUDA out of memory",
              {"exit_code": 1})],
        )  # fmt: skip

        running = _job(
            session, team, "gpt-finetune", "RUNNING", age_min=60, attempts_count=2, id=next(ids),
            restarts=1, preemptions=1, resume_from_step=1200,
            deadline_at=now + timedelta(hours=5),
            status_reason="resumed from step 1200 on on-demand",
            progress={"step": 1350, "total_steps": 2000, "loss": 2.741, "checkpoint_step": 1300},
        )  # fmt: skip
        _attempt(
            session, running, 1, zone="use1-az2", instance_type="g5.xlarge",
            capacity_type="spot", price_per_hour=0.39, started_at=now - timedelta(minutes=58),
            ended_at=now - timedelta(minutes=31), end_reason="preempted",
            cost_microusd=175_500, steps_lost=40, resume_from_step=0,
        )  # fmt: skip
        live = _attempt(
            session, running, 2, zone="use1-az1", instance_type="g5.xlarge",
            capacity_type="on_demand", price_per_hour=1.006,
            started_at=now - timedelta(minutes=29), resume_from_step=1200,
        )  # fmt: skip
        _events(
            session, running,
            [(59, "PENDING", "SCHEDULED", "placed on spot g5.xlarge in use1-az2",
              {"price_per_hour": 0.39, "p_meet_deadline": 0.93}),
             (58, "SCHEDULED", "RUNNING", "trainer started", {}),
             (31, "RUNNING", "PREEMPTED", "spot instance reclaimed at step 1240",
              {"step": 1240, "checkpoint_step": 1200, "steps_lost": 40}),
             (30, "PREEMPTED", "PENDING", "resuming from step 1200", {"resume_from_step": 1200}),
             (30, "PENDING", "SCHEDULED", "moved to on-demand: spot too risky for the deadline",
              {"capacity_type": "on_demand", "price_per_hour": 1.006}),
             (29, "SCHEDULED", "RUNNING", "trainer started", {})],
        )  # fmt: skip
        session.flush()
        live.launch_handle = f"local:{live.id}"
        failed_id, running_id, attempt_id = failed.id, running.id, live.id

    directory = api.attempts_root / attempt_id
    directory.mkdir(parents=True)
    (directory / "launch.lock").touch()
    pid = {"pid": sleeper.pid, "start": start_time(sleeper.pid)}
    (directory / "pid").write_text(json.dumps(pid))
    log = directory / "trainer.log"
    log.write_text("resuming from checkpoint step 1200\n" + FIRST_LOG)
    return Console(api, token, failed_id, running_id, log, jobs=BATCH + 2)


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    # Stands in for a live trainer: the launcher follows an attempt's log while its pid lives.
    sleeper = subprocess.Popen(["sleep", "900"])
    try:
        with live_api(tmp_path_factory.mktemp("console") / "home") as api:
            L.seed(api.session_factory)
            seed_sweep(api)
            yield seed_console(api, sleeper)
            sleeper.kill()  # ends the server's log follower before the server stops
    finally:
        sleeper.kill()
        sleeper.wait()


JOB_ROWS = "document.querySelectorAll('#jobs tbody tr[data-job]')"


def text(element_id: str) -> str:
    return f"document.getElementById('{element_id}').textContent"


def rows(page: Page) -> list[list[str]]:
    return list(page.js(f"[...{JOB_ROWS}].map(r => [r.cells[0].textContent, r.dataset.status])"))


def click(page: Page, selector: str) -> None:
    page.js(f"document.querySelector({json.dumps(selector)}).click()")


def choose(page: Page, select_id: str, value: str) -> None:
    page.js(
        f"(() => {{ const s = document.getElementById({json.dumps(select_id)});"
        f" s.value = {json.dumps(value)}; s.dispatchEvent(new Event('change')); }})()"
    )


def loaded(page: Page, view: str) -> None:
    page.wait_for(
        f"document.body.dataset.view === '{view}' && document.body.dataset.loaded === 'true'"
    )


def keep_screenshot(page: Page, name: str, *, height: int) -> None:
    folder = os.environ.get("GPUJOBS_DASHBOARD_SCREENSHOTS")
    if not folder:
        return
    path = Path(folder) / name
    page.screenshot(path, height=height)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (1280, height)


def set_status(api: LiveApi, job_name: str, status: JobStatus) -> None:
    with transaction(api.session_factory) as session:
        job = session.query(Job).filter_by(name=job_name).one()
        lifecycle.switch_status(session, job, status, reason="set by the test")


def test_signed_out_the_page_shows_only_the_token_form(console: Console, tmp_path: Path) -> None:
    with browser(tmp_path / "profile") as page:
        page.goto(f"{console.api.url}/dashboard")
        page.wait_for(f"{text('status')}.includes('Enter an API token')")
        visible = page.js(
            "[...document.querySelectorAll('body *')]"
            ".filter(e => e.getClientRects().length)"
            ".filter(e => !e.closest('#token-form, header h1, #status'))"
            ".map(e => e.id || e.tagName)"
        )
        assert visible == ["HEADER"]  # the bar itself; no nav, no controls, no cards, no tables
        assert page.js("document.getElementById('token-form').getClientRects().length > 0")
        assert page.js("document.querySelector('.card').getClientRects().length") == 0


def test_a_team_works_its_jobs_from_the_console(console: Console, tmp_path: Path) -> None:
    api = console.api
    with browser(tmp_path / "profile") as page:
        page.goto(f"{api.url}/dashboard")
        page.js(
            f"document.getElementById('token-input').value = {json.dumps(console.token)};"
            "document.getElementById('token-form').requestSubmit()"
        )
        loaded(page, "jobs")

        # Every status, newest first, one page at a time.
        first = rows(page)
        assert len(first) == 25
        assert first[:2] == [["gpt-finetune", "RUNNING"], ["tokenizer-oom", "FAILED"]]
        assert {status for _, status in first} == {*BATCH_STATUSES, "RUNNING", "FAILED"}
        # Resources, capacity and cost come from the job as the server sums it, not the page.
        cells = page.js(
            f"[...{JOB_ROWS}].slice(0, 2).map(r => [...r.cells].map(c => c.textContent))"
        )
        assert cells[0][4:7] == ["1× A10G", "on-demand · use1-az1", cells[0][6]]
        assert cells[1][4:7] == ["1× A10G", "spot · use1-az4", "$0.03"]  # 34,000 micro-dollars
        spent = page.js(f"{JOB_ROWS}[0].cells[6].dataset.microusd")
        assert int(spent) >= 175_500 + 1.006 * 29 / 60 * 1e6  # attempt 1 + 29 min on demand
        keep_screenshot(page, "dashboard-jobs.png", height=1000)
        click(page, "#page-next")
        page.wait_for("document.getElementById('page-label').textContent === 'page 2'")
        page.wait_for(f"{JOB_ROWS}.length === {console.jobs - 25}")
        assert not {name for name, _ in rows(page)} & {name for name, _ in first}
        assert page.js("document.getElementById('page-next').disabled")
        click(page, "#page-prev")
        page.wait_for("document.getElementById('page-label').textContent === 'page 1'")

        # The filter narrows the list, and the hash keeps it.
        choose(page, "status-filter", "FAILED")
        page.wait_for("location.hash === '#/jobs?status=FAILED'")
        page.wait_for(f"{JOB_ROWS}.length === 1")
        assert rows(page) == [["tokenizer-oom", "FAILED"]]

        # Auto-refresh: a job that fails now shows up without a click, but not while hidden.
        page.js("Object.defineProperty(document, 'hidden', {value: true, configurable: true})")
        set_status(api, "sweep-lr-01", JobStatus.FAILED)
        page.js("new Promise(r => setTimeout(r, 11000))")  # two polls' worth
        assert len(rows(page)) == 1
        page.js("delete document.hidden; document.dispatchEvent(new Event('visibilitychange'))")
        page.wait_for(f"{JOB_ROWS}.length === 2")

        # A failed job's page says why.
        click(page, f'tr[data-job="{console.failed}"] a')
        loaded(page, "job")
        page.wait_for("document.getElementById('job-name').textContent === 'tokenizer-oom'")
        assert page.js("document.getElementById('job-reason').textContent") == (
            "trainer exited with code 1: CUDA out of memory"
        )
        assert page.js("document.getElementById('cancel-box').hidden")  # it has ended

        # The running job: attempts, events, live logs.
        page.js(f"location.hash = '#/jobs/{console.running}'")
        page.wait_for("document.getElementById('job-name').textContent === 'gpt-finetune'")
        loaded(page, "job")
        attempts = page.js(
            "[...document.querySelectorAll('#attempts tbody tr')]"
            ".map(r => [...r.cells].map(c => c.textContent))"
        )
        assert [a[1] for a in attempts] == ["spot", "on-demand"]
        assert attempts[0][2] == "aws us-east-1 / use1-az2" and attempts[0][4] == "$0.39"
        assert attempts[0][8] == "preempted" and attempts[0][10] == "40"
        assert attempts[1][6] == "running" and attempts[1][9] == "1200"
        facts = page.js("document.getElementById('job-facts').textContent")
        assert "step 1350 / 2000 (67%)" in facts
        # 40 of the 1240 steps attempt 1 ran (0 to 1200 + 40) were lost: 40/1240 of $0.1755.
        assert "40 steps · ≈$0.0057 of compute" in facts
        assert attempts[0][11] == "$0.18" and attempts[1][11].startswith("≈$")  # still running
        assert "Cost so far" in facts and "on-demand at $1.01/h" in facts
        events = page.js("document.getElementById('events').textContent")
        assert "spot instance reclaimed at step 1240" in events
        assert '"steps_lost": 40' in events
        assert "moved to on-demand: spot too risky for the deadline" in events
        page.wait_for(
            f"document.getElementById('logs').textContent.includes({json.dumps(FIRST_LOG)})"
        )
        assert "=== attempt 2: on-demand g5.xlarge in use1-az1 ===" in page.js(
            "document.getElementById('logs').textContent"
        )
        with console.log.open("a") as log:
            log.write("step 1360 loss 2.702 samples/s 815\n")
        page.wait_for(f"{text('logs')}.includes('step 1360 loss 2.702')")
        assert page.js("document.getElementById('logs-state').textContent") == "· following"
        assert page.js(text("artifacts-note")) == "No checkpoint yet."
        keep_screenshot(page, "dashboard-job.png", height=1500)

        # Cancel asks first, then the job is CANCELLED.
        click(page, "#cancel")
        assert page.js("!document.getElementById('cancel-confirm').hidden")
        click(page, "#cancel-no")
        assert page.js("document.getElementById('cancel-confirm').hidden")
        click(page, "#cancel")
        click(page, "#cancel-yes")
        page.wait_for("document.getElementById('job-status').textContent === 'CANCELLED'")
        assert page.js("document.getElementById('cancel-box').hidden")
        with transaction(api.session_factory) as session:
            job = session.get(Job, console.running)
            assert job is not None and job.status == "CANCELLED"

        # Leaving the page stops the log stream.
        click(page, "#back-to-jobs")
        loaded(page, "jobs")
        assert page.js("state.logs === null")

        # The spend view is one of the views; an admin link with a period opens it.
        click(page, "#sign-out")
        page.wait_for("!document.getElementById('token-form').hidden")
        page.goto(f"{api.url}/dashboard?{WEEK}#token={api.admin_token}")
        loaded(page, "spend")
        assert page.js("document.getElementById('total-cost').textContent") == "$610.24"
        keep_screenshot(page, "dashboard.png", height=1600)
        click(page, 'nav a[data-view="jobs"]')
        loaded(page, "jobs")
        choose(page, "status-filter", "RUNNING")  # an admin sees every team's jobs
        page.wait_for(f"{JOB_ROWS}.length === 1 && location.hash === '#/jobs?status=RUNNING'")
        assert page.js(f"[...{JOB_ROWS}].map(r => r.cells[1].textContent)") == ["team-a"]


def test_api_text_is_shown_as_text(console: Console, tmp_path: Path) -> None:
    with transaction(console.api.session_factory) as session:
        team = session.query(Team).filter_by(name="ml").one()
        job = _job(session, team, "<img src=x onerror=alert(1)>", "PENDING", age_min=0)
        job_id = job.id
    with browser(tmp_path / "profile") as page:
        page.goto(f"{console.api.url}/dashboard#token={console.token}&/jobs/{job_id}")
        loaded(page, "job")
        assert page.js("document.getElementById('job-name').textContent") == (
            "<img src=x onerror=alert(1)>"
        )
        assert page.js("document.querySelectorAll('img').length") == 0
        assert not page.js("document.getElementById('cancel-box').hidden")  # PENDING: cancellable


def test_the_final_weights_download_with_the_token(console: Console, tmp_path: Path) -> None:
    weights = b"trained weights " * 4096
    with transaction(console.api.session_factory) as session:
        team = session.query(Team).filter_by(name="ml").one()
        job_id = _job(session, team, "weights", "SUCCEEDED", age_min=0).id
    # Where the API's local artifact store looks: the checkpoint root of the API's settings.
    root = Path(Settings(home=console.api.attempts_root.parent).checkpoint_root()) / job_id
    for step, content in ((20, b"older"), (40, weights)):
        directory = root / f"step-{step:012d}"
        directory.mkdir(parents=True)
        (directory / "model.pt").write_bytes(content)
        sha = hashlib.sha256(content).hexdigest()
        manifest = {"files": {"model.pt": {"size": len(content), "sha256": sha}}}
        (directory / "manifest.json").write_text(json.dumps(manifest))
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    with browser(tmp_path / "profile") as page:
        page.call("Page.setDownloadBehavior", behavior="allow", downloadPath=str(downloads))
        page.goto(f"{console.api.url}/dashboard#token={console.token}&/jobs/{job_id}")
        loaded(page, "job")
        page.wait_for("!document.getElementById('artifacts-panel').hidden")
        assert page.js(text("artifacts-note")) == "The trained weights: checkpoint at step 40."
        links = page.js("[...document.querySelectorAll('#artifacts a')].map(a => a.dataset.url)")
        assert links == [f"{console.api.url}/v1/jobs/{job_id}/artifacts/40/model.pt"]
        click(page, "#artifacts a")
        page.wait_for("document.querySelector('#artifacts a').dataset.state === 'done'")
        saved = downloads / "model.pt"
        deadline = time.monotonic() + 30
        while not (saved.exists() and saved.read_bytes() == weights):
            assert time.monotonic() < deadline, sorted(p.name for p in downloads.iterdir())
            time.sleep(0.2)
