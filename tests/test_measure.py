"""Tests of ablate.measure and ablate.memory: the step-time summary, SpeedMeter inside a real Lightning fit, and
the CPU memory accounting (exact bytes on a hand-checkable model, determinism, scaling).

No test asserts anything about how long something took: the machine is shared and noisy.
"""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from ablate.meters import SpeedMeter
from ablate.measure import summarize_times
from ablate.memory import measure_training_memory

pytestmark = [  # Lightning's hints about num_workers etc., and its use of a deprecated torch pytree API
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore:.*isinstance\\(treespec, LeafSpec\\)"),
]

FLOAT = 4  # bytes per float32


# --------------------------------------------------------------------------------------------
# summarize_times
# --------------------------------------------------------------------------------------------


def test_summarize_times_is_the_median_of_per_step_throughput():
    s = summarize_times([1.0, 2.0, 4.0], tokens_per_step=8)
    assert s == {"tokens_per_s": 4.0, "step_time_s": {"min": 1.0, "median": 2.0, "max": 4.0}, "timed_steps": 3}
    # Per-step token counts: throughputs 10/1, 10/2, 4/4 -> median 5.
    assert summarize_times([1.0, 2.0, 4.0], [10, 10, 4])["tokens_per_s"] == 5.0
    with pytest.raises(ValueError):
        summarize_times([], 8)
    with pytest.raises(ValueError):
        summarize_times([1.0, 2.0], [8])


# --------------------------------------------------------------------------------------------
# SpeedMeter in a real Trainer
# --------------------------------------------------------------------------------------------

BATCH, SEQ, VOCAB = 4, 6, 10
TOKENS_PER_STEP = BATCH * SEQ


class TinyLM(pl.LightningModule):
    def __init__(self, events: list[str] | None = None):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 8)
        self.out = nn.Linear(8, VOCAB)
        self.events = events

    def training_step(self, batch, batch_idx):
        if self.events is not None:
            self.events.append("training_step")
        tokens, targets = batch
        loss = F.cross_entropy(self.out(self.emb(tokens)).flatten(0, 1), targets.flatten())
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


def _loader() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, VOCAB, (64, SEQ), generator=g)
    return DataLoader(TensorDataset(tokens, tokens.flip(1)), batch_size=BATCH)


def _fit(module: pl.LightningModule, max_steps: int, callbacks: list[pl.Callback]) -> pl.Trainer:
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=max_steps, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=callbacks)
    trainer.fit(module, train_dataloaders=_loader())
    return trainer


def test_speed_meter_in_a_tiny_fit():
    max_steps, warmup = 8, 3
    meter = SpeedMeter(warmup_steps=warmup)
    _fit(TinyLM(), max_steps, [meter])
    assert len(meter.step_times) == max_steps and meter.step_tokens == [TOKENS_PER_STEP] * max_steps
    s = meter.summary()
    assert s["timed_steps"] == max_steps - warmup
    assert s["tokens_per_s"] > 0
    t = s["step_time_s"]
    assert 0 < t["min"] <= t["median"] <= t["max"]


def test_speed_meter_short_run_times_what_there_is():
    # 3 steps, warm-up 10: the first min(10, 3 - 1) = 2 steps are skipped, the last one is timed.
    meter = SpeedMeter(warmup_steps=10)
    _fit(TinyLM(), 3, [meter])
    assert meter.summary()["timed_steps"] == 1
    with pytest.raises(RuntimeError):
        SpeedMeter(warmup_steps=1).summary()  # no step ran


class _Recorder(pl.Callback):
    def __init__(self, name: str, events: list[str]):
        self.name, self.events = name, events

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.events.append(f"{self.name}.start")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.events.append(f"{self.name}.end")


def test_speed_meter_interval_holds_only_the_step():
    """With a fake clock that records when it is read: other callbacks' batch hooks (before
    and after the meter in the user's list) run outside the timed interval, the training step
    inside; each step lasts exactly one tick, so tokens/s equals tokens per step."""
    events: list[str] = []
    ticks = iter(range(10**6))

    def clock() -> float:
        events.append("clock")
        return float(next(ticks))

    meter = SpeedMeter(warmup_steps=0, clock=clock)
    trainer = _fit(TinyLM(events), 2, [_Recorder("a", events), meter, _Recorder("b", events)])
    assert trainer.callbacks[0] is meter  # first to see on_train_batch_end
    one_step = ["a.start", "b.start", "clock", "training_step", "clock", "a.end", "b.end"]
    assert events == one_step * 2
    summary = meter.summary()
    assert 0 <= summary.pop("cpu_share")  # the process's CPU seconds over the (fake) clock's: nothing to compare
    assert summary == {"tokens_per_s": float(TOKENS_PER_STEP),
                       "step_time_s": {"min": 1.0, "median": 1.0, "max": 1.0}, "timed_steps": 2}


