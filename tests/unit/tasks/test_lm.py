"""--task lm (tasks/lm.py): its loss, its evaluation, its device-resident random tokens, and
the rules that keep language models and image models apart (lmspec.py)."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from scaleprobe.config import runconfig as C
from scaleprobe.config.sections import TaskConfig
from scaleprobe.core.errors import ConfigError
from scaleprobe.data.device import DeviceBatches
from scaleprobe.data.loader import Indexed, collate_indexed
from scaleprobe.data.token_windows import RandomWindows
from scaleprobe.features.lmspec import gpt_shape
from scaleprobe.models import build_model
from scaleprobe.tasks import build_task, check_model_name


def test_task_lm_defaults_to_gpt_tiny_on_the_stdlib_text():
    cfg = C.build({"task": "lm"})
    assert cfg.model.name == "gpt_tiny" and cfg.data.dataset == "text"
    # AdamW at 3e-3, warmed up linearly over 10 untimed steps, then 50 timed steps
    t = cfg.train
    assert (t.optimizer, t.lr, t.lr_warmup, t.warmup_steps, t.steps) == (
        "adamw", 3e-3, "linear", 10, 50)
    cfg = C.build({"task": "lm", "model": "gpt2_small", "dataset": "tokens-synthetic"})
    assert cfg.model.name == "gpt2_small" and cfg.data.dataset == "tokens-synthetic"


def test_lm_defaults_give_way_to_what_the_user_set():
    t = C.build({"task": "lm", "optimizer": "sgd", "lr": 0.05, "warmup_steps": 5}).train
    assert (t.optimizer, t.lr, t.warmup_steps, t.lr_warmup) == ("sgd", 0.05, 5, "linear")
    # the length: --epochs or --target set it, so no default step count beside them
    assert C.build({"task": "lm", "epochs": 1}).train.steps is None
    assert C.build({"task": "lm", "target": "loss=3.0"}).train.steps is None
    assert C.build({"task": "lm", "steps": "auto"}).train.steps == "auto"
    # a saved configuration comes back as it was, and other tasks keep the plain defaults
    saved = C.build({"task": "lm", "optimizer": "sgd"}).to_dict()
    assert C.from_dict(saved).train.optimizer == "sgd"
    plain = C.build({}).train
    assert (plain.optimizer, plain.lr, plain.lr_warmup, plain.steps) == ("sgd", 0.05, "none",
                                                                         None)


def test_the_learning_rate_warm_up_by_hand():
    from scaleprobe.train.engine import scheduled_lr

    # --task lm's ramp over 10 steps to 3e-3: 3e-4, 6e-4, ... 3e-3 at step 9, then 3e-3
    assert [scheduled_lr(3e-3, 3e-3, True, 10, s) for s in (0, 1, 9, 10, 50)] == \
        pytest.approx([3e-4, 6e-4, 3e-3, 3e-3, 3e-3])
    # the linear scaling rule: from --lr 0.1 up to 0.4 over 4 steps
    assert [scheduled_lr(0.1, 0.4, False, 4, s) for s in (0, 1, 3, 4)] == \
        pytest.approx([0.175, 0.25, 0.4, 0.4])
    assert scheduled_lr(0.1, 0.1, False, 4, 0) is None  # nothing to change


def test_run_help_shows_the_lm_defaults():
    from scaleprobe.commands.options import flag_help

    assert flag_help("train.optimizer").endswith("(default: sgd; --task lm: adamw)")
    assert flag_help("train.lr").endswith("(default: 0.05; --task lm: 0.003)")
    assert "--task lm: 50" in flag_help("train.steps")
    assert flag_help("train.momentum").endswith("(default: 0.9)")


@pytest.mark.parametrize("keys, message", [
    ({"task": "lm", "model": "resnet18"}, "--task lm trains a GPT decoder"),
    ({"task": "lm", "dataset": "cifar10"}, "--task lm reads tokens"),
    ({"task": "lm", "dataset": "synthetic"}, "--task lm reads tokens"),
    ({"task": "lm", "transform": "heavy"}, "--transform heavy augments images"),
    ({"model": "gpt_tiny"}, "is a language model: use it with --task lm"),
    ({"task": "face", "model": "gpt2_small"}, "use it with --task lm"),
    ({"dataset": "tokens-synthetic"}, "holds tokens for --task lm"),
    ({"dataset": "text"}, "holds tokens for --task lm"),
    ({"layers": 2}, "size a GPT model: use them with --task lm"),
])
def test_language_and_image_models_do_not_mix(keys, message):
    """One line before anything is built (the config is torch-free)."""
    with pytest.raises(ConfigError, match=message) as e:
        C.build(keys)
    assert "\n" not in str(e.value)


def test_model_names_are_checked_per_task():
    check_model_name("lm", "gpt_tiny")
    with pytest.raises(ConfigError, match="unknown language model 'resnet18'"):
        check_model_name("lm", "resnet18")
    check_model_name("classification", "resnet18")


def test_the_loss_is_the_mean_next_token_cross_entropy():
    task = build_task(TaskConfig(task="lm"), 50)
    torch.manual_seed(0)
    m = build_model("gpt_tiny", 50, shape=gpt_shape("gpt_tiny", layers=1, width=16, heads=2,
                                                    seq_len=8))
    x, y = torch.randint(0, 50, (3, 8)), torch.randint(0, 50, (3, 8))
    got = task.forward_loss(m, x, y)
    logits = m(x)
    by_hand = -torch.log_softmax(logits, -1).gather(2, y.unsqueeze(2)).mean()
    assert got.item() == pytest.approx(by_hand.item(), rel=1e-5)
    assert got.requires_grad


def test_evaluation_is_the_held_out_mean_nats_per_token_and_its_exp():
    """Catches a loss averaged per batch instead of per token (the last, smaller batch would
    weigh as much as a full one) and a perplexity that is not exp(loss)."""
    task = build_task(TaskConfig(task="lm"), 40)
    torch.manual_seed(1)
    m = build_model("gpt_tiny", 40, shape=gpt_shape("gpt_tiny", layers=1, width=16, heads=2,
                                                    seq_len=6))
    ds = RandomWindows(7, 6, 40, seed=3)
    loader = DataLoader(Indexed(ds, None), batch_size=4, collate_fn=collate_indexed)
    got = task.evaluate(m, loader, torch.device("cpu"), torch.autocast("cpu", enabled=False))
    xs = torch.stack([ds[i][0] for i in range(7)])
    ys = torch.stack([ds[i][1] for i in range(7)])
    with torch.no_grad():
        logits = m(xs)
    # the data's 40 tokens (the model pads them to 64 rows of -inf logits)
    expected = F.cross_entropy(logits[..., :40].reshape(-1, 40), ys.reshape(-1)).item()
    assert got["loss"] == pytest.approx(expected, rel=1e-5)
    assert got["perplexity"] == pytest.approx(math.exp(expected), rel=1e-5)
    assert got["eval_tokens"] == 42 and got["eval_samples"] == 7
    assert m.training  # put back as it was


class Fixed(torch.nn.Module):
    """Logits that make every next token equally likely over ``vocab``: ln(vocab) nats."""

    def __init__(self, vocab):
        super().__init__()
        self.vocab = vocab

    def forward(self, x):
        return torch.zeros(*x.shape, self.vocab)


def test_evaluation_scores_the_context_free_baseline_on_the_same_held_out_tokens():
    """The baseline's cost is read per held-out target token from the table, its margin over
    the model has a paired interval over the windows. By hand: a uniform model over 4 tokens
    costs ln 4 per token; the table costs 1.0 for token 0 and 2.0 for the others; window 0's
    targets are all 0 (baseline 1.0), window 1's all 1 (2.0), window 2's alternate (1.5)."""
    task = build_task(TaskConfig(task="lm"), 4)
    task.use_baseline([1.0, 2.0, 2.0, 2.0])
    xs = torch.zeros(3, 4, dtype=torch.long)
    ys = torch.tensor([[0, 0, 0, 0], [1, 1, 1, 1], [0, 3, 0, 3]])
    ds = torch.utils.data.TensorDataset(xs, ys)
    loader = DataLoader(Indexed(ds, None), batch_size=2, collate_fn=collate_indexed)
    got = task.evaluate(Fixed(4), loader, torch.device("cpu"),
                        torch.autocast("cpu", enabled=False))
    ln4 = math.log(4)
    assert got["loss"] == pytest.approx(ln4)
    assert got["baseline_loss"] == pytest.approx(1.5)
    assert got["baseline_margin"] == pytest.approx(1.5 - ln4)
    # per-window margins 1 - ln4, 2 - ln4, 1.5 - ln4: mean 1.5 - ln4, sd 0.5, t(2) = 4.303
    h = 4.302653 * 0.5 / math.sqrt(3)
    assert got["baseline_margin_lo"] == pytest.approx(1.5 - ln4 - h, rel=1e-5)
    assert got["baseline_margin_hi"] == pytest.approx(1.5 - ln4 + h, rel=1e-5)
    assert got["baseline_windows"] == 3
    plain = build_task(TaskConfig(task="lm"), 4).evaluate(
        Fixed(4), loader, torch.device("cpu"), torch.autocast("cpu", enabled=False))
    assert "baseline_loss" not in plain  # no table: nothing claimed


@pytest.mark.parametrize("lo, hi, words", [
    (0.05, 0.15, "beats the context-free baseline 3.100 on the same tokens by +0.100 "
                 "[+0.050, +0.150] nats/token over 64 windows"),
    (-0.02, 0.22, "not resolved against the context-free baseline 3.100 on the same tokens: "
                  "+0.100 [-0.020, +0.220] nats/token over 64 windows, the interval includes 0"),
    (None, None, "the context-free baseline 3.100 on the same tokens: inconclusive (64 windows)"),
])
def test_beats_the_baseline_only_with_an_interval_above_zero(lo, hi, words):
    from scaleprobe.features.lmspec import baseline_claim

    assert baseline_claim(3.0, 3.1, lo, hi, 64) == words
    assert baseline_claim(3.2, 3.1, -0.15, -0.05, 64).startswith(
        "worse than the context-free baseline 3.100 on the same tokens: -0.100 [-0.150, -0.050]")


def test_random_tokens_are_made_once_per_rank_on_the_device():
    """tokens-synthetic: one batch per rank, targets the inputs shifted by one, ranks apart."""
    a = DeviceBatches(64, 4, None, None, 100, seed=0, rank=0, device=torch.device("cpu"),
                      seq_len=16)
    b = DeviceBatches(64, 4, None, None, 100, seed=0, rank=1, device=torch.device("cpu"),
                      seq_len=16)
    (x, y, idx, bad), *_ = list(a)
    assert x.shape == y.shape == (4, 16) and x.dtype == torch.int64 and bad == 0
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert int(x.max()) < 100 and len(list(a)) == 16
    assert not torch.equal(a.x, b.x)
    again = next(iter(a))[0]
    assert again.data_ptr() == x.data_ptr()  # the same tensor every step


def test_adamw_is_fused_on_cuda_and_pytorchs_default_elsewhere():
    from scaleprobe.train.parts import _optimizer

    cfg = C.build({"task": "lm", "optimizer": "adamw"})
    params = [torch.nn.Parameter(torch.zeros(3))]
    cpu = _optimizer(cfg, params, 0.1, torch.device("cpu"))
    assert isinstance(cpu, torch.optim.AdamW) and not cpu.defaults["fused"]
    cuda = _optimizer(cfg, params, 0.1, torch.device("cuda"))  # built only: nothing steps
    assert cuda.defaults["fused"] is True and cuda.defaults["lr"] == 0.1


USER_LM = '''
import torch
from torch import nn

class Bigram(nn.Module):
    def __init__(self, vocab_size):
        super().__init__()
        self.table = nn.Embedding(vocab_size, vocab_size)

    def forward(self, idx):
        return self.table(idx)

def bigram(vocab_size, seq_len):
    assert seq_len == 16
    return Bigram(vocab_size)

def flat(vocab_size):
    return nn.Sequential(nn.Embedding(vocab_size, 8), nn.Flatten(), nn.Linear(8 * 16, vocab_size))

def small(vocab_size):
    return nn.Embedding(vocab_size, vocab_size - 1)
'''


def test_a_users_language_model_is_built_with_the_vocabulary_and_sequence_length(tmp_path):
    f = tmp_path / "mine.py"
    f.write_text(USER_LM)
    m = build_model(f"{f}:bigram", 40, None, seq_len=16)
    task = build_task(TaskConfig(task="lm"), 40)
    x = torch.randint(0, 40, (1, 16))
    task.check_model(m, x, "mine.py:bigram")  # [1, 16, 40]: accepted
    with pytest.raises(ConfigError) as e:
        task.check_model(build_model(f"{f}:flat", 40, None, seq_len=16), x, "mine.py:flat")
    assert str(e.value) == ("--model mine.py:flat maps token ids [1, 16] to shape [1, 40] "
                            "(torch.float32); --task lm needs float logits [1, 16, V] with "
                            "V >= the data's vocabulary 40")
    with pytest.raises(ConfigError, match=r"to shape \[1, 16, 39\] .*V >= the data's "
                                          r"vocabulary 40"):
        task.check_model(build_model(f"{f}:small", 40, None, seq_len=16), x, "s")
    with pytest.raises(ConfigError, match=r"failed on token ids of shape \[1, 16\]: IndexError"):
        task.check_model(torch.nn.Embedding(3, 3), x, "tiny")


def test_a_users_language_model_needs_its_sequence_length_and_no_gpt_sizes():
    from scaleprobe.features.lmspec import check_run

    ok = C.build({"task": "lm", "model": "mine.py:bigram", "seq_len": 16})
    assert ok.model.name == "mine.py:bigram"
    with pytest.raises(ConfigError, match="needs --seq-len"):
        check_run(C.build({"task": "lm", "model": "mine.py:bigram"}))
    with pytest.raises(ConfigError, match="--set data.vocab_size=N"):
        check_run(C.build({"task": "lm", "model": "m.py:f", "seq_len": 8,
                           "dataset": "tokens-synthetic"}))
    with pytest.raises(ConfigError, match="size a built-in GPT"):
        check_run(C.build({"task": "lm", "model": "m.py:f", "seq_len": 8, "layers": 2}))
