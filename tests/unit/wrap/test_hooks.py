"""The hooks `wrap` installs, in this process: steps and phases from a small training loop,
and the narrowing of the global module hooks to the outermost modules once they are known."""

import time

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from scaleprobe.wrap import hooks as H
from scaleprobe.wrap.loaderlog import token_len


@pytest.fixture
def recorder():
    """A Recorder installed for one test, everything it patched put back afterwards (and
    torch.compile's process-wide counters cleared: the FLOP count looks at them)."""
    from torch._dynamo.utils import counters
    from torch.utils.data import dataloader as dl

    counters.clear()

    saved = (dl._BaseDataLoaderIter.__next__, dl._BaseDataLoaderIter._next_index,
             dl.DataLoader.__iter__, torch.Tensor.backward)
    made = []

    def make(warmup):
        rec = H.Recorder(warmup).install()
        made.append(rec)
        return rec

    yield make
    for rec in made:
        for h in rec._handles:
            h.remove()
    (dl._BaseDataLoaderIter.__next__, dl._BaseDataLoaderIter._next_index,
     dl.DataLoader.__iter__, torch.Tensor.backward) = saved
    counters.clear()


class Slow(nn.Module):
    """A module whose forward takes a known time (so forward is seen where it is)."""

    def __init__(self, inner: nn.Module, seconds: float) -> None:
        super().__init__()
        self.inner, self.seconds = inner, seconds

    def forward(self, x):
        time.sleep(self.seconds)
        return self.inner(x)


def _train(steps, model, loss_of, opt=None, batch=8):
    """``steps`` optimizer steps of one loop; returns its optimizer (pass it on to go on)."""
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(steps * batch, 4), torch.randint(0, 3, (steps * batch,)))
    opt = opt or torch.optim.SGD(model.parameters(), lr=0.1)
    for xb, yb in DataLoader(data, batch_size=batch):
        opt.zero_grad()
        loss_of(model(xb), yb).backward()
        opt.step()
    return opt


def test_global_module_hooks_give_way_to_the_outermost_modules_after_the_warmup(recorder):
    """Bugs caught: every submodule call kept on PyTorch's slow path for the whole run (global
    hooks never removed; they cost 33 us a step of a 2.3 ms MLP step, benchmarks/wrap_hooks.py),
    narrowing before the warm-up ends, and the forward phase lost once narrowed (the
    outermost modules not hooked in their place)."""
    rec = recorder(warmup=3)
    inner = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    model = Slow(inner, 0.005)
    loss_fn = nn.CrossEntropyLoss()
    opt = _train(2, model, loss_fn)
    assert len(rec._global) == 2  # 2 steps: still finding the outermost modules
    _train(6, model, loss_fn, opt)
    assert rec._global == [] and set(rec._top) == {id(model), id(loss_fn)}
    assert len(model._forward_pre_hooks) == 1 and len(loss_fn._forward_hooks) == 1
    assert not inner[0]._forward_pre_hooks  # the submodules: no hook, the fast path
    assert len(rec.step_times) == 8
    assert all(f >= 0.005 for f in rec.phases["forward"])  # before and after narrowing
    assert rec.top_params[id(model)] == 4 * 8 + 8 + 8 * 3 + 3


def test_a_new_outermost_module_every_step_keeps_the_global_hooks(recorder):
    """`nn.CrossEntropyLoss()(out, y)` makes a module per step: narrowed hooks would miss
    each new one, so the global hooks stay (bug caught: its forward time moved into
    backward)."""
    rec = recorder(warmup=2)
    model = nn.Linear(4, 3)
    _train(6, model, lambda out, y: nn.CrossEntropyLoss()(out, y))
    assert len(rec._global) == 2
    assert len(rec.step_times) == 6


def _mlp_step_flops(batch: int) -> int:
    """A hand count of one training step of ``Linear(4, 8) -> ReLU -> Linear(8, 3)``: forward
    2 FLOPs per multiply-add; backward the weight gradient of both layers and the input
    gradient of the second (the first layer's input needs none)."""
    macs = 4 * 8 + 8 * 3
    return batch * (2 * macs + 2 * macs + 2 * 8 * 3)


def test_the_last_warmup_step_is_counted_exactly(recorder):
    """Bugs caught: counting two steps (the counter left on past the step, or entered one step
    early: 2x), counting none of the backward (the counter left before ``backward``), or a
    count of the first step (which includes whatever the script did before its loop)."""
    rec = recorder(warmup=3)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    _train(6, model, nn.CrossEntropyLoss(), batch=8)
    assert rec._flop_mode is None
    assert rec.flops == _mlp_step_flops(8) and rec.flops_reason is None
    assert rec.flops_device == "cpu" and rec.flops_amp == "none"