def test_speed_meter_says_how_much_of_its_cores_a_cpu_run_had(one_thread):
    """A real CPU fit on one thread: its timed steps' CPU time is at most their wall time (a busy
    machine lowers it, which is what it is for: the load test in tests/test_speed_under_load.py)."""
    meter = SpeedMeter(warmup_steps=2)
    _fit(TinyLM(), 12, [meter])
    assert 0 < meter.summary()["cpu_share"] <= 1.2, meter.summary()


# --------------------------------------------------------------------------------------------
# measure_training_memory
# --------------------------------------------------------------------------------------------


def _adamw(params):
    return torch.optim.AdamW(params, lr=1e-3)


def _linear_batch():
    g = torch.Generator().manual_seed(0)
    return torch.randn(8, 64, generator=g), torch.randn(8, 32, generator=g)


@pytest.mark.parametrize("loss_name, loss_storage_bytes", [
    # (y_hat - y).pow(2).sum() returns a fresh 0-dim tensor: a 4-byte storage.
    ("explicit", FLOAT),
    # F.mse_loss(reduction="sum") on CPU computes the 8x32 element-wise losses into a buffer and
    # reduces them into that same buffer: the 0-dim loss keeps the whole 8*32*4-byte storage.
    ("mse_loss", 8 * 32 * FLOAT),
])
def test_linear_adamw_exact_bytes(loss_name, loss_storage_bytes):
    model = nn.Linear(64, 32, bias=True)
    x, y = _linear_batch()
    if loss_name == "explicit":
        def loss_fn(m, b):
            return (m(b[0]) - b[1]).pow(2).sum()
    else:
        def loss_fn(m, b):
            return F.mse_loss(m(b[0]), b[1], reduction="sum")

    mem = measure_training_memory(model, _adamw, (x, y), loss_fn)

    weight, bias = 64 * 32 * FLOAT, 32 * FLOAT  # 8192 + 128
    params = weight + bias  # 8320
    assert mem["parameters"] == params
    assert mem["gradients"] == params  # one .grad per parameter, same shape and dtype
    # AdamW state per parameter: exp_avg and exp_avg_sq (each the parameter's size) and `step`,
    # which on CPU (capturable=False, fused=False) is torch.tensor(0.0): a 0-dim float32 of 4 bytes.
    assert mem["optimizer"] == 2 * params + 2 * FLOAT  # 16648
    # Where the peak is: backward never holds more than output-sized temporaries (8x32 floats)
    # next to the fresh gradients, but the optimizer step, for the weight, computes
    #   denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
    # with the sqrt result (8192 bytes) and the quotient (8192 bytes) alive together, while
    # parameters, gradients and the whole optimizer state are alive. The graph (and the 8x32
    # forward output) is gone by then; what else is alive is the batch and the loss:
    activations = (
        8 * 64 * FLOAT  # x, the input batch (2048)
        + 8 * 32 * FLOAT  # y, the targets (1024)
        + loss_storage_bytes  # the loss tensor, held until the optimizer step is over
        + 2 * weight  # sqrt and quotient temporaries (16384)
    )
    assert mem["activations"] == activations
    assert mem["peak"] == params + params + (2 * params + 2 * FLOAT) + activations
    assert mem["peak"] == sum(mem[k] for k in ("parameters", "gradients", "optimizer", "activations"))
    assert all(type(v) is int for v in mem.values())


class TinyTransformer(nn.Module):
    def __init__(self, d: int = 32, vocab: int = 12):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.layer = nn.TransformerEncoderLayer(d, nhead=4, dim_feedforward=64, dropout=0.1, batch_first=True)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        return self.head(self.layer(self.emb(tokens)))


def _lm_loss(model, batch):
    tokens, targets = batch
    return F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())


def _token_batch(batch_size: int, seq_len: int, vocab: int = 12):
    g = torch.Generator().manual_seed(batch_size * 1000 + seq_len)
    tokens = torch.randint(0, vocab, (batch_size, seq_len), generator=g)
    return tokens, tokens.flip(1)


def test_repeated_calls_identical_and_caller_untouched():
    torch.manual_seed(123)
    model = TinyTransformer().eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    batch = _token_batch(4, 10)

    first = measure_training_memory(model, _adamw, batch, _lm_loss)
    second = measure_training_memory(model, _adamw, batch, _lm_loss)
    third = measure_training_memory(model, _adamw, batch, _lm_loss, steps=2)
    assert first == second == third
    assert first["activations"] > 0 and first["optimizer"] > 0

    assert torch.equal(torch.get_rng_state(), rng)
    after = model.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert all(p.grad is None for p in model.parameters())
    assert not model.training  # the copy was put in training mode, not the caller's model


