"""A job's checkpoints stay where its first launch put them: a later change of the deployment's
checkpoint root (GPUJOBS_CHECKPOINT_URI) moves neither where its next attempts write nor where
the artifacts API reads. Real database (SQLite and PostgreSQL), a recording launcher."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from api.auth import authenticate
from api.database import transaction
from api.models import Job
from api.settings import Settings
from gpujobs.checkpoints import SHARED_FILE, FileEntry, Manifest, job_checkpoint_uri, step_dir
from tests.conftest import make_team
from tests.worker.support import Clock, RecordingLauncher, control_plane, job, submit
from worker.control import ControlPlane
from worker.launchers.base import ObservedState
from worker.reconciler import reconcile_once
from worker.scheduler import schedule_once


def _preempt_and_relaunch(cp: ControlPlane, launcher: RecordingLauncher, clock: Clock) -> None:
    attempt_id = launcher.launches[-1].attempt_id
    launcher.script(attempt_id, ObservedState.RUNNING)
    reconcile_once(cp)
    clock.advance(60)
    launcher.script(attempt_id, ObservedState.PREEMPTED, exit_code=75, message="reclaimed")
    assert reconcile_once(cp) == 1
    assert len(schedule_once(cp).placed) == 1


def _checkpoint(prefix: Path, step: int, data: bytes) -> None:
    """A complete checkpoint as the trainer leaves it: its file, then its manifest."""
    directory = prefix / step_dir(step)
    directory.mkdir(parents=True)
    (directory / SHARED_FILE).write_bytes(data)
    manifest = Manifest(step=step, world_size=1, files={SHARED_FILE: FileEntry.of(data)})
    (directory / "manifest.json").write_bytes(manifest.dumps())


def test_later_attempts_keep_the_prefix_of_the_first_launch(
    settings: Settings, session_factory: sessionmaker[Session], tmp_path: Path
) -> None:
    first_root, second_root = str(tmp_path / "first"), str(tmp_path / "second")
    settings.checkpoint_uri = first_root
    launcher, clock = RecordingLauncher(), Clock()
    cp = control_plane(settings, session_factory, launcher, clock)
    token = make_team(session_factory, "team-a")
    with session_factory() as session:
        who = authenticate(session, authorization=f"Bearer {token}", admin_token="")
    job_id = submit(session_factory, who)
    assert job(session_factory, job_id).checkpoint_uri is None  # submitted, never launched

    schedule_once(cp)
    settings.checkpoint_uri = second_root  # the operator moves the root while the job runs
    _preempt_and_relaunch(cp, launcher, clock)

    expected = job_checkpoint_uri(first_root, job_id)
    assert [r.run_config.checkpoint_uri for r in launcher.launches] == [expected, expected]
    assert job(session_factory, job_id).checkpoint_uri == expected


def test_a_job_launched_before_prefixes_were_recorded_keeps_the_current_root(
    settings: Settings, session_factory: sessionmaker[Session], tmp_path: Path
) -> None:
    """A row from before migration 0010 has no prefix: it is looked for under the current root,
    and its next launch records that one, so a later change of the root strands it no more."""
    settings.checkpoint_uri = str(tmp_path / "root")
    launcher, clock = RecordingLauncher(), Clock()
    cp = control_plane(settings, session_factory, launcher, clock)
    token = make_team(session_factory, "team-a")
    with session_factory() as session:
        who = authenticate(session, authorization=f"Bearer {token}", admin_token="")
    job_id = submit(session_factory, who)
    schedule_once(cp)
    with transaction(session_factory) as session:
        session.execute(update(Job).where(Job.id == job_id).values(checkpoint_uri=None))

    _preempt_and_relaunch(cp, launcher, clock)
    settings.checkpoint_uri = str(tmp_path / "elsewhere")
    _preempt_and_relaunch(cp, launcher, clock)

    expected = job_checkpoint_uri(str(tmp_path / "root"), job_id)
    assert [r.run_config.checkpoint_uri for r in launcher.launches] == [expected] * 3


def test_the_artifacts_api_reads_where_the_first_launch_put_the_checkpoints(
    settings: Settings,
    session_factory: sessionmaker[Session],
    client: TestClient,
    tmp_path: Path,
) -> None:
    first_root, second_root = tmp_path / "first", tmp_path / "second"
    settings.checkpoint_uri = str(first_root)
    launcher = RecordingLauncher()
    cp = control_plane(settings, session_factory, launcher)
    token = make_team(session_factory, "team-a")
    with session_factory() as session:
        who = authenticate(session, authorization=f"Bearer {token}", admin_token="")
    job_id = submit(session_factory, who)
    schedule_once(cp)
    _checkpoint(first_root / job_id, 3, b"the trainer's weights")
    _checkpoint(second_root / job_id, 9, b"not this job's")  # same id under the new root
    settings.checkpoint_uri = str(second_root)
    auth = {"Authorization": f"Bearer {token}"}

    listed = client.get(f"/v1/jobs/{job_id}/artifacts", headers=auth)
    fetched = client.get(f"/v1/jobs/{job_id}/artifacts/3/{SHARED_FILE}", headers=auth)

    assert listed.status_code == 200, listed.text
    assert [c["step"] for c in listed.json()["checkpoints"]] == [3]
    assert fetched.status_code == 200, fetched.text
    assert fetched.content == b"the trainer's weights"
