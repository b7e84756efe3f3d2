"""Tests of ablate.data: tasks, determinism, held-out sets, file formats, configs."""

from __future__ import annotations

import subprocess
import sys
import types
from itertools import islice
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from conftest import builtin_node, builtin_options, builtin_target, compose_cfg

from ablate.components import ComponentError, resolve
from ablate.data import AblateDataModule, check

GLUE_NAMES = {"cola", "sst2", "mrpc", "qqp", "mnli", "qnli", "rte", "wnli", "stsb", "glue"}


def node(cfg: dict) -> dict:
    """A task node named the short way (``{"name": "sort", ...}``) with its built-in ``_target_``."""
    cfg = OmegaConf.to_container(OmegaConf.create(dict(cfg)))
    if "_target_" in cfg:
        return cfg
    option = "glue" if cfg.get("name") in GLUE_NAMES else cfg.get("name")
    if option in builtin_options("task"):
        return {"_target_": builtin_node("task", option)["_target_"], **cfg}
    return {"_target_": f"ablate.data.{option}", **cfg}


def task_problems(cfg: dict) -> list[str]:
    try:
        return check(*resolve("task", node(cfg)))
    except ComponentError as error:
        return [str(error)]


def datamodule(cfg: dict, seed: int = 0) -> AblateDataModule:
    return AblateDataModule(node(cfg), seed=seed)
from ablate.data.formats import CLS, PAD, SEP

ROOT = Path(__file__).resolve().parents[1]
FIX = Path(__file__).resolve().parent / "fixtures"
DIGITS = ["reverse", "sort", "sub", "swap", "copy"]


def dm_for(name, seed=0, **kw):
    cfg = OmegaConf.load(ROOT / "conf" / "task" / f"{ 'glue' if name in ('sst2', 'mnli', 'cola') else name}.yaml")
    cfg.name = name
    for k, v in kw.items():
        cfg[k] = v
    dm = datamodule(cfg, seed=seed)
    dm.setup("fit")
    return dm


def take(dm, n):
    return list(islice(iter(dm.train_dataloader()), n))


def same(a, b):
    return len(a) == len(b) and all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1])
                                    for x, y in zip(a, b))


# ---------------------------------------------------------------------------- digit tasks
EXAMPLES = {
    "reverse": ([3, 1, 4, 1, 5, 9], [9, 5, 1, 4, 1, 3]),
    "sort": ([3, 1, 4, 1, 5, 9], [1, 1, 3, 4, 5, 9]),
    "sub": ([3, 1, 4, 1, 5, 9], [6, 8, 5, 8, 4, 0]),
    "swap": ([3, 1, 4, 1, 5, 9], [1, 5, 9, 3, 1, 4]),
    "copy": ([3, 1, 4, 1, 5, 9], [3, 1, 4, 1, 5, 9]),
}


def reference(name, xs):
    T = len(xs)
    h = T // 2
    return {"reverse": xs[::-1], "sort": sorted(xs), "sub": [9 - x for x in xs],
            "swap": xs[T - h:] + xs[h:T - h] + xs[:h], "copy": list(xs)}[name]


@pytest.mark.parametrize("name", DIGITS)
def test_digit_targets(name):
    cls = builtin_target("task", name)
    x, y = EXAMPLES[name]
    assert cls.target(torch.tensor([x])).tolist() == [y]
    # the generated batches follow the definition, at the train and at an eval length
    dm = dm_for(name, seq_len=8, eval_lengths=[11], batch_size=16)
    assert (dm.vocab_size, dm.n_classes, dm.pad_id, dm.metric) == (10, 10, None, "token_accuracy")
    assert dm.causal is False
    for tokens, targets in take(dm, 2) + [dm.eval_batches(11)[0]]:
        assert tokens.dtype == targets.dtype == torch.long
        assert tokens.shape == targets.shape and tokens.min() >= 0 and tokens.max() <= 9
        for xs, ys in zip(tokens.tolist()[:5], targets.tolist()[:5]):
            assert ys == reference(name, xs)


def test_swap_odd_length_keeps_middle():
    assert builtin_target("task", "swap").target(torch.tensor([[1, 2, 3, 4, 5]])).tolist() == [[4, 5, 3, 1, 2]]


