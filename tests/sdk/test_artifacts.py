"""The trained model is reachable: a real trainer run's checkpoints are listed by the API, the
final one named, and `gpujobs download` fetches its files, checked against their sha256."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import httpx
import pytest
import torch

from api.settings import Settings
from gpujobs.cli import main
from gpujobs.client import Client
from tests.sdk.server import LiveApi
from tests.trainer.trainer_runs import run_config, run_in_process


def _train(api: LiveApi, job_id: str) -> None:
    """The real trainer, checkpointing where the launcher would point this job."""
    root = Settings(home=api.attempts_root.parent).checkpoint_root()
    config = run_config(f"{root}/{job_id}", steps=6, checkpoint={"every_steps": 3, "keep_last": 3})
    result, _ = run_in_process(config)
    assert result.exit_code == 0 and result.step == 6


def test_final_weights_are_listed_and_downloaded(
    api: LiveApi, team_token: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Client(api.url, team_token) as gj:
        job = gj.submit({"name": "weights", "trainer": {"steps": 6}})
        _train(api, job.id)
        listing = gj.artifacts(job.id)
        assert [c.step for c in listing.checkpoints] == [3, 6]
        assert listing.final_step is None  # not succeeded yet: no weights are final
        api.finish_with_log(job.id, "done\n")
        assert gj.artifacts("weights").final_step == 6

    monkeypatch.setenv("GPUJOBS_URL", api.url)
    monkeypatch.setenv("GPUJOBS_TOKEN", team_token)
    out = io.StringIO()
    assert main(["download", "weights", "-o", str(tmp_path), "--json"], out=out) == 0
    folder = Path(json.loads(out.getvalue())["path"])
    final = next(c for c in listing.checkpoints if c.step == 6)
    for file in final.files:
        data = (folder / file.name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == file.sha256 and len(data) == file.size
    state = torch.load(folder / "model.pt", map_location="cpu", weights_only=False)
    assert state  # the trained weights load with plain torch


def test_other_teams_and_unlisted_files_are_refused(
    api: LiveApi, team_token: str, other_token: str
) -> None:
    with Client(api.url, team_token) as gj:
        job = gj.submit({"name": "mine", "trainer": {"steps": 6}})
        _train(api, job.id)
        listing = gj.artifacts(job.id)
    url = listing.checkpoints[0].files[0].url
    stranger = {"Authorization": f"Bearer {other_token}"}
    assert httpx.get(f"{api.url}/v1/jobs/{job.id}/artifacts", headers=stranger).status_code == 404
    assert httpx.get(url, headers=stranger).status_code == 404
    mine = {"Authorization": f"Bearer {team_token}"}
    step = listing.checkpoints[0].step
    for name in ("rank-00000.tmp", "%2e%2e%2fsecret", ".manifest.json.tmp"):
        response = httpx.get(f"{api.url}/v1/jobs/{job.id}/artifacts/{step}/{name}", headers=mine)
        assert response.status_code in (404, 422), name
