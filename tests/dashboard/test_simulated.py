"""The dashboard says when the local launcher only simulates a job's cloud, instance and price
(issue 23, 2): a notice on every view and a tag on the placement; nothing of it on Kubernetes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpujobs.client import Client, load_spec
from gpujobs.resources import SIMULATED_NOTICE
from tests.conftest import make_team
from tests.dashboard.browser import CHROMIUM, browser
from tests.sdk.server import live_api
from tests.sdk.test_cli import EXAMPLES

if CHROMIUM is None and not os.environ.get("CI"):
    pytest.skip("Debian's chromium is not installed", allow_module_level=True)


@pytest.mark.parametrize("launcher", ["local", "kubernetes"])
def test_the_job_page_says_whether_its_placement_is_simulated(
    launcher: str, tmp_path: Path
) -> None:
    local = launcher == "local"
    with live_api(tmp_path / "home", launcher=launcher) as api:
        token = make_team(api.session_factory, "team-a")
        with Client(api.url, token, retry=None) as gj:
            job_id = gj.submit(load_spec(EXAMPLES / "first-run.yaml")).id
        api.add_attempt(job_id, 1, region="ap-east-1", zone="ape1-az3", capacity_type="spot",
                        price_per_hour=0.09)  # fmt: skip
        with browser(tmp_path / "profile") as page:
            page.goto(f"{api.url}/dashboard#token={token}&/jobs/{job_id}")
            page.wait_for(
                "document.body.dataset.view === 'job' && document.body.dataset.loaded === 'true'"
            )
            notice = page.js(
                "(() => { const n = document.getElementById('simulated');"
                " return [n.getClientRects().length > 0, n.textContent]; })()"
            )
            facts = page.js("document.getElementById('job-facts').textContent")
            page.goto(f"{api.url}/dashboard#/spend")
            page.wait_for(
                "document.body.dataset.view === 'spend' && document.body.dataset.loaded === 'true'"
            )
            on_spend = page.js("document.getElementById('simulated').getClientRects().length > 0")
    assert notice == ([True, SIMULATED_NOTICE] if local else [False, ""])
    assert on_spend is local
    tagged = "spot at $0.09/h (simulated)"
    assert (tagged in facts) is local, json.dumps(facts)
    assert "aws ap-east-1 / ape1-az3" in facts