def test_garbage_from_before_does_not_change_the_figure():
    """Cyclic garbage holding tensors, left by the caller (no collection first): the same figure."""
    torch.manual_seed(0)
    model, batch = TinyTransformer(), _token_batch(4, 10)
    clean = measure_training_memory(model, _adamw, batch, _lm_loss)
    for _ in range(50):
        cycle = {"tensor": torch.randn(64, 64)}
        cycle["self"] = cycle
    del cycle
    assert measure_training_memory(model, _adamw, batch, _lm_loss) == clean


def test_activations_grow_with_batch_and_length_parameters_do_not():
    model = TinyTransformer()
    small = measure_training_memory(model, _adamw, _token_batch(2, 8), _lm_loss)
    bigger_batch = measure_training_memory(model, _adamw, _token_batch(8, 8), _lm_loss)
    longer = measure_training_memory(model, _adamw, _token_batch(2, 32), _lm_loss)

    n_params = sum(p.numel() for p in model.parameters())
    for mem in (small, bigger_batch, longer):
        assert mem["parameters"] == n_params * FLOAT
        # Adam state is alive at every peak (the second step's forward/backward outweighs the
        # first's); gradients may not all exist yet when the peak falls inside backward, as it
        # does once activations dominate (the small batch peaks in the optimizer step instead).
        assert mem["optimizer"] == 2 * n_params * FLOAT + FLOAT * len(list(model.parameters()))
        assert 0 < mem["gradients"] <= n_params * FLOAT
    assert small["activations"] < bigger_batch["activations"]
    assert small["activations"] < longer["activations"]
    assert small["peak"] < bigger_batch["peak"] and small["peak"] < longer["peak"]


def test_failing_loss_leaves_state_restored():
    import gc

    model = TinyTransformer()
    rng = torch.get_rng_state()

    def broken_loss(m, b):
        m(b[0])  # uses the RNG (dropout) before failing
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        measure_training_memory(model, _adamw, _token_batch(2, 8), broken_loss)
    assert gc.isenabled()
    assert torch.equal(torch.get_rng_state(), rng)



# --------------------------------------------------------------------------------------------
# peak FLOP/s and MFU
# --------------------------------------------------------------------------------------------

#: every device name the table must know, exactly as torch.cuda.get_device_name() reports it, with
#: its dense (no sparsity) 16-bit tensor-core peak and its fp32 peak (None: not in the table)
KNOWN_PEAKS = {
    "NVIDIA H100 80GB HBM3": (989.5e12, 67e12),   # H100 SXM
    "NVIDIA H100 PCIe": (756.5e12, 51e12),
    "NVIDIA H100 NVL": (835.5e12, None),
    "NVIDIA H200": (989.5e12, 67e12),             # H200 SXM
    "NVIDIA H200 NVL": (835.5e12, None),
    "NVIDIA B200": (2.25e15, 75e12),
    "NVIDIA A100-SXM4-40GB": (312e12, 19.5e12),
    "NVIDIA A100-SXM4-80GB": (312e12, 19.5e12),
    "NVIDIA A100-PCIE-40GB": (312e12, 19.5e12),
    "NVIDIA A100 80GB PCIe": (312e12, 19.5e12),
    "NVIDIA L4": (121e12, 30.3e12),
    "NVIDIA L40": (181.05e12, 90.5e12),
    "NVIDIA L40S": (362.05e12, 91.6e12),
    "NVIDIA A10": (125e12, 31.2e12),
    "AMD Instinct MI300X": (1307.4e12, 163.4e12),
}


@pytest.mark.parametrize("name", sorted(KNOWN_PEAKS))
def test_every_listed_device_maps_to_its_own_figures(name: str) -> None:
    from ablate.measure import PEAK_FLOPS, peak_flops

    sixteen, fp32 = KNOWN_PEAKS[name]
    assert name in PEAK_FLOPS
    assert peak_flops(name, "bf16-mixed") == pytest.approx(sixteen)
    assert peak_flops(name, "16-mixed") == pytest.approx(sixteen)
    assert peak_flops(name, "bf16-true") == pytest.approx(sixteen)
    if fp32 is None:
        assert peak_flops(name, "32-true") is None  # no verified figure: no MFU rather than a guess
    else:
        assert peak_flops(name, "32-true") == pytest.approx(fp32)


def test_the_table_holds_only_the_checked_names() -> None:
    from ablate.measure import PEAK_FLOPS

    assert set(PEAK_FLOPS) == set(KNOWN_PEAKS)


@pytest.mark.parametrize("name, not_this", [
    ("NVIDIA H100 PCIe", "NVIDIA H100 80GB HBM3"),   # PCIe is not the SXM part
    ("NVIDIA H100 NVL", "NVIDIA H100 80GB HBM3"),
    ("NVIDIA H200 NVL", "NVIDIA H200"),
    ("NVIDIA L40", "NVIDIA L4"),                     # "L4" is a prefix of "L40"
    ("NVIDIA L40S", "NVIDIA L40"),
])
def test_similar_names_are_different_devices(name: str, not_this: str) -> None:
    from ablate.measure import peak_flops

    assert peak_flops(name, "bf16-mixed") != peak_flops(not_this, "bf16-mixed")