# ---------------------------------------------------------------------------- determinism
@pytest.mark.parametrize("name", ["reverse", "recall", "lm"])
def test_same_seed_same_batches_other_seed_other(name):
    a = take(dm_for(name, seed=1, batch_size=8), 4)
    b = take(dm_for(name, seed=1, batch_size=8), 4)
    c = take(dm_for(name, seed=2, batch_size=8), 4)
    assert same(a, b)
    assert not same(a, c)
    # re-iterating the loader restarts the stream
    dm = dm_for(name, seed=1, batch_size=8)
    take(dm, 3)
    assert same(take(dm, 4), a)


@pytest.mark.slow
def test_restart_determinism_in_new_process():
    code = ("import sys; from itertools import islice; from ablate.data import build_task;"
            "t = build_task({'_target_': 'ablate.data.digits.Sort', 'seq_len': 12, 'batch_size': 4});"
            "print([x.tolist() for x, _ in islice(t.train_batches(7), 3)]);"
            "assert 'pytorch_lightning' not in sys.modules")  # configs check without Lightning
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.strip()
    dm = datamodule({"name": "sort", "seq_len": 12, "batch_size": 4}, seed=7)
    dm.setup()
    assert out == str([x.tolist() for x, _ in take(dm, 3)])


@pytest.mark.parametrize("name", ["copy", "recall", "lm"])
def test_held_out_fixed_and_apart_from_training(name):
    d1, d2 = dm_for(name, seed=0, batch_size=16), dm_for(name, seed=5, batch_size=16)
    v1, v2 = d1.eval_batches(d1.seq_len), d2.eval_batches(d2.seq_len)
    assert same(v1, v2)  # fixed: the same for every run seed and every call
    assert same(v1, d1.task.eval_batches(d1.seq_len))
    train_rows = {tuple(r) for x, _ in take(d1, 20) for r in x.tolist()}
    val_rows = {tuple(r) for x, _ in v1 for r in x.tolist()}
    assert not (train_rows & val_rows)
    assert not same(v1[:1], take(d1, 1))


def test_digit_held_out_size():
    dm = dm_for("reverse", batch_size=64, n_test=150)
    batches = dm.eval_batches(dm.seq_len)
    assert sum(len(x) for x, _ in batches) == 150


# ---------------------------------------------------------------------------- lengths
@pytest.mark.parametrize("name", DIGITS + ["recall", "lm"])
def test_eval_loaders_have_their_lengths(name):
    dm = dm_for(name, seq_len=20, eval_lengths=[24, 40], batch_size=8)
    assert dm.test_lengths == dm.val_lengths == [20, 24, 40] and dm.max_len == 40
    loaders = dm.test_dataloader()
    assert len(loaders) == 3
    for L, loader in zip(dm.test_lengths, loaders):
        for tokens, targets in loader:
            assert tokens.shape[1] == targets.shape[1] == L
    assert all(x.shape[1] == 20 for x, _ in dm.val_dataloader())  # validation: the training length
    tokens, _ = next(iter(dm.train_dataloader()))
    assert tokens.shape == (8, 20)
    assert dm.tokens_per_batch == 160 == dm.count_tokens((tokens, tokens))


def test_file_task_eval_lengths(tmp_path):
    dm = dm_for("classify", path=str(FIX / "classify"), seq_len=8, eval_lengths=[64])
    for L, loader in zip([8, 64], dm.test_dataloader()):
        assert all(x.shape[1] == L for x, _ in loader)
    assert all(x.shape[1] == 8 for x, _ in dm.val_dataloader())
    dm = dm_for("tagging", path=str(FIX / "tagging"), seq_len=4, eval_lengths=[16])
    for L, loader in zip([4, 16], dm.test_dataloader()):
        assert all(x.shape[1] == L for x, _ in loader)
    assert all(x.shape[1] == 4 for x, _ in dm.val_dataloader())


