"""The dashboard in headless Chromium, against a real API serving a ledger built by hand.

Set GPUJOBS_DASHBOARD_SCREENSHOT=docs/dashboard.png to keep a copy of the admin screenshot.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from api.database import transaction
from api.models import Job, JobAttempt, TeamBudget
from api.teams import service as teams
from tests.dashboard.browser import CHROMIUM, chromium_command
from tests.sdk.server import LiveApi, live_api
from tests.usage import ledger_seed as L

if CHROMIUM is None and not os.environ.get("CI"):
    pytest.skip("Debian's chromium is not installed", allow_module_level=True)

WEEK = "from=2025-03-01T00:00:00Z&to=2025-03-08T00:00:00Z"
# research/sweep: (day, start hour, hours, capacity, $/h, on-demand $/h, end reason)
SWEEP = [
    (3, 2, 6, "spot", 2.0, 6.0, "succeeded"),
    (3, 9, 5, "reserved", 1.0, 6.0, "succeeded"),
    (4, 0, 9, "spot", 2.0, 6.0, "succeeded"),
    (5, 1, 5, "on_demand", 6.0, 6.0, "succeeded"),
    (5, 8, 3, "spot", 2.0, 6.0, "preempted"),
    (6, 4, 12, "spot", 2.0, 6.0, "preempted"),
    (7, 0, 10, "reserved", 1.0, 6.0, "succeeded"),
]
SWEEP_COST = sum(hours * price for _, _, hours, _, price, _, _ in SWEEP) * L.M  # $105
# In the week, team-a's running reserved attempt counts 6 days (03-02..03-08) at $0.50/h.
TEAM_A_WEEK = L.TEAM_A["cost"] - 12 * L.M + 72 * L.M
ALL_WEEK = TEAM_A_WEEK + L.TEAM_B["cost"] + SWEEP_COST


def seed_sweep(api: LiveApi) -> None:
    with transaction(api.session_factory) as session:
        team, _ = teams.create_team(session, name="research")
        session.add(TeamBudget(team_id=team.id, monthly_microusd=500 * L.M))
        spec = {"name": "sweep", "trainer": {"steps": 1000}}
        job = Job(
            team_id=team.id, name="sweep", status="SUCCEEDED", spec=spec, created_at=L.at(3, 0)
        )
        # Queued, not yet run: it holds $20 of research's budget until it ends.
        queued = {"name": "queued", "trainer": {"steps": 1000}}
        session.add(
            Job(
                team_id=team.id, name="queued", status="PENDING", spec=queued,
                quote_hold_microusd=20 * L.M, holds_budget=True,
            )
        )  # fmt: skip
        session.add(job)
        session.flush()
        for number, (day, hour, hours, capacity, price, od, reason) in enumerate(SWEEP, 1):
            start = L.at(day, hour)
            session.add(
                JobAttempt(
                    job_id=job.id,
                    team_id=team.id,
                    number=number,
                    cloud="aws",
                    region="us-east-1",
                    zone="us-east-1b",
                    instance_type="g5.12xlarge",
                    gpu_model="A10G",
                    gpu_count=4,
                    nodes=1,
                    capacity_type=capacity,
                    price_per_hour=price,
                    on_demand_price_per_hour=od,
                    started_at=start,
                    ended_at=start + timedelta(hours=hours),
                    end_reason=reason,
                    cost_microusd=round(hours * price * L.M),
                    checkpoint_every_seconds=1800,
                )
            )


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveApi, L.Seeded]]:
    with live_api(tmp_path_factory.mktemp("dashboard") / "home") as api:
        seeded = L.seed(api.session_factory)
        seed_sweep(api)
        yield api, seeded


def chromium(tmp_path: Path, url: str, *, screenshot: Path | None = None) -> str:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    command = [*chromium_command(profile, height=1600), "--virtual-time-budget=5000"]
    command += [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
    run = subprocess.run([*command, url], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


def text_of(dom: str, element_id: str) -> str:
    match = re.search(rf'id="{element_id}"[^>]*>([^<]*)<', dom)
    assert match, f"#{element_id} is not in the page"
    return match.group(1)


def test_a_team_sees_its_spend_and_only_its_own(
    dashboard: tuple[LiveApi, L.Seeded], tmp_path: Path
) -> None:
    api, seeded = dashboard
    dom = chromium(tmp_path, f"{api.url}/dashboard?{WEEK}#token={seeded.tokens['team-a']}")
    assert 'data-loaded="true"' in dom
    assert text_of(dom, "total-cost") == "$501.84" == f"${TEAM_A_WEEK / L.M:,.2f}"
    assert f'data-microusd="{TEAM_A_WEEK}"' in dom
    assert text_of(dom, "preemptions") == "2"
    assert text_of(dom, "lost-cost") == "$6.00"
    top_jobs = re.findall(r'<tr data-job="[^"]+"><td>([^<]+)</td><td class="num"', dom)
    assert top_jobs[:2] == ["llm", "vision"]
    assert "sweep" not in dom and "etl" not in dom
    assert "1200 / 3000" in dom  # vision is running
    assert dom.count('data-capacity="reserved"') == 6  # one reserved bar a day, 03-02..03-07


def test_an_admin_sees_every_team_with_charts_and_budgets(
    dashboard: tuple[LiveApi, L.Seeded], tmp_path: Path
) -> None:
    api, _ = dashboard
    url = f"{api.url}/dashboard?{WEEK}#token={api.admin_token}"
    dom = chromium(tmp_path, url)
    assert text_of(dom, "total-cost") == f"${ALL_WEEK / L.M:,.2f}" == "$610.24"
    assert text_of(dom, "preemptions") == "4"
    assert "team-b: $5.00 of $100.00 · $95.00 left" in dom
    assert "research: $0.00 of $500.00 · $20.00 held · $480.00 left" in dom
    bars = set(re.findall(r'data-day="([^"]+)" data-capacity="([^"]+)"', dom))
    assert ("2025-03-05", "on_demand") in bars and ("2025-03-07", "reserved") in bars
    assert len({day for day, _ in bars}) == 7

    png = tmp_path / "dashboard.png"
    chromium(tmp_path, url, screenshot=png)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (1280, 1600)
    assert len(data) > 40_000  # a blank or error page compresses to a few KB
    keep = os.environ.get("GPUJOBS_DASHBOARD_SCREENSHOT")
    if keep:
        shutil.copyfile(png, keep)


def test_without_a_token_the_page_asks_for_one(
    dashboard: tuple[LiveApi, L.Seeded], tmp_path: Path
) -> None:
    api, _ = dashboard
    dom = chromium(tmp_path, f"{api.url}/dashboard")
    assert re.search(r'<form id="token-form">', dom)  # shown, no `hidden`
    assert "Enter an API token" in dom
    refused = chromium(tmp_path, f"{api.url}/dashboard#token=gpj_wrong")
    assert "That token was refused (401)." in refused
    assert 'data-loaded="true"' not in refused
