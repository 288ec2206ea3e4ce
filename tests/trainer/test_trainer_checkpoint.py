"""The checkpoint store: complete checkpoints only, checked against the manifest, oldest pruned,
on a local directory and on a real S3 server."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from devstack.s3server import S3Server
from gpujobs.checkpoints import step_dir
from tests.trainer.trainer_runs import assert_same_weights, run_config, run_in_process
from trainer.checkpoint import (
    Checkpointer,
    Store,
    latest_complete_step,
    load_latest,
    open_store,
)
from trainer.checkpoint.writer import SnapshotBuffers, serialize


def save_steps(store: Store, steps: list[int], *, keep_last: int = 10, world_size: int = 1) -> None:
    writers = [
        Checkpointer(store, rank=r, world_size=world_size, nonce="n", keep_last=keep_last)
        for r in range(world_size)
    ]
    for step in steps:
        for writer in reversed(writers):  # rank 0 last: it waits for the others' records
            shared = {"w": torch.full((4,), float(step))} if writer.rank == 0 else None
            writer.save(step, shared=shared, part={"rank": writer.rank, "step": step})
        for writer in writers:
            result = writer.wait()
            assert result is not None and result.ok


@pytest.fixture(params=["local", "s3"])
def store_uri(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str | None]:
    if request.param == "local":
        return str(tmp_path / "ckpt"), None
    server: S3Server = request.getfixturevalue("s3_env")
    return f"s3://checkpoints/{tmp_path.name}", server.endpoint_url


def test_store_round_trip(store_uri: tuple[str, str | None]) -> None:
    uri, endpoint = store_uri
    store = open_store(uri, endpoint_url=endpoint)
    big = os.urandom(40 * 1024 * 1024)  # above the multipart threshold
    store.put("a/one", b"1")
    store.put("a/big", big)
    store.put("b/two", b"22")
    assert store.list() == ["a/big", "a/one", "b/two"]
    assert store.list("a/") == ["a/big", "a/one"]
    assert store.get("a/big") == big
    store.delete(["a/big", "a/one"])
    assert store.list() == ["b/two"]


def test_keeps_the_last_k_and_loads_every_rank(store_uri: tuple[str, str | None]) -> None:
    uri, endpoint = store_uri
    store = open_store(uri, endpoint_url=endpoint)
    save_steps(store, [2, 4, 6, 8], keep_last=2, world_size=2)
    assert sorted({key.split("/")[0] for key in store.list()}) == [step_dir(6), step_dir(8)]
    state = load_latest(uri, endpoint_url=endpoint)
    assert state is not None and state.step == 8 and state.world_size == 2
    assert torch.equal(state.shared["w"], torch.full((4,), 8.0))
    assert state.ranks == {0: {"rank": 0, "step": 8}, 1: {"rank": 1, "step": 8}}
    manifest = json.loads(store.get(f"{step_dir(8)}/manifest.json"))
    assert set(manifest["files"]) == {"model.pt", "rank-00000.pt", "rank-00001.pt"}
    assert all(len(entry["sha256"]) == 64 for entry in manifest["files"].values())


def test_corrupt_or_partial_checkpoints_are_never_loaded(tmp_path: Path) -> None:
    uri = str(tmp_path / "ckpt")
    store = open_store(uri)
    save_steps(store, [1, 2, 3, 4], world_size=2)
    assert latest_complete_step(uri) == 4
    shard = tmp_path / "ckpt" / step_dir(4) / "rank-00001.pt"
    shard.write_bytes(shard.read_bytes()[:-10])  # truncated
    assert latest_complete_step(uri) == 3
    (tmp_path / "ckpt" / step_dir(3) / "manifest.json").unlink()  # killed before the manifest
    assert latest_complete_step(uri) == 2
    model = tmp_path / "ckpt" / step_dir(2) / "model.pt"
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, wrong bytes
    model.write_bytes(bytes(data))
    assert latest_complete_step(uri) == 1
    (tmp_path / "ckpt" / step_dir(1) / "manifest.json").write_text("{not json")
    assert latest_complete_step(uri) is None


def test_a_record_from_an_older_attempt_does_not_complete_a_checkpoint(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "ckpt"))
    stale = Checkpointer(store, rank=1, world_size=2, nonce="old", keep_last=3)
    stale.save(5, shared=None, part={"old": True}, wait=True)
    writer = Checkpointer(store, rank=0, world_size=2, nonce="new", keep_last=3, part_timeout_s=1)
    writer.save(5, shared={"w": torch.zeros(1)}, part={}, wait=True)
    assert writer.last_result is not None and not writer.last_result.ok
    assert latest_complete_step(str(tmp_path / "ckpt")) is None


def test_resume_falls_back_to_the_newest_complete_checkpoint(tmp_path: Path) -> None:
    uri = str(tmp_path / "ckpt")
    config = run_config(uri, steps=20, checkpoint={"every_steps": 5, "keep_last": 3})
    result, _ = run_in_process(config)
    assert result.exit_code == 0
    final = load_latest(uri)
    assert final is not None and final.step == 20
    model = tmp_path / "ckpt" / step_dir(20) / "model.pt"
    model.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
    (tmp_path / "ckpt" / step_dir(15) / "manifest.json").unlink()
    assert latest_complete_step(uri) == 10

    result, records = run_in_process(config)
    assert result.exit_code == 0
    assert [r["step"] for r in records if r.get("event") == "resume"] == [10]
    again = load_latest(uri)
    assert again is not None and again.step == 20
    assert_same_weights(again.shared["model"], final.shared["model"])


def test_tied_weights_are_stored_once_and_come_back_tied(tmp_path: Path) -> None:
    uri = str(tmp_path / "ckpt")
    result, _ = run_in_process(run_config(uri, steps=2, checkpoint={"every_steps": 5}))
    assert result.exit_code == 0
    state = load_latest(uri)
    assert state is not None
    model = state.shared["model"]
    # The gpt workload ties its output head to the token embedding.
    tied = model["lm_head.weight"]
    assert tied.untyped_storage().data_ptr() == model["wte.weight"].untyped_storage().data_ptr()
    stored = (tmp_path / "ckpt" / step_dir(2) / "model.pt").stat().st_size
    untied = serialize({**state.shared, "model": {k: v.clone() for k, v in model.items()}})
    assert len(untied) - stored >= tied.numel() * tied.element_size()


def test_views_of_one_storage_are_copied_once() -> None:
    flat = torch.arange(12, dtype=torch.float32)
    state = {"a": flat[:6].view(2, 3), "b": flat[6:].view(3, 2).t(), "c": flat, "d": flat[::5]}
    snapshot = SnapshotBuffers().copy(state)
    assert all(torch.equal(snapshot[k], state[k]) for k in state)
    assert snapshot["b"].stride() == state["b"].stride()
    storages = {snapshot[k].untyped_storage().data_ptr() for k in state}
    assert len(storages) == 1 and storages != {flat.untyped_storage().data_ptr()}
    flat.zero_()  # the copy is a copy
    assert snapshot["c"].sum() == sum(range(12))