def test_autocast_in_the_step_sets_the_dtype_of_the_peak(recorder):
    """The peak an MFU is held against is the dtype's (bf16 under autocast, not fp32): bug
    caught, a bf16 run held against the fp32 peak."""
    rec = recorder(warmup=2)
    model = nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,)))
    for xb, yb in DataLoader(data, batch_size=8):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(xb).float(), yb)
        loss.backward()
        opt.step()
    assert rec.flops and rec.flops_amp == "bf16"


def test_no_count_with_one_warmup_step(recorder):
    """A "not counted" says why."""
    rec = recorder(warmup=1)
    _train(3, nn.Linear(4, 3), nn.CrossEntropyLoss())
    assert rec.flops is None and "--warmup-steps 2" in rec.flops_reason


def test_a_compiled_model_is_counted_on_fake_tensors_never_under_the_counter(recorder):
    """torch.compile: the counted step never runs under the counter (a frame called under a
    dispatch mode is not compiled: the step would run eagerly); its calls are captured and
    counted after the script on the eager module, with the same figure as an eager count (bug
    caught before: FLOPs and MFU "not counted" for every compiled script)."""
    rec = recorder(warmup=3)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    compiled = torch.compile(model, backend="eager")
    _train(6, compiled, nn.CrossEntropyLoss(), batch=8)
    assert rec._flop_mode is None and rec.flops is None
    rec.count_captured()
    assert rec.flops == _mlp_step_flops(8) and rec.flops_reason is None
    assert rec.flops_device == "cpu" and "fake tensors" in rec.flops_method