@pytest.mark.parametrize("name", [
    "NVIDIA A10G",            # AWS's A10 variant: no vendor datasheet figure, and not the A10's
    "NVIDIA H100",            # a further H100 SKU's name: which peak is unknown
    "NVIDIA H800",
    "NVIDIA GH200 480GB",
    "NVIDIA GeForce RTX 4090",
    "Tesla V100-SXM2-16GB",
    "NVIDIA A100",
    "Some Future GPU",
    "",
])
def test_an_unlisted_name_gives_no_peak(name: str) -> None:
    from ablate.measure import peak_flops

    assert peak_flops(name, "bf16-mixed") is None  # unknown: no MFU rather than a wrong one
    assert peak_flops(name, "32-true") is None


def test_match_is_exact_but_for_surrounding_space_and_case() -> None:
    from ablate.measure import peak_flops

    assert peak_flops("  NVIDIA H100 PCIe\n", "bf16-mixed") == pytest.approx(756.5e12)
    assert peak_flops("nvidia h100 pcie", "bf16-mixed") == pytest.approx(756.5e12)
    assert peak_flops("NVIDIA H100 PCIe (MIG 1g.10gb)", "bf16-mixed") is None
    assert peak_flops("NVIDIA  H100 PCIe", "bf16-mixed") is None


def test_precision_without_a_peak_gives_none() -> None:
    from ablate.measure import peak_flops

    assert peak_flops("NVIDIA H100 80GB HBM3", "64-true") is None
    assert peak_flops("NVIDIA H100 80GB HBM3", "transformer-engine") is None


def test_override_wins() -> None:
    from ablate.measure import peak_flops

    assert peak_flops("Some Future GPU", "bf16-mixed", override=2e15) == 2e15
    assert peak_flops("NVIDIA H100 80GB HBM3", "bf16-mixed", override=1e15) == 1e15  # over the table
    assert peak_flops("NVIDIA H100 80GB HBM3", "64-true", override=1e15) == 1e15


def test_utilisation_of_a_known_device() -> None:
    from ablate.measure import utilisation

    fields = utilisation("NVIDIA A100-SXM4-80GB", "bf16-mixed", tokens_per_s=1e5, flops_per_token=1.56e9)
    assert fields == {"device": "NVIDIA A100-SXM4-80GB", "peak_flops": 312e12,
                      "mfu": pytest.approx(0.5), "utilisation": "mfu"}


def test_utilisation_of_an_unknown_device_is_none_with_one_note() -> None:
    from ablate.measure import utilisation

    with pytest.warns(UserWarning) as caught:
        fields = utilisation("Some Future GPU", "bf16-mixed", tokens_per_s=1e5, flops_per_token=1e9)
    assert fields["mfu"] is None and fields["peak_flops"] is None
    assert "utilisation" not in fields
    note = fields["mfu_note"]
    assert "\n" not in note and "'Some Future GPU'" in note and "measure.peak_flops=<FLOP/s>" in note
    assert [str(w.message) for w in caught] == [note]  # the same one line, once


def test_utilisation_with_an_override_on_an_unknown_device() -> None:
    from ablate.measure import utilisation

    fields = utilisation("Some Future GPU", "bf16-mixed", 1e5, 1e9, override=1e15)
    assert fields["mfu"] == pytest.approx(0.1) and fields["peak_flops"] == 1e15
    assert "mfu_note" not in fields


def test_utilisation_with_recomputation_is_hfu() -> None:
    from ablate.measure import utilisation

    fields = utilisation("NVIDIA H100 80GB HBM3", "bf16-mixed", 1e5, 1e9, recomputes=True)
    assert fields["utilisation"] == "hfu"
    assert fields["mfu"] == pytest.approx(1e14 / 989.5e12)
    assert "HFU" in fields["mfu_note"] and "\n" not in fields["mfu_note"]


def test_only_linear_attention_makes_the_utilisation_hfu() -> None:
    """What train.py asks (``recomputed_flops(model, T, B) > 0``) is true for attention=linear
    (it checkpoints its pattern: the FLOPs count holds a second forward of it), not for softmax."""
    from test_model import VOCAB, make_cfg

    from ablate.model import build_model
    from ablate.model.flops import recomputed_flops

    for attention, recomputes in (("linear", True), ("softmax", False), ("local", False)):
        model = build_model(make_cfg(d_model=16, n_heads=2, n_layers=1, attention=attention), VOCAB, 7, 20)
        assert (recomputed_flops(model, 20, 2) > 0) is recomputes, attention
