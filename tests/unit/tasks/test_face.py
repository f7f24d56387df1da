"""Face task pieces: semi-hard triplet mining, P x K batches per rank, heads, pairs."""

import pytest
import torch
from torch import nn
from torch.utils.data.distributed import DistributedSampler

from scaleprobe.config.sections import TaskConfig
from scaleprobe.core.errors import ConfigError, DataError
from scaleprobe.data.datasets import Subset, TensorImages
from scaleprobe.data.loader import Indexed
from scaleprobe.models import build_model
from scaleprobe.tasks import build_task
from scaleprobe.tasks.face import (
    EmbeddingNet,
    PKBatchSampler,
    dataset_labels,
    find_pairs,
    make_pairs,
    semihard_triplet_loss,
    split_head,
)


def test_semihard_negative_is_the_closest_beyond_the_positive():
    # anchor 0, positive 1 at squared distance 1; negatives at 0.25 (hard), 1.44 and 4
    emb = torch.tensor([[0.0], [1.0], [0.5], [1.2], [-2.0]])
    labels = torch.tensor([0, 0, 1, 2, 3])
    loss = semihard_triplet_loss(emb, labels, margin=0.5)
    # (a=0, p=1): semi-hard negative is 3 (1.44 > 1): 1 - 1.44 + 0.5 = 0.06
    # (a=1, p=0): negatives at 0.25, 0.04, 9: none beyond 1 except 9: 1 - 9 + .5 < 0 -> 0
    assert float(loss) == pytest.approx(0.06 / 2, abs=1e-6)


def test_no_negative_farther_takes_the_farthest():
    emb = torch.tensor([[0.0], [2.0], [1.0]])
    labels = torch.tensor([0, 0, 1])
    # every negative is closer than the positive (d_ap = 4, d_an = 1): use the farthest (1)
    assert float(semihard_triplet_loss(emb, labels, margin=0.2)) == pytest.approx(4 - 1 + 0.2)


def test_batch_without_triplets_gives_zero_with_a_gradient():
    emb = torch.randn(4, 8, requires_grad=True)
    loss = semihard_triplet_loss(emb, torch.tensor([0, 1, 2, 3]))
    assert float(loss.detach()) == 0.0
    loss.backward()
    assert emb.grad is not None


def _pk_labels(n_ids=6, per_id=10):
    return [c for c in range(n_ids) for _ in range(per_id)]


def test_pk_batches_hold_runs_of_k():
    labels = _pk_labels()
    s = PKBatchSampler(labels, batch_size=12, k=4, seed=0)
    batches = list(s)
    assert len(batches) == len(s) == 5
    first = batches[0]
    runs = [first[i:i + 4] for i in range(0, 12, 4)]
    assert all(len({labels[i] for i in run}) == 1 for run in runs)
    assert len({labels[run[0]] for run in runs}) == 3  # P = 3 different identities
    assert list(s) != batches  # a new order every epoch


def test_pk_batches_per_rank_come_from_the_rank_shard():
    labels = _pk_labels(n_ids=5, per_id=13)
    seen = []
    lengths = set()
    for rank in range(2):
        s = PKBatchSampler(labels, batch_size=8, k=4, seed=3)
        s.shard = DistributedSampler(range(len(labels)), num_replicas=2, rank=rank, seed=3,
                                     drop_last=True)
        shard = set(s.shard)
        batches = list(s)
        lengths.add(len(batches))
        flat = [i for b in batches for i in b]
        assert set(flat) <= shard and len(flat) == len(set(flat))
        assert len(shard) - len(flat) < 8  # only the last partial batch is dropped
        seen.append(set(flat))
    assert len(lengths) == 1  # every rank the same number of steps
    assert not seen[0] & seen[1]


def test_pk_refuses_a_batch_of_one_identity_and_too_few_samples():
    with pytest.raises(ConfigError, match="no negatives"):
        PKBatchSampler(_pk_labels(), batch_size=4, k=4, seed=0)
    with pytest.raises(DataError, match="fewer than one batch"):
        list(PKBatchSampler([0, 0, 1], batch_size=8, k=2, seed=0))


def test_labels_through_wrappers():
    x = torch.zeros(6, 3, 8, 8, dtype=torch.uint8)
    base = TensorImages(x, torch.tensor([5, 4, 3, 2, 1, 0]))
    ds = Indexed(Subset(base, [1, 3, 5]), None)
    assert dataset_labels(ds) == [4, 2, 0]
    assert find_pairs(ds) is None


def test_split_head_small_and_torchvision_models():
    trunk, width = split_head(build_model("digits_cnn", 10, 32))
    assert trunk(torch.zeros(2, 3, 32, 32)).shape == (2, width)
    for name in ("resnet18", "mobilenet_v2"):
        trunk, width = split_head(build_model(name, 10, 32))
        assert trunk(torch.zeros(2, 3, 32, 32)).shape == (2, width)
    with pytest.raises(ConfigError, match="no nn.Linear"):
        split_head(nn.Sequential(nn.Conv2d(3, 4, 3)))


def test_embedding_is_unit_length_and_softmax_head_gives_logits():
    task = build_task(TaskConfig(task="face", loss="softmax", embedding_dim=16), 7)
    model = task.build_model(build_model("digits_cnn", 7, 32))
    x = torch.rand(3, 3, 32, 32)
    assert model(x).shape == (3, 7)  # training: identity logits
    model.eval()
    e = model(x)
    assert e.shape == (3, 16) and torch.allclose(e.norm(dim=1), torch.ones(3), atol=1e-5)
    triplet = build_task(TaskConfig(task="face", loss="triplet", embedding_dim=16), 7)
    net = triplet.build_model(build_model("digits_cnn", 7, 32))
    assert isinstance(net, EmbeddingNet) and net.classifier is None


def test_face_config_errors():
    with pytest.raises(ConfigError, match="images_per_identity"):
        build_task(TaskConfig(task="face", loss="triplet", images_per_identity=1), 10)
    with pytest.raises(ConfigError, match="embedding_dim"):
        build_task(TaskConfig(task="face", embedding_dim=1), 10)


def test_generated_pairs_are_balanced_and_fixed():
    labels = [i % 4 for i in range(40)]
    pairs = make_pairs(labels, per_kind=50)
    assert pairs == make_pairs(labels, per_kind=50)
    same = [p for p in pairs if p[2]]
    assert len(same) == 50 and len(pairs) == 100
    assert all((labels[a] == labels[b]) == s for a, b, s in pairs)
    assert len(set(pairs)) == len(pairs)
    with pytest.raises(DataError):
        make_pairs([0, 1, 2])