# ---------------------------------------------------------------------------- recall
def test_recall_label_is_value_of_query_key():
    dm = dm_for("recall", seq_len=21, eval_lengths=[41], n_keys=32, n_values=16, batch_size=32)
    nk = 32
    assert dm.vocab_size == dm.n_classes == 48 and dm.causal is True and dm.pad_id is None
    for tokens, targets in take(dm, 2) + dm.eval_batches(41)[:1]:
        T = tokens.shape[1]
        P = (T - 1) // 2
        for xs, ys in zip(tokens.tolist(), targets.tolist()):
            keys, vals = xs[0:2 * P:2], xs[1:2 * P:2]
            assert len(set(keys)) == P and all(k < nk for k in keys)
            assert all(nk <= v < 48 for v in vals)
            pairs = dict(zip(keys, vals))
            labelled = [i for i, y in enumerate(ys) if y != -100]
            assert labelled == list(range(2 * P, T))
            for i in labelled:
                assert ys[i] == pairs[xs[i]]


def test_recall_too_few_keys_is_a_problem():
    probs = task_problems({"name": "recall", "seq_len": 33, "eval_lengths": [65], "n_keys": 20})
    assert any("n_keys" in p for p in probs)


# ---------------------------------------------------------------------------- lm
def test_lm_default_corpus_offline_next_bytes():
    dm = dm_for("lm", seq_len=64, eval_lengths=[128], batch_size=4)
    assert dm.task.path is None and dm.vocab_size == 256 and dm.metric == "next_token_accuracy"
    data = dm.task.train_data
    assert len(data) > 500_000
    assert b"def " in bytes(data[:200_000].tolist())
    tokens, targets = next(iter(dm.train_dataloader()))
    assert torch.equal(tokens[:, 1:], targets[:, :-1])
    held = bytes(dm.task.held_out.tolist())
    for L in (64, 128):
        x, y = dm.eval_batches(L)[0]
        assert torch.equal(x[:, 1:], y[:, :-1])
        assert bytes(x[0].tolist()) + bytes([y[0, -1].item()]) in held


def test_lm_local_file_and_directory(tmp_path):
    text = "".join(f"line {i}: the quick brown fox jumps over the lazy dog\n" for i in range(200))
    f = tmp_path / "a.txt"
    f.write_text(text)
    dm = dm_for("lm", path=str(f), seq_len=32, batch_size=4)
    split = int(round(len(text) * 0.9))
    assert bytes(dm.task.held_out.tolist()) == text.encode()[split:]
    # validation: the end of the training part, a tenth of it here (256 windows would not fit)
    n_val = split // 10
    assert bytes(dm.task.val_data.tolist()) == text.encode()[split - n_val:split]
    x, y = next(iter(dm.train_dataloader()))
    assert bytes(x[0].tolist()) in text.encode()[:split - n_val]
    (tmp_path / "b.txt").write_text("second file\n" * 300)
    # a directory is concatenated once into the token cache (a temporary one here)
    dm = dm_for("lm", path=str(tmp_path), seq_len=32, batch_size=4, cache_dir=str(tmp_path / "cache"))
    assert len(dm.task.train_data) + len(dm.task.val_data) + len(dm.task.held_out) == \
        len(text) + 1 + len("second file\n") * 300
    with pytest.raises(ValueError, match="task.path.*does not exist"):
        dm_for("lm", path=str(tmp_path / "nope.txt"))


# ---------------------------------------------------------------------------- classify
def test_classify_fixture_encoder_layout():
    dm = dm_for("classify", path=str(FIX / "classify"), seq_len=16, batch_size=4)
    assert (dm.vocab_size, dm.pad_id, dm.n_classes, dm.metric) == (259, PAD, 3, "accuracy")
    assert dm.task.labels == ["mid", "neg", "pos"]
    x, y = dm.eval_batches(16)[0]
    assert x.shape == (3, 16) and x.dtype == y.dtype == torch.long
    # dev row 2: "dull\tneg" -> CLS d u l l SEP PAD..., label "neg" = 1 at position 0 only
    assert x[1].tolist() == [CLS, *b"dull", SEP] + [PAD] * 10
    assert y[1, 0].item() == 1 and (y[:, 1:] == -100).all()
    assert y[:, 0].tolist() == [2, 1, 0]
    # truncation keeps CLS ... SEP
    row = x[0].tolist()
    assert row[0] == CLS and row[-1] == SEP and bytes(row[1:-1]) == b"funny and warm"[:14]
    for tokens, targets in take(dm, 3):
        assert tokens.shape == (4, 16) and ((targets != -100).sum(1) == 1).all()
        assert (tokens[:, 0] == CLS).all() and (targets[:, 0] != -100).all()