class Net(nn.Module):
    """A model of its own (a code object no other test compiles)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 8), nn.Linear(8, 3)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def test_a_compiled_model_is_never_recompiled_or_broken_by_the_hooks(recorder):
    """The cause of a compiled GPT script at 0.52x under wrap: the global module hooks were
    traced into the compiled frame (dynamo guarded on them and on the recorder's depth), and
    giving them up after the warm-up failed that guard, so the forward recompiled inside the
    timed window; each hook was also compiled as a frame of its own. Now: one frame compiled
    in the first step, no recompile, no graph break, the global hooks kept, the forward still
    timed around the compiled call."""
    from torch._dynamo.utils import counters

    from scaleprobe.measure.compiled import CompileWatch

    torch._dynamo.reset()
    watch = CompileWatch().install()
    rec = recorder(warmup=2)
    rec.watch = watch
    compiled = torch.compile(Net(), backend="eager")
    _train(8, compiled, nn.CrossEntropyLoss())
    watch.remove()
    assert [(e.kind, e.compile_id) for e in watch.events] == [("dynamo", "0/0")]
    assert not counters["graph_break"]
    assert len(rec._global) == 2 and len(rec.step_times) == 8
    assert all(f > 0 for f in rec.phases["forward"])


def test_a_script_that_ends_inside_the_counted_step_counts_nothing(recorder):
    """The counter is left when the script ends (no dispatch mode outlives it) and a partial
    step is not reported as a step's FLOPs."""
    rec = recorder(warmup=3)
    model = nn.Linear(4, 3)
    _train(2, model, nn.CrossEntropyLoss())
    assert rec._flop_mode is not None  # entered after step 2 of 3
    model(torch.randn(8, 4)).sum().backward()  # part of a step, then the script ends
    rec.flops_end(complete=False)
    assert rec._flop_mode is None and rec.flops is None
    assert "ended inside the counted step" in rec.flops_reason
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    assert _get_current_dispatch_mode() is None


def test_the_steps_that_took_an_epochs_first_batch_are_recorded(recorder):
    """A script's own epochs of 3 batches, with a validation pass in the middle of each: after
    one warm-up step the timed steps 2, 5, 8 took a training epoch's first batch (bug caught:
    the validation loader's first batches counted, at 1, 4, 7, 10, or the warm-up shifting
    the positions)."""
    from scaleprobe.wrap import boot

    rec = recorder(1)
    model = nn.Linear(8, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train = DataLoader(TensorDataset(torch.randn(24, 8), torch.randint(0, 3, (24,))),
                       batch_size=8)
    val = DataLoader(TensorDataset(torch.randn(8, 8), torch.randint(0, 3, (8,))), batch_size=4)
    for _ in range(4):
        for i, (xb, yb) in enumerate(train):
            opt.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
            if i == 0:  # its batches fall in the epoch's second step
                with torch.no_grad():
                    for vb, _ in val:
                        model(vb)
    assert len(rec.step_times) == 12
    raw = boot.rank_record(rec, 0, 1, {})
    assert raw.epoch_start_steps == [2, 5, 8]


def test_a_validation_pass_before_an_epoch_is_not_the_training_loaders_wait(recorder):
    """Train an epoch, then validate on a slow loader: the validation's 80 ms fall in the
    step that takes the next epoch's first batch, so its data phase is long, but the training
    loader's own wait for that batch is not (bug caught: the step's data phase taken as the
    epoch-start wait, and "input-bound at epoch starts" for a script whose training loader
    never waited)."""
    from torch.utils.data import Dataset

    from scaleprobe.wrap import boot

    class SlowVal(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            time.sleep(0.02)
            return torch.randn(8), 0

    rec = recorder(1)
    model = nn.Linear(8, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train = DataLoader(TensorDataset(torch.randn(24, 8), torch.randint(0, 3, (24,))),
                       batch_size=8)
    val = DataLoader(SlowVal(), batch_size=4)
    for _ in range(3):
        for xb, yb in train:
            opt.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
        with torch.no_grad():
            for vb, _ in val:
                model(vb)
    raw = boot.rank_record(rec, 0, 1, {})
    assert raw.epoch_start_steps == [2, 5]
    data = raw.phase_times_s["data"]
    assert all(data[i] > 0.06 for i in (2, 5)), data  # the validation pass is in the step
    assert all(w < 0.02 for w in raw.epoch_start_wait_s), raw.epoch_start_wait_s


def _compiled_opt_step_run(model):
    """Train 4 steps with a compiled optimizer step; dynamo's graph breaks and compiles."""
    from torch._dynamo.utils import counters

    from scaleprobe.measure.compiled import CompileWatch

    torch._dynamo.reset()
    counters.clear()
    watch = CompileWatch().install()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = torch.compile(opt.step, backend="eager")
    for _ in range(4):
        opt.zero_grad()
        model(torch.randn(8, 4)).sum().backward()
        step()
    watch.remove()
    return dict(counters["graph_break"]), [e.compile_id for e in watch.events]


def test_a_compiled_optimizer_step_compiles_as_it_does_bare(recorder):
    """The global optimizer step hooks are traced into a compiled ``opt.step``: they must leave
    nothing there (bug caught: their clock read broke the graph inside a loop, and dynamo ran
    the whole step eagerly). The step is then not seen, and the record says why."""
    bare = _compiled_opt_step_run(nn.Linear(4, 3))
    rec = recorder(warmup=1)
    hooked = _compiled_opt_step_run(nn.Linear(4, 3))
    assert hooked == bare
    assert rec.opt_compiled and rec.step_times == []


def test_token_id_batches_give_tokens_per_sample_and_nothing_else_does():
    ids = torch.randint(0, 50, (4, 16))
    assert token_len((ids, ids)) == 16  # (inputs, targets) of an LM script
    assert token_len({"input_ids": ids}) == 16
    assert token_len((torch.randn(4, 3, 8, 8), torch.randint(0, 3, (4,)))) is None  # images
    assert token_len((torch.randn(4, 16), ids)) is None  # float features first
    assert token_len((torch.randint(0, 3, (4,)),)) is None  # labels: one dimension
    assert token_len(torch.zeros(4, 16, dtype=torch.bool)) is None
    assert token_len([]) is None


def test_a_loop_over_token_batches_records_its_tokens_per_sample(recorder):
    """An LM-shaped loop under the hooks: T read from the first batch taken."""
    rec = recorder(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(50, 8), nn.Linear(8, 50))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randint(0, 50, (24, 12)), torch.randint(0, 50, (24, 12)))
    for xb, yb in DataLoader(data, batch_size=8):
        opt.zero_grad()
        nn.functional.cross_entropy(model(xb).reshape(-1, 50), yb.reshape(-1)).backward()
        opt.step()
    assert rec.tokens_per_sample == 12


def test_a_scripts_timed_steps_count_the_page_faults_they_take(recorder):
    """The window's page faults are the process's from the last warm-up step's end to the
    last step's end: a step that touches 4 MiB of fresh pages (an mmap of its own, given back
    at its end) takes about 1,024 each; the warm-up steps' are left out."""
    import mmap

    from scaleprobe.wrap import boot

    rec = recorder(2)
    model = nn.Linear(4, 3)

    def loss_touching_fresh_pages(out, y):
        if len(rec.step_times) >= 2:  # the timed steps only
            with mmap.mmap(-1, 4 << 20) as fresh:
                for at in range(0, len(fresh), 4096):
                    fresh[at] = 1
        return nn.functional.cross_entropy(out, y)

    _train(6, model, loss_touching_fresh_pages)
    raw = boot.rank_record(rec, 0, 1, {})
    assert raw.steps_timed == 4
    assert 4 * 1000 <= raw.page_faults <= 4 * 1300, raw.page_faults
