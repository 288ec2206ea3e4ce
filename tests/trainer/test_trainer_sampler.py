"""The distributed sampler: ranks split each epoch, and a saved position resumes exactly."""

from __future__ import annotations

from itertools import islice

from trainer.sampler import ResumableSampler


def batches(sampler: ResumableSampler, epoch: int, start: int = 0) -> list[list[int]]:
    sampler.set_position(epoch, start)
    return list(sampler)


def test_ranks_split_each_epoch_without_overlap() -> None:
    ranks = [ResumableSampler(50, batch_size=4, rank=r, world_size=3, seed=1) for r in range(3)]
    seen = [i for s in ranks for b in batches(s, 0) for i in b]
    assert len(seen) == len(set(seen)) == 48  # 4 global batches of 12, the rest dropped
    assert batches(ranks[0], 0) != batches(ranks[0], 1)  # a new order each epoch


def test_resuming_mid_epoch_continues_with_the_next_batch() -> None:
    sampler = ResumableSampler(100, batch_size=5, rank=1, world_size=2, seed=3)
    full = batches(sampler, 2)
    assert batches(sampler, 2, start=4) == full[4:]
    sampler.set_position(2, 0)
    consumed = list(islice(iter(sampler), 4))
    assert consumed == full[:4]


def test_a_different_world_size_resumes_at_the_same_sample() -> None:
    two = [ResumableSampler(64, batch_size=4, rank=r, world_size=2, seed=0) for r in range(2)]
    state = {"epoch": 0, "batches": 3, "samples": 3 * 4 * 2}
    one = ResumableSampler(64, batch_size=4, rank=0, world_size=1, seed=0)
    position = one.restore(state, batch_size=4, world_size=2)
    assert position.batches == 6
    seen_before = {i for s in two for b in batches(s, 0)[:3] for i in b}
    assert not seen_before & {i for b in list(one) for i in b}