def test_classify_causal_labels_last_real_token():
    dm = dm_for("classify", path=str(FIX / "classify"), seq_len=16, causal=True)
    x, y = dm.eval_batches(16)[0]
    assert x[1].tolist() == [*b"dull", CLS] + [PAD] * 11
    assert y[1].tolist() == [-100] * 4 + [1] + [-100] * 11
    for xs, ys in zip(x.tolist(), y.tolist()):
        last = max(i for i, t in enumerate(xs) if t != PAD)
        assert [i for i, t in enumerate(ys) if t != -100] == [last] and xs[last] == CLS


def test_classify_missing_or_bad_path():
    with pytest.raises(ValueError, match=r"task\.path is required"):
        datamodule({"name": "classify", "seq_len": 16}, seed=0)
    with pytest.raises(ValueError, match=r"task\.path='/no/such/dir' does not exist"):
        datamodule({"name": "classify", "seq_len": 16, "path": "/no/such/dir"}, seed=0)
    probs = task_problems({"name": "classify", "seq_len": 16, "path": str(FIX / "tagging")})
    assert any("train.tsv" in p for p in probs)


def test_classify_unknown_dev_label(tmp_path):
    (tmp_path / "train.tsv").write_text("sentence\tlabel\na\tx\nb\ty\n")
    (tmp_path / "dev.tsv").write_text("sentence\tlabel\na\tx\nc\tz\n")
    with pytest.raises(ValueError, match=r"dev\.tsv, line 3: label 'z'"):
        dm_for("classify", path=str(tmp_path))


def test_classify_explicit_columns_and_pairs(tmp_path):
    (tmp_path / "train.tsv").write_text("id\tleft\tright\ty\n1\tab\tcd\t1\n2\tef\tgh\t0\n")
    (tmp_path / "dev.tsv").write_text("id\tleft\tright\ty\n3\tab\tcd\t1\n")
    dm = dm_for("classify", path=str(tmp_path), seq_len=10, text_columns=["left", "right"],
                label_column="y")
    x, y = dm.eval_batches(10)[0]
    assert x[0].tolist() == [CLS, *b"ab", SEP, *b"cd", SEP, PAD, PAD, PAD]
    assert y[0, 0].item() == 1


# ---------------------------------------------------------------------------- glue
def test_glue_sst2_local_files():
    dm = dm_for("sst2", path=str(FIX / "glue_sst2"), seq_len=32, eval_lengths=[64], batch_size=4)
    assert dm.name == "sst2" and dm.n_classes == 2 and dm.vocab_size == 259
    assert dm.task.labels == ["0", "1"]
    x, y = dm.eval_batches(64)[0]
    assert y[:, 0].tolist() == [1, 0, 1]
    text = "it 's a charming and often affecting journey . ".encode()
    assert x[0, 1:1 + len(text)].tolist() == list(text) and x[0, 1 + len(text)] == SEP
    tokens, targets = next(iter(dm.train_dataloader()))
    assert tokens.shape == (4, 32) and set(targets[:, 0].tolist()) <= {0, 1}


def test_glue_mnli_dev_matched_and_cola_headerless():
    dm = dm_for("mnli", path=str(FIX / "glue_mnli"), seq_len=48, batch_size=2)
    assert dm.n_classes == 3 and dm.task.labels == ["contradiction", "entailment", "neutral"]
    x, y = dm.eval_batches(48)[0]
    assert y[:, 0].tolist() == [2, 0]
    assert (x == SEP).sum(1).tolist() == [2, 2]  # a sentence pair
    dm = dm_for("cola", path=str(FIX / "glue_cola"), seq_len=64)
    x, y = dm.eval_batches(64)[0]
    assert y[:, 0].tolist() == [1, 0]
    assert bytes(x[1, 1:1 + 9].tolist()) == b"The more "


def test_glue_through_datasets_library(monkeypatch):
    class Split(dict):
        def __len__(self):
            return len(self["label"])

    calls = []

    def load_dataset(path, name):
        calls.append((path, name))
        return {"train": Split(sentence=["good", "bad", "fine"], label=[1, 0, 1]),
                "validation": Split(sentence=["great", "awful"], label=[1, 0])}

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    dm = datamodule({"name": "sst2", "seq_len": 8, "batch_size": 2}, seed=0)
    dm.prepare_data()
    dm.setup()
    assert calls == [("nyu-mll/glue", "sst2")]
    x, y = dm.eval_batches(8)[0]
    assert x[0].tolist() == [CLS, *b"great", SEP, PAD] and y[:, 0].tolist() == [1, 0]


