"""Property tests of the attention patterns (``attention=softmax|local|linear``, ablate.model.patterns)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from conftest import builtin_options, compose_cfg, records, run_cli
from test_model import GROUPS, VOCAB, build

from ablate.catalog import options
from ablate.config import config_problems
from ablate.model.patterns import Linear, Local, Softmax, linear_quadratic

PATTERNS = builtin_options("attention")


pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_three_patterns_are_built_in_and_listed():
    assert PATTERNS == ["linear", "local", "softmax"]
    assert {o.name for o in options("attention")} == set(PATTERNS)


# ------------------------------------------------------ every pattern with every sharing variant

COMBOS = [(p, a) for p in PATTERNS for a in GROUPS["qkv_sharing"]]


@pytest.mark.parametrize("causal", [True, False], ids=["decoder", "encoder"])
@pytest.mark.parametrize("pattern,sharing", COMBOS, ids=[f"{p}-{a}" for p, a in COMBOS])
def test_every_pattern_combines_with_every_sharing(pattern, sharing, causal):
    model = build(causal=causal, attention=pattern, qkv_sharing=sharing, dropout=0.1).train()
    assert all(b.attn.pattern is model.blocks[0].attn.pattern for b in model.blocks)  # one per model
    out = model(torch.randint(0, VOCAB, (2, 19)))
    assert out.shape == (2, 19, 7)
    out.square().mean().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("pos", ["rope", "learned", "none"])
def test_every_pattern_is_causal(pattern, pos):
    model = build(attention=pattern, pos_enc=pos, max_len=20)
    tokens = torch.randint(0, VOCAB, (2, 20))
    changed = tokens.clone()
    changed[:, 12:] = (changed[:, 12:] + 1) % VOCAB
    with torch.no_grad():
        torch.testing.assert_close(model(tokens)[:, :12], model(changed)[:, :12])


def test_softmax_pattern_is_the_plain_sdpa_path():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 4, 9, 8).unbind(0)
    for causal in (True, False):
        torch.testing.assert_close(Softmax(32, 4, causal)(q, k, v, None, causal),
                                   F.scaled_dot_product_attention(q, k, v, is_causal=causal), rtol=0, atol=0)


# ------------------------------------------------------------------------------ local attention

def keys_seen(pattern: Local, T: int, causal: bool) -> list[list[int]]:
    """The keys each query attends to, read off the attention weights of ``pattern``'s forward: with
    equal scores (q = k = 0) and one-hot values, output row i is uniform over the keys query i sees."""
    q = torch.zeros(1, 1, T, 4)
    v = torch.eye(T)[None, None]
    y = pattern(q, q, v, None, causal)[0, 0]
    return [torch.nonzero(row > 0).flatten().tolist() for row in y]


def window_keys(i: int, T: int, window: int, causal: bool) -> list[int]:
    """The documented definition: ``window`` positions besides the query's own, all before it in a
    decoder, window/2 on each side in an encoder, cut at the ends of the sequence."""
    before, after = (window, 0) if causal else (window // 2, window // 2)
    return list(range(max(0, i - before), min(T - 1, i + after) + 1))


WINDOWS = [(True, w) for w in (1, 2, 3, 4, 7, 8, 11, 12, 30)] + [(False, w) for w in (2, 4, 6, 8, 20, 22, 30)]


@pytest.mark.parametrize("causal,window", WINDOWS, ids=[f"{'decoder' if c else 'encoder'}-w{w}" for c, w in WINDOWS])
def test_local_window_is_the_number_of_other_positions_each_query_sees(causal, window):
    T = 12
    seen = keys_seen(Local(8, 1, causal, window=window), T, causal)
    assert seen == [window_keys(i, T, window, causal) for i in range(T)]
    reach = window if causal else window // 2
    counts = [min(i, reach) + 1 + (0 if causal else min(T - 1 - i, reach)) for i in range(T)]
    assert [len(keys) for keys in seen] == counts  # fewer at the ends of the sequence
    for i in range(T):
        if i - reach >= 0 and (causal or i + reach <= T - 1):  # the whole window inside: w + 1 keys
            assert len(seen[i]) == window + 1
    if reach >= T - 1:  # a window covering the input: every allowed key
        assert seen == [list(range(i + 1 if causal else T)) for i in range(T)]


def test_local_window_holds_as_many_keys_in_a_decoder_as_in_an_encoder():
    T, window = 20, 8
    decoder = keys_seen(Local(8, 1, True, window=window), T, True)
    encoder = keys_seen(Local(8, 1, False, window=window), T, False)
    assert len(decoder[T - 1]) == len(encoder[T // 2]) == window + 1


@pytest.mark.parametrize("window", [1, 3, 15])
def test_local_refuses_an_odd_window_in_an_encoder(window):
    from test_model import make_cfg

    def attention_problems(causal):
        cfg = {**make_cfg(causal=causal, attention={"name": "local", "window": window}),
               "task": {"_target_": "x", "seq_len": 8}}
        return [p for p in config_problems(cfg) if p.startswith("attention")]

    problems = attention_problems(False)
    assert len(problems) == 1 and f"attention.window={window} cannot be split evenly" in problems[0], problems
    assert problems[0].endswith(f"e.g. {window - 1} or {window + 1}" if window > 1 else "e.g. 2")
    assert not attention_problems(True)  # a decoder's window is all on one side
    with pytest.raises(ValueError, match="cannot be split evenly"):
        Local(8, 2, False, window=window)


@pytest.mark.parametrize("pos", ["rope", "alibi", "t5_bias", "learned", "deberta"])
@pytest.mark.parametrize("causal", [True, False], ids=["decoder", "encoder"])
def test_local_ignores_tokens_beyond_the_window(pos, causal):
    w, T, i = 4, 16, 8
    reach = w if causal else w // 2  # how far the window extends on each side it has
    model = build(causal=causal, n_layers=1, pos_enc=pos, attention={"name": "local", "window": w})
    torch.manual_seed(2)
    tokens = torch.randint(0, VOCAB, (2, T))
    for j in [0, i - reach - 1] + ([] if causal else [i + reach + 1, T - 1]):  # outside the window
        changed = tokens.clone()
        changed[:, j] = (changed[:, j] + 1) % VOCAB
        with torch.no_grad():
            torch.testing.assert_close(model(tokens)[:, i], model(changed)[:, i])
    for j in [i - reach] + ([] if causal else [i + reach]):  # the window's farthest keys: they matter
        near = tokens.clone()
        near[:, j] = (near[:, j] + 1) % VOCAB
        with torch.no_grad():
            assert not torch.allclose(model(tokens)[:, i], model(near)[:, i])


@pytest.mark.parametrize("pos", ["rope", "alibi", "kerple", "deberta"])
@pytest.mark.parametrize("causal", [True, False], ids=["decoder", "encoder"])
def test_local_with_a_window_covering_the_input_is_softmax(pos, causal):
    T = 10
    tokens = torch.randint(1, VOCAB, (2, T))
    tokens[1, 7:] = 0  # right padding (the encoder masks it)
    kw = dict(causal=causal, pos_enc=pos, pad_id=0)
    window = T - 1 if causal else 2 * (T - 1)  # the first query sees the last key in an encoder
    with torch.no_grad():
        full = build(**kw)(tokens)
        local = build(attention={"name": "local", "window": window}, **kw)(tokens)
    torch.testing.assert_close(local, full)


@pytest.mark.parametrize("pos", ["rope", "alibi"])
def test_local_keeps_padding_masked(pos):
    model = build(causal=False, pad_id=0, attention={"name": "local", "window": 2}, pos_enc=pos)
    tokens = torch.randint(1, VOCAB, (1, 6))
    padded = torch.cat([tokens, torch.zeros(1, 3, dtype=torch.long)], 1)
    with torch.no_grad():
        short, long = model(tokens), model(padded)
    torch.testing.assert_close(long[:, :6], short)
    assert torch.isfinite(long).all()  # pad queries whose window holds only pads: no NaN


def test_local_band_is_the_window():
    band = Local(8, 2, True, window=2).band(5, torch.device("cpu"), True)
    assert band.int().tolist() == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0],
                                   [0, 1, 1, 1, 0], [0, 0, 1, 1, 1]]
    band = Local(8, 2, False, window=2).band(4, torch.device("cpu"), False)
    assert band.int().tolist() == [[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]]


# ----------------------------------------------------------------------------- linear attention

@pytest.mark.parametrize("T,chunk", [(1, 4), (7, 4), (8, 4), (13, 16), (33, 5)])
def test_linear_causal_prefix_sums_equal_the_quadratic_form(T, chunk):
    torch.manual_seed(T)
    q, k, v = torch.randn(3, 2, 3, T, 8, dtype=torch.float64).unbind(0)
    pattern = Linear(24, 3, True, chunk=chunk)
    expected = linear_quadratic(pattern.phi(q), pattern.phi(k), v, causal=True)
    torch.testing.assert_close(pattern(q, k, v, None, True), expected)


def test_linear_encoder_form_equals_the_quadratic_form():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 3, 11, 8, dtype=torch.float64).unbind(0)
    pattern = Linear(24, 3, False)
    expected = linear_quadratic(pattern.phi(q), pattern.phi(k), v, causal=False)
    torch.testing.assert_close(pattern(q, k, v, None, False), expected)


def test_linear_encoder_reads_a_boolean_mask_as_key_padding():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 3, 9, 8, dtype=torch.float64).unbind(0)
    pattern = Linear(24, 3, False)
    keep = torch.ones(2, 9, dtype=torch.bool)
    keep[1, 6:] = False
    mask = (keep[:, None, None, :] & torch.ones(9, 9, dtype=torch.bool))  # (B, 1, T, T), as attention_mask
    got = pattern(q, k, v, mask, False)
    expected = linear_quadratic(pattern.phi(q[1:]), pattern.phi(k[1:, :, :6]), v[1:, :, :6], causal=False)
    torch.testing.assert_close(got[1:], expected)


def test_linear_checkpointing_changes_no_gradient(monkeypatch):
    tokens = torch.randint(0, VOCAB, (2, 12))

    def grads():
        model = build(attention="linear").train()
        model(tokens).square().mean().backward()
        return [p.grad for p in model.parameters()]

    checkpointed = grads()
    monkeypatch.setattr(Linear, "forward", lambda self, q, k, v, m, c, d=0.0: self.mix(q, k, v, m, c))
    for a, b in zip(checkpointed, grads()):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("pos", ["alibi", "t5_bias", "kerple", "deberta"])
def test_linear_refuses_additive_biases_naming_both(pos):
    from test_model import make_cfg

    cfg = {**make_cfg(attention="linear", pos_enc=pos), "task": {"_target_": "x", "seq_len": 8}}
    problems = [p for p in config_problems(cfg) if p.startswith("attention")]
    assert any(f"attention=linear cannot be combined with pos_enc={pos}" in p for p in problems), problems


def test_linear_accepts_positions_it_can_express():
    from test_model import make_cfg

    for pos in ("none", "sinusoidal", "learned", "rope", "xpos"):
        cfg = {**make_cfg(attention="linear", pos_enc=pos), "task": {"_target_": "x", "seq_len": 8}}
        assert not [p for p in config_problems(cfg) if p.startswith("attention")], pos


# --------------------------------------------------------------------- end to end, one line each

@pytest.mark.slow
def test_new_options_train_under_debug_in_one_command(tmp_path: Path, tiny: list[str]) -> None:
    sweep = tmp_path / "sweep"
    out = run_cli(["-m", "attention=local,linear", "model.share_layers=all", "pos_enc=rope", *tiny[:-3],
                   "model.n_layers=2", "task.batch_size=8", "measure.warmup_steps=2", "logger=none",
                   f"hydra.sweep.dir={sweep}"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    recs = records(sweep)
    assert len(recs) == 2 and {r["status"] for r in recs} == {"ok"}
    assert {r["choices"]["attention"] for r in recs} == {"local", "linear"}  # the group choice is recorded
    listed = run_cli(["--list"], tmp_path)
    assert listed.returncode == 0 and "attention:" in listed.stdout
    for name in PATTERNS:
        assert f"  {name} " in listed.stdout


@pytest.mark.slow
def test_deberta_trains_under_debug_in_one_command(tmp_path: Path, tiny: list[str]) -> None:
    out = run_cli([*tiny, "pos_enc=deberta", "logger=none", "hydra.run.dir=run"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    (record,) = records(tmp_path / "run")
    assert record["status"] == "ok"


@pytest.mark.slow  # trains two runs in process (seconds)
def test_linear_attention_takes_less_memory_than_softmax_at_256_tokens(tmp_path: Path) -> None:
    """The attention experiment's table at T=256 (its model, two steps: the memory column is the
    deterministic accounting of a training step, whatever the number of steps). The two jobs of
    ``ablate -m experiment=attention attention=softmax,linear task.seq_len=256 ...`` run in process
    through the same ``run_job`` and the same table as the CLI's."""
    from ablate.job import Job
    from ablate.report import build_table, csv_columns, csv_rows
    from ablate.run import run_job

    fixed = ["experiment=attention", "task.seq_len=256", "seed=0", "trainer.max_steps=2",
             "measure.warmup_steps=1", "logger=none", "task.n_val=16", "task.n_test=16"]  # fewer held-out windows
    found = []
    for pattern in ("softmax", "linear"):
        overrides = [f"attention={pattern}", *fixed]
        job = Job(tmp_path / pattern, overrides, {"attention": pattern}, str(tmp_path), None)
        record = run_job(compose_cfg(overrides), job)
        assert record.status == "ok", record.error
        record.path = tmp_path / pattern / "result.json"
        found.append(record)
    table = build_table(found)
    names = csv_columns(table)
    rows = {r[names.index("overrides")]: r for r in csv_rows(table)}
    softmax, linear = (float(rows[f"attention={p}"][names.index("memory_mib")]) for p in ("softmax", "linear"))
    assert linear < softmax
