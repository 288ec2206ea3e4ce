"""The job page tells one story (issue 37, items 3 and 5): one checkpoint step in its facts and
its artifacts, the store's when a stopped trainer's last checkpoint never reached the record;
standbys marked as the CLI marks them, and attempts' ends in words."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from api.database import transaction
from api.models import Job
from api.settings import Settings
from gpujobs.client import Client, load_spec
from tests.conftest import make_team
from tests.dashboard.browser import CHROMIUM, Page, browser
from tests.sdk.server import LiveApi, live_api
from tests.sdk.test_cli import EXAMPLES

if CHROMIUM is None and not os.environ.get("CI"):
    pytest.skip("Debian's chromium is not installed", allow_module_level=True)


@dataclass
class Seeded:
    api: LiveApi
    token: str
    job_id: str


def _store_checkpoint(api: LiveApi, job_id: str, step: int) -> None:
    """A complete checkpoint where the API's local artifact store looks for the job's."""
    root = Path(Settings(home=api.attempts_root.parent).checkpoint_root()) / job_id
    directory = root / f"step-{step:012d}"
    directory.mkdir(parents=True)
    content = f"weights at {step}".encode()
    (directory / "model.pt").write_bytes(content)
    sha = hashlib.sha256(content).hexdigest()
    manifest = {"files": {"model.pt": {"size": len(content), "sha256": sha}}}
    (directory / "manifest.json").write_text(json.dumps(manifest))


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    with live_api(tmp_path_factory.mktemp("facts") / "home") as api:
        token = make_team(api.session_factory, "team-a")
        with Client(api.url, token, retry=None) as gj:
            job_id = gj.submit(load_spec(EXAMPLES / "first-run.yaml")).id
        api.add_attempt(job_id, 1, end_reason="handed_over")
        api.add_attempt(job_id, 2, capacity_type="spot", standby=True, price_per_hour=0.09)
        with transaction(api.session_factory) as session:
            job = session.get(Job, job_id)
            assert job is not None
            # The record: the last report reached the API at the checkpoint of step 4000; the
            # trainer, told to stop, saved 4186 and exited before its report went out.
            job.status = "RUNNING"
            job.resume_from_step = 4000
            job.progress = {"step": 4150, "total_steps": 6000, "checkpoint_step": 4000}
        _store_checkpoint(api, job_id, 4000)
        _store_checkpoint(api, job_id, 4186)
        yield Seeded(api, token, job_id)


@contextmanager
def _job_page(seeded: Seeded, profile: Path) -> Iterator[Page]:
    with browser(profile) as page:
        page.goto(f"{seeded.api.url}/dashboard#token={seeded.token}&/jobs/{seeded.job_id}")
        page.wait_for(
            "document.body.dataset.view === 'job' && document.body.dataset.loaded === 'true'"
        )
        page.wait_for("!document.getElementById('artifacts-panel').hidden")
        yield page


def test_the_page_names_one_checkpoint_step_the_stores(seeded: Seeded, tmp_path: Path) -> None:
    with _job_page(seeded, tmp_path / "profile") as page:
        facts = page.js("document.getElementById('job-facts').textContent")
        note = page.js("document.getElementById('artifacts-note').textContent")
        assert "step 4186" in facts and "resumes from it" in facts, facts
        assert "4000" not in facts, facts  # no second figure for the same checkpoint
        assert "step 4186" in note and "4000" not in note, note


def test_a_standby_is_marked_and_ends_read_as_words(seeded: Seeded, tmp_path: Path) -> None:
    with _job_page(seeded, tmp_path / "profile") as page:
        cells = page.js(
            "[...document.querySelectorAll('#attempts tbody tr')]"
            ".map(r => [...r.cells].map(c => c.textContent))"
        )
        assert cells[0][1] == "on-demand" and cells[0][8] == "handed over", cells[0]
        assert cells[1][1] == "spot standby", cells[1]