def test_glue_without_datasets_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ValueError, match=r"pip install -e '\.\[glue\]'"):
        datamodule({"name": "rte", "seq_len": 8}, seed=0)


def test_glue_names(tmp_path):
    for n in ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli"]:
        assert not [p for p in task_problems({"name": n, "seq_len": 64}) if "datasets" not in p]
    assert "task.name='glue' is not a GLUE task; valid: cola, sst2" in task_problems({"name": "glue"})[0]


# ---------------------------------------------------------------------------- tagging
def test_tagging_fixture():
    dm = dm_for("tagging", path=str(FIX / "tagging"), seq_len=6, batch_size=2)
    t = dm.task
    assert dm.pad_id == 0 and dm.vocab_size == 2 + len(t.tokens) and dm.metric == "token_accuracy"
    assert t.tags == ["B-MISC", "B-ORG", "B-PER", "I-ORG", "I-PER", "O"] and dm.n_classes == 6
    x, y = dm.eval_batches(6)[0]
    # "German lamb rejects Brussels ." ; Brussels is not in train -> UNK
    ids = t.token_ids
    assert x[0].tolist() == [ids["German"], ids["lamb"], ids["rejects"], 1, ids["."], 0]
    tag = t.tag_ids
    assert y[0].tolist() == [tag["B-MISC"], tag["O"], tag["O"], tag["B-ORG"], tag["O"], -100]
    assert x[1].tolist() == [ids["Peter"], ids["said"], 0, 0, 0, 0]
    assert y[1].tolist() == [tag["B-PER"], tag["O"], -100, -100, -100, -100]
    for tokens, targets in take(dm, 3):
        assert tokens.shape == (2, 6) and ((tokens == 0) == (targets == -100)).all()


def test_tagging_errors(tmp_path):
    (tmp_path / "train.txt").write_text("a b\tX Y\nc d e\tX Y\n")
    (tmp_path / "dev.txt").write_text("a\tX\n")
    with pytest.raises(ValueError, match=r"train\.txt, line 2: 3 input tokens but 2 target"):
        datamodule({"name": "tagging", "seq_len": 8, "path": str(tmp_path)}, seed=0)
    (tmp_path / "train.txt").write_text("a b\tX Y\nno tab here\n")
    with pytest.raises(ValueError, match=r"train\.txt, line 2: no tab"):
        datamodule({"name": "tagging", "seq_len": 8, "path": str(tmp_path)}, seed=0)
    with pytest.raises(ValueError, match=r"task\.path is required for task 'tagging'"):
        datamodule({"name": "tagging", "seq_len": 8}, seed=0)
    with pytest.raises(ValueError, match=r"task\.path='/no/where' does not exist"):
        datamodule({"name": "tagging", "seq_len": 8, "path": "/no/where"}, seed=0)


# ---------------------------------------------------------------------------- configs
def test_every_yaml_loads_and_is_registered():
    files = sorted((ROOT / "conf" / "task").glob("*.yaml"))
    assert {f.stem for f in files} >= set(DIGITS) | {"recall", "lm", "classify", "tagging", "glue"}
    for f in files:
        cfg = compose_cfg([f"task={f.stem}"]).task  # glue_<name>: glue.yaml's keys with its name set
        target = builtin_target("task", f.stem)
        for key in ("seq_len", "eval_lengths", "batch_size", "causal"):
            assert key in cfg, (f, key)
        assert list(cfg.eval_lengths) == []
        probs = task_problems(cfg)
        if target.path_required:
            assert probs and all("task.path is required" in p for p in probs), (f, probs)
        elif f.stem.startswith("glue"):  # downloads through `datasets` (an optional extra) unless task.path is set
            assert all("pip install -e '.[glue]'" in p for p in probs), (f, probs)
        else:
            assert probs == [], (f, probs)
    assert OmegaConf.load(ROOT / "conf/task/recall.yaml").causal is True
    assert OmegaConf.load(ROOT / "conf/task/lm.yaml").causal is True
    assert OmegaConf.load(ROOT / "conf/task/reverse.yaml").causal is False


