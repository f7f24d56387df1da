"""An epoch that holds no full batch is an error before the first step, not a loop that spins.

Bug: ``run --strategy ddp --nproc 2 --batch-size 1000`` on the digits (1,438 training samples)
passed the dataset's own check (1,438 >= 1,000), but each rank's sampler holds 719: every
epoch ended at once with no batch, and the run showed "setting up, or in the first step" for
five minutes until it was killed."""

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from scaleprobe.core.errors import DataError
from scaleprobe.train.parts import no_full_batch

DS = TensorDataset(torch.zeros(1438, 1))


def _loader(batch: int, ranks: int | None) -> tuple[DataLoader, DistributedSampler | None]:
    sampler = (DistributedSampler(DS, num_replicas=ranks, rank=0, shuffle=False)
               if ranks else None)
    return DataLoader(DS, batch_size=batch, sampler=sampler, drop_last=True), sampler


def test_a_rank_whose_share_is_under_one_batch_is_told_the_largest_that_runs():
    loader, sampler = _loader(1000, 2)
    with pytest.raises(DataError) as e:
        no_full_batch(loader, len(DS), sampler, 1000)
    assert str(e.value) == ("the dataset has 1,438 samples, 719 of them for each rank, fewer "
                            "than one batch of 1,000 per rank: lower --batch-size to 719 or "
                            "less, or run fewer ranks")


def test_one_process_is_told_without_ranks():
    loader, _ = _loader(2048, None)
    with pytest.raises(DataError, match=r"1,438 samples, fewer than one batch of 2,048 per "
                                        r"rank: lower --batch-size to 1,438 or less$"):
        no_full_batch(loader, len(DS), None, 2048)


@pytest.mark.parametrize(("batch", "ranks"), [(719, 2), (1438, None), (179, 8)])
def test_a_share_of_one_batch_or_more_passes(batch, ranks):
    loader, sampler = _loader(batch, ranks)
    no_full_batch(loader, len(DS), sampler, batch)  # no error: at least one step an epoch


def test_a_stream_of_unknown_length_is_not_judged():
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(())

    no_full_batch(DataLoader(Stream(), batch_size=4), 0, None, 4)
