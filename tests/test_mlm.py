"""Masked-LM pretraining (``task=mlm``; BERT, Devlin et al. 2019, §3.1): the masking rule and its
statistics, fixed held-out masks, seeded training masks, the vocabulary with its special tokens,
the codec downstream tasks encode with, the refusals, and one tiny real run. ``task=lm`` (clm) is
checked to be unchanged: its vocabulary, batches and parameter count."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import CONF, IN_PROCESS, compose_cfg
from omegaconf import OmegaConf

from ablate.compose import tiny_overrides
from ablate.config import config_problems
from ablate.data.base import IGNORE, check, train_generator
from ablate.data.masking import bert_mask
from ablate.data.text import LanguageModel
from ablate.data.vocab import TextCodec

MASK = 259  # bytes: ids 0-255, then PAD 256, CLS 257, SEP 258, MASK 259


def mlm(**settings) -> LanguageModel:
    return LanguageModel(**{"seq_len": 32, "batch_size": 8, "causal": False, "objective": "mlm", **settings})


def cat(batches) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.cat([x for x, _ in batches]), torch.cat([y for _, y in batches])


# ---------------------------------------------------------------------------- the rule
def test_bert_masking_selects_15_percent_and_splits_them_80_10_10() -> None:
    g = torch.Generator().manual_seed(1234)
    tokens = torch.randint(0, 256, (2000, 100), generator=g)
    inputs, targets = bert_mask(tokens, torch.Generator().manual_seed(0), 0.15, MASK, 256)
    selected = targets != IGNORE
    assert selected.sum(dim=1).eq(15).all()  # round(0.15 * 100) positions in every window
    n = int(selected.sum())  # 30,000: a binomial share's standard deviation is below 0.0024
    masked = (inputs == MASK) & selected
    kept = (inputs == tokens) & selected
    replaced = selected & ~masked & ~kept
    assert abs(int(masked.sum()) / n - 0.8) < 0.012
    assert abs(int(kept.sum()) / n - (0.1 + 0.1 / 256)) < 0.008  # a random token may be the token itself
    assert abs(int(replaced.sum()) / n - (0.1 - 0.1 / 256)) < 0.008
    assert int(inputs[replaced].max()) < 256  # random replacements: the tokenizer's ids, never a special


def test_targets_are_the_originals_at_selected_positions_and_ignore_elsewhere() -> None:
    tokens = torch.randint(0, 256, (64, 40), generator=torch.Generator().manual_seed(7))
    inputs, targets = bert_mask(tokens, torch.Generator().manual_seed(3), 0.15, MASK, 256)
    selected = targets != IGNORE
    assert torch.equal(targets[selected], tokens[selected])
    assert torch.equal(inputs[~selected], tokens[~selected])  # unselected positions untouched
    assert int(inputs[inputs != tokens].ne(MASK).sum()) <= int(selected.sum())
    assert selected.sum(dim=1).eq(round(40 * 0.15)).all()
    _, few = bert_mask(tokens[:, :3], torch.Generator().manual_seed(3), 0.15, MASK, 256)
    assert (few != IGNORE).sum(dim=1).eq(1).all()  # at least one scored position per window


# ---------------------------------------------------------------------------- the task's masks
def test_held_out_masks_are_fixed_and_independent_of_seed_and_batch_size() -> None:
    task = mlm()
    first = {split: cat(task.eval_batches(32, split)) for split in ("validation", "test")}
    next(task.train_batches(seed=5))  # training draws nothing the held-out masks depend on
    for split, (x, y) in first.items():
        again = cat(task.eval_batches(32, split))
        other = cat(mlm(batch_size=5).eval_batches(32, split))
        assert torch.equal(x, again[0]) and torch.equal(y, again[1])
        assert torch.equal(x, other[0]) and torch.equal(y, other[1])
    assert not torch.equal(first["validation"][1], first["test"][1][: len(first["validation"][1])])


def test_the_inputs_are_the_window_itself_not_shifted() -> None:
    x_mlm, y_mlm = cat(mlm().eval_batches(32, "test"))
    x_clm, _ = cat(LanguageModel(seq_len=32, batch_size=8).eval_batches(32, "test"))
    assert torch.equal(torch.where(y_mlm != IGNORE, y_mlm, x_mlm), x_clm)


def test_training_masks_repeat_for_a_seed_and_differ_between_seeds() -> None:
    def first(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        stream = mlm().train_batches(seed)
        return cat([next(stream) for _ in range(3)])

    a, b, c = first(0), first(0), first(1)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[1] != IGNORE, c[1] != IGNORE)
    assert int(a[0].max()) <= MASK and (a[0] == MASK).any()


# ---------------------------------------------------------------------------- clm unchanged
def test_clm_is_unchanged_vocabulary_and_shifted_windows() -> None:
    task = LanguageModel(seq_len=16, batch_size=4)
    assert (task.vocab_size, task.n_classes, task.pad_id, task.metric) == (256, 256, None, "next_token_accuracy")
    assert not task.special_tokens and task.objective == "clm"
    task.setup()
    stream, g = task.train_batches(seed=3), train_generator("lm", 3)
    data = task.train_data.numpy()
    for _ in range(3):
        starts = torch.randint(0, len(data) - 16, (4,), generator=g).numpy()
        w = torch.from_numpy(data[starts[:, None] + np.arange(17)].astype(np.int64))
        x, y = next(stream)
        assert torch.equal(x, w[:, :-1]) and torch.equal(y, w[:, 1:])
    x, y = cat(task.eval_batches(16, "test"))
    held = task.held_out.numpy().astype(np.int64)
    assert torch.equal(x[0], torch.from_numpy(held[:16])) and torch.equal(y[0], torch.from_numpy(held[1:17]))
    with_specials = LanguageModel(seq_len=16, batch_size=4, special_tokens=True)
    assert (with_specials.vocab_size, with_specials.metric) == (260, "next_token_accuracy")
    assert torch.equal(next(with_specials.train_batches(3))[0], next(task.train_batches(3))[0])


def test_specials_add_four_rows_to_the_embedding_and_head_only() -> None:
    from ablate.model import build_model

    cfg = OmegaConf.to_container(compose_cfg(tiny_overrides()), resolve=True)
    d = cfg["model"]["d_model"]
    plain = build_model(cfg, 256, 256, 64).num_params()
    assert build_model(cfg, 260, 260, 64).num_params() - plain == 4 * 2 * d  # no head bias by default
    assert (LanguageModel().vocab_size, mlm().vocab_size, mlm().n_classes, mlm().pad_id) == (256, 260, 260, None)


# ---------------------------------------------------------------------------- vocabulary and codec
def test_bytes_mlm_has_260_ids_and_the_bytes_codec() -> None:
    task = mlm()
    assert (task.vocab_size, task.mask_id, task.metric) == (260, MASK, "masked_token_accuracy")
    assert task.codec() == TextCodec.of("bytes", True) and task.codec().mask_id == task.mask_id
    assert LanguageModel().codec() == TextCodec.of("bytes", False)
    x, y = cat(task.eval_batches(32, "test"))
    assert task.target_bytes(task.eval_batches(32, "test")) == int((y != IGNORE).sum())  # a byte per target


def _corpus(tmp_path: Path) -> Path:
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "lambda", "sigma", "omega"]
    rng = np.random.default_rng(0)
    lines = [" ".join(words[i] for i in rng.integers(0, len(words), 8)) + f" {n}." for n in range(800)]
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_bpe_and_tokenizer_json_codecs_round_trip(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    settings = dict(path=str(corpus), tokenizer="bpe", vocab_size=300, cache_dir=str(tmp_path / "cache"), seq_len=16)
    task = mlm(**settings)
    assert (task.vocab_size, task.mask_id) == (304, 303)
    codec = task.codec()
    assert Path(codec.tokenizer) == Path(task.tokens.path).parent / "tokenizer.json"
    assert Path(task.tokens.path).parent.name.startswith("bpe300-")  # the BPE trained is the clm one's
    assert (codec.base_vocab, codec.vocab_size, codec.mask_id) == (300, 304, task.mask_id)
    text = corpus.read_text()[:500]
    ids = codec.encode(text)
    assert max(ids) < 300 and codec._tokenizer.decode(ids) == text
    assert ids[:50] == task.train_data[:50].tolist()  # the codec encodes as the token file was encoded
    x, y = next(task.train_batches(0))
    assert int(x.max()) <= task.mask_id and int(x[x != task.mask_id].max()) < 300
    batches = task.eval_batches(16, "test")
    targets = torch.cat([yy[yy != IGNORE] for _, yy in batches]).tolist()
    assert task.target_bytes(batches) == sum(len(codec._tokenizer.decode([t]).encode()) for t in targets)

    own = mlm(path=str(corpus), tokenizer=codec.tokenizer, cache_dir=str(tmp_path / "cache"), seq_len=16)
    assert own.codec().tokenizer == codec.tokenizer and own.codec().encode(text) == ids
    assert LanguageModel(**{**settings, "seq_len": 16}).codec().specials is False


def test_a_pre_tokenized_bin_takes_specials_after_its_vocabulary_but_has_no_codec(tmp_path: Path) -> None:
    path = tmp_path / "ids.bin"
    np.random.default_rng(0).integers(0, 1000, 20_000).astype(np.uint16).tofile(path)
    task = mlm(path=str(path), vocab_size=1000, seq_len=16)
    assert (task.vocab_size, task.mask_id) == (1004, 1003)
    x, _ = next(task.train_batches(0))
    assert int(x[x != task.mask_id].max()) < 1000
    with pytest.raises(ValueError, match="pre-tokenized.*no tokenizer"):
        task.codec()


# ---------------------------------------------------------------------------- refusals
def test_bad_settings_are_refused_in_one_line() -> None:
    def problems(**settings) -> list[str]:
        return check(LanguageModel, {"seq_len": 16, **settings})

    assert problems(objective="mlm", causal=False) == [] and problems() == []
    assert problems(objective="bert", causal=False) == [
        "task.objective='bert' is not a training objective; valid: clm, mlm"]
    (line,) = problems(objective="mlm", causal=True)
    assert "task=mlm" in line and "task.causal=false" in line
    (line,) = problems(causal=False)
    assert "lm needs task.causal=true" in line and "task=mlm" in line
    for rate in (0, 1, 1.5, -0.1):
        assert problems(objective="mlm", causal=False, mask_rate=rate) == [
            f"task.mask_rate must be a number in (0, 1), got {rate!r}"]
    with pytest.raises(ValueError, match="objective"):
        LanguageModel(objective="bert")


def test_task_mlm_composes_to_an_encoder_and_lm_with_mlm_is_refused() -> None:
    cfg = compose_cfg(["task=mlm"])
    assert cfg.model.causal is False and cfg.task.objective == "mlm" and config_problems(cfg) == []
    (line,) = config_problems(compose_cfg(["task=lm", "task.objective=mlm"]))
    assert "use task=mlm or task.causal=false" in line


def test_mlm_yaml_is_lm_yaml_but_its_name_objective_and_encoder() -> None:
    lm, mlm_node = (OmegaConf.to_container(OmegaConf.load(CONF / "task" / f"{n}.yaml")) for n in ("lm", "mlm"))
    changed = {k for k in lm.keys() | mlm_node.keys() if lm.get(k) != mlm_node.get(k)}
    assert changed == {"name", "objective", "causal"}
    assert (mlm_node["objective"], mlm_node["causal"], lm["objective"]) == ("mlm", False, "clm")


# ---------------------------------------------------------------------------- a real run
def test_a_tiny_mlm_run_learns_and_records_masked_token_accuracy(tmp_path: Path, one_thread) -> None:
    from ablate.job import Job
    from ablate.run import run_job

    overrides = tiny_overrides(*IN_PROCESS, "task=mlm", "task.batch_size=16", "task.seq_len=32", "task.n_test=256",
                               "trainer.max_steps=150", "optim.lr=1e-2", "eval.every=30")
    record = run_job(compose_cfg(overrides), Job(tmp_path / "job", overrides, {}, str(tmp_path), 0))
    assert record.status == "ok"
    m = record.metrics
    assert m.metric == "masked_token_accuracy"
    assert m.eval["32"].count == 256 * round(32 * 0.15)  # n_test windows, 5 masked positions each
    # at step 0 the loss is about ln 260 = 5.56 nats; the byte unigram of the targets is ~3.1
    assert m.loss < math.log(260) - 1.5 and m.history[-1].loss < m.history[0].loss - 1
    assert m.accuracy > 0.2 and m.bits_per_byte == pytest.approx(m.loss / math.log(2))