def test_task_problems():
    assert "cannot be imported" in task_problems({"name": "nope"})[0]
    probs = task_problems({"name": "reverse", "seq_len": 0, "batch_size": -1, "colour": 1})
    assert any("task.seq_len" in p for p in probs)
    assert any("task.batch_size" in p for p in probs)
    assert any("task.colour" in p and "not a setting" in p for p in probs)
    probs = task_problems({"name": "copy", "seq_len": 16, "eval_lengths": [32, 8]})
    assert len(probs) == 1 and "8" in probs[0] and "shorter" in probs[0]
    assert task_problems({"name": "copy", "seq_len": 16, "eval_lengths": [32, 64]}) == []
    assert any("causal" in p for p in task_problems({"name": "lm", "seq_len": 8, "causal": False}))
    with pytest.raises(ValueError, match="cannot be imported"):
        datamodule({"name": "nope"}, seed=0)
    with pytest.raises(ValueError, match="task.seq_len"):
        datamodule({"name": "sort", "seq_len": -3}, seed=0)


# ---------------------------------------------------------------------------- lightning
def test_lightning_fit_and_validate():
    import pytorch_lightning as pl

    class Tiny(pl.LightningModule):
        def __init__(self, vocab, n_out):
            super().__init__()
            self.emb = torch.nn.Embedding(vocab, 16)
            self.out = torch.nn.Linear(16, n_out)
            self.seen = []

        def loss(self, batch):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.out(self.emb(x)).flatten(0, 1),
                                                     y.flatten(), ignore_index=-100)

        def training_step(self, batch, i):
            return self.loss(batch)

        def validation_step(self, batch, i, dataloader_idx=0):
            self.seen.append((dataloader_idx, batch[0].shape[1]))
            return self.loss(batch)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    dm = datamodule({"name": "sub", "seq_len": 8, "eval_lengths": [12], "batch_size": 8,
                           "n_test": 16}, seed=0)
    model = Tiny(dm.vocab_size, dm.n_classes)
    trainer = pl.Trainer(max_steps=6, val_check_interval=3, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
                         num_sanity_val_steps=0)
    trainer.fit(model, datamodule=dm)
    assert trainer.global_step == 6
    assert set(model.seen) == {(0, 8)}  # validation while fitting: one loader, the training length
    model.seen.clear()
    trainer.validate(model, dataloaders=dm.test_dataloader(), verbose=False)
    assert set(model.seen) == {(0, 8), (1, 12)}  # the test split: one loader per length


def test_data_parallel_ranks_get_different_streams():
    dm = dm_for("copy", batch_size=4)
    r0 = list(islice(dm.task.train_batches(3, rank=0), 2))
    r1 = list(islice(dm.task.train_batches(3, rank=1), 2))
    assert same(r0, list(islice(dm.task.train_batches(3), 2))) and not same(r0, r1)


def test_a_held_out_split_is_shared_by_the_ranks_each_row_once():
    """Under DDP each rank evaluates its share of a split: whole batches where there are enough; else
    rows, and a rank left without a row gets one with every label ignored, which counts nowhere."""
    import torch

    from ablate.data.base import IGNORE
    from ablate.data.datamodule import rank_share

    rows = torch.arange(5 * 3).view(5, 3)
    batches = [(rows[:2], rows[:2]), (rows[2:4], rows[2:4]), (rows[4:], rows[4:])]
    assert [len(rank_share(batches, r, 2)) for r in (0, 1)] == [2, 1]  # batches 0, 2 and batch 1
    shares = [rank_share(batches[:1], r, 4) for r in range(4)]  # one batch of 2 rows, 4 ranks
    assert [s[0][0].tolist() for s in shares[:2]] == [[[0, 1, 2]], [[3, 4, 5]]]
    for tokens, targets in (shares[2][0], shares[3][0]):
        assert tokens.shape == (1, 3) and bool((targets == IGNORE).all())
    seen = sorted(row for r in range(3) for t, _ in rank_share(batches, r, 3) for row in t[:, 0].tolist())
    assert seen == [0, 3, 6, 9, 12]  # every row once, across 3 ranks of 3 batches
