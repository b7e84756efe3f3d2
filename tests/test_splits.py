"""The three data splits of every task: train, validation, test.

* test is the held-out split that existed before validation did: its batches are pinned by
  checksums taken before validation was added (so published numbers stay comparable);
* validation is disjoint from test and, for tasks over files, from the training data;
* every held-out split is the same for every run seed and every model variant, and the training
  stream depends on the seed and the task only (paired comparisons);
* a task whose ``eval_batches`` takes no ``split`` is stopped by the config check.
"""

from __future__ import annotations

import hashlib
import re
import sys
from itertools import islice
from pathlib import Path

import pytest
from conftest import compose_cfg
import torch
from omegaconf import OmegaConf

from ablate.config import ConfigError, validate
from ablate.data import AblateDataModule, SyntheticTask, Task, build_task, check
from ablate.data.base import Batch, validation_generator

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "ablate" / "conf"
FIX = REPO / "tests" / "fixtures"
sys.path.insert(0, str(REPO / "examples" / "my_lab"))
DIGITS = ["reverse", "sort", "sub", "swap", "copy"]


def lm_text() -> str:
    return "".join(f"{i} squared is {i * i}; the quick brown fox jumps over the lazy dog\n" for i in range(300))


def node(option: str, **settings) -> dict:
    return {**OmegaConf.to_container(OmegaConf.load(CONF / "task" / f"{option}.yaml")), **settings}


def cases(tmp: Path) -> dict[str, dict]:
    """Task nodes whose test batches are pinned below: every built-in task (GLUE from the local
    fixtures), the example's own task, default and small settings."""
    corpus = tmp / "corpus.txt"
    corpus.write_text(lm_text())
    c = {}
    for d in DIGITS:
        c[d] = node(d)
        c[d + "-small"] = node(d, seq_len=7, eval_lengths=[12], batch_size=16, n_test=40)
    c["recall"] = node("recall")
    c["recall-small"] = node("recall", seq_len=21, eval_lengths=[33], n_keys=32, batch_size=16, n_test=40)
    c["lm"] = node("lm", path=str(corpus), seq_len=16, eval_lengths=[48], batch_size=8, n_test=20)
    c["classify"] = node("classify", path=str(FIX / "classify"), seq_len=16, eval_lengths=[40], batch_size=2)
    c["classify-causal"] = node("classify", path=str(FIX / "classify"), seq_len=16, causal=True)
    c["tagging"] = node("tagging", path=str(FIX / "tagging"), seq_len=4, eval_lengths=[16], batch_size=1)
    for g in ("sst2", "mnli", "cola"):
        c[g] = node("glue", name=g, path=str(FIX / f"glue_{g}"), seq_len=24, eval_lengths=[64], batch_size=2)
    c["count"] = {"_target_": "my_lab.tasks.RunningCount", "seq_len": 8, "eval_lengths": [20], "n_test": 100}
    return c


#: sha256 (first 16 hex digits) of the held-out batches at each length, computed with the code as
#: it was before the validation split existed (one held-out split, ``eval_batches(length)``)
BEFORE_VALIDATION = {
    "reverse": {16: "46e8a8fa42c0bd48"},
    "reverse-small": {7: "7605822f944f3c5a", 12: "1c50af44470defd0"},
    "sort": {16: "22d9488adccfb735"},
    "sort-small": {7: "4ffcbcef1a71ca96", 12: "3faf11489f9ab26c"},
    "sub": {16: "dc8a13c752919815"},
    "sub-small": {7: "4f2902f90b634540", 12: "b67fa76c34916a6d"},
    "swap": {16: "38862c7687bf6681"},
    "swap-small": {7: "9ab6b74bd6ed16bd", 12: "7996d9a8b246802d"},
    "copy": {16: "2e99804d94ea0536"},
    "copy-small": {7: "5a6d6312faa8a159", 12: "497119cfed6e05f9"},
    "recall": {32: "61fdb11e489687bc"},
    "recall-small": {21: "b48983031585b785", 33: "bdb9f883ec384b30"},
    "lm": {16: "c7931fb5aff79fff", 48: "2af35128cb780731"},
    "classify": {16: "c39e7592c802faf1", 40: "74b009a033c8ddd4"},
    "classify-causal": {16: "31560b27c20e8d65"},
    "tagging": {4: "8d79b497cb255e38", 16: "806e54c44a1b85ff"},
    "sst2": {24: "53d4ba75d3afd641", 64: "5cf8aefd0efc3e40"},
    "mnli": {24: "5f5a1c1508074979", 64: "78d6748315ec6908"},
    "cola": {24: "c8f952116c65e5fa", 64: "3a7dc0e8262411bc"},
    "count": {8: "bdd03e1c7516f6a6", 20: "6a83a7644f3757fd"},
}


def checksum(batches: list[Batch]) -> str:
    h = hashlib.sha256()
    for x, y in batches:
        for t in (x, y):
            h.update(str(tuple(t.shape)).encode())
            h.update(t.to(torch.int64).numpy().tobytes())
    return h.hexdigest()[:16]


def same(a: list[Batch], b: list[Batch]) -> bool:
    return len(a) == len(b) and all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(a, b))


def rows(batches) -> list[tuple]:
    """Each example of ``batches`` as a hashable (tokens, targets) pair."""
    return [(tuple(x), tuple(y)) for xb, yb in batches for x, y in zip(xb.tolist(), yb.tolist())]


def datamodule(task: dict, seed: int = 0) -> AblateDataModule:
    dm = AblateDataModule(task, seed=seed)
    dm.setup("fit")
    return dm


# ---------------------------------------------------------------------------- test = the old held-out set
def test_test_split_is_the_held_out_set_of_before(tmp_path: Path) -> None:
    got = {}
    for name, task_node in cases(tmp_path).items():
        dm = datamodule(task_node)
        got[name] = {L: checksum(dm.eval_batches(L, "test")) for L in dm.test_lengths}
        assert got[name] == {L: checksum(dm.task.eval_batches(L)) for L in dm.test_lengths}  # the default split
        loaders = dm.test_dataloader()
        assert [checksum(list(loader)) for loader in loaders] == list(got[name].values())
    assert got == BEFORE_VALIDATION


# ---------------------------------------------------------------------------- validation
@pytest.mark.parametrize("name,n_val,sizes", [("reverse", None, [64] * 4),  # digits: the default 256
                                              ("recall", 50, [16, 16, 16, 2]), ("count", 50, [16, 16, 16, 2])])
def test_generated_validation_is_its_own_fixed_stream(name: str, n_val: int | None, sizes: list[int],
                                                      tmp_path: Path) -> None:
    task_node = {**cases(tmp_path)[name], **({"n_val": n_val, "batch_size": 16} if n_val else {})}
    dm, other_seed = datamodule(task_node, seed=0), datamodule(task_node, seed=9)
    val, test = dm.eval_batches(dm.seq_len, "validation"), dm.eval_batches(dm.seq_len, "test")
    assert [len(x) for x, _ in val] == sizes
    assert same(val, other_seed.eval_batches(dm.seq_len, "validation"))  # fixed for every run seed
    assert same(val, dm.task.eval_batches(dm.seq_len, split="validation"))  # and every call
    assert not set(rows(val)) & set(rows(test))
    train = rows(islice(dm.task.train_batches(0), 20))
    assert not set(rows(val)) & set(train)
    # validation at a longer length is drawn too (its own stream per length)
    assert dm.task.eval_batches(2 * dm.seq_len, "validation")[0][0].shape == (sizes[0], 2 * dm.seq_len)
    assert list(dm.val_dataloader())[0][0].shape == (sizes[0], dm.seq_len)


@pytest.mark.parametrize("name", ["classify", "classify-causal", "tagging", "sst2", "mnli", "cola"])
def test_file_validation_is_carved_from_training_rows(name: str, tmp_path: Path) -> None:
    task_node = cases(tmp_path)[name]
    dm = datamodule(task_node, seed=0)
    t = dm.task
    split_rows = t._rows if name == "tagging" else t._split_rows
    # by line of the training file: validation and train partition it
    lines = lambda split: [r[-1] for r in split_rows[split]]  # noqa: E731
    n_file = len(lines("train")) + len(lines("validation"))
    assert sorted(lines("train") + lines("validation")) == sorted(set(lines("train")) | set(lines("validation")))
    assert len(lines("validation")) == max(1, n_file // 10) == 1  # the fixtures are tiny: at least one row
    # as encoded examples: the training stream never shows a validation row, and shows all others
    val = rows(dm.eval_batches(dm.seq_len, "validation"))
    train_seen = set(rows(islice(t.train_batches(0), 40)))
    assert len(val) == 1 and set(val).isdisjoint(train_seen)
    assert len(train_seen) == n_file - 1
    assert set(val).isdisjoint(rows(dm.eval_batches(dm.seq_len, "test")))
    # the same rows for every run seed
    assert same(dm.eval_batches(dm.seq_len, "validation"),
                datamodule(task_node, seed=3).eval_batches(dm.seq_len, "validation"))


def test_file_validation_size_and_too_small_files(tmp_path: Path) -> None:
    lines = "".join(f"example number {i}\t{'ab'[i % 2]}\n" for i in range(3000))
    (tmp_path / "train.tsv").write_text("sentence\tlabel\n" + lines)
    (tmp_path / "dev.tsv").write_text("sentence\tlabel\nsomething\ta\n")
    dm = datamodule(node("classify", path=str(tmp_path), seq_len=8, batch_size=100))
    assert sum(len(x) for x, _ in dm.eval_batches(8, "validation")) == 256  # the default n_val
    dm = datamodule(node("classify", path=str(tmp_path), seq_len=8, batch_size=100, n_val=1000))
    assert sum(len(x) for x, _ in dm.eval_batches(8, "validation")) == 300  # at most a tenth
    (tmp_path / "train.tsv").write_text("sentence\tlabel\nonly one\ta\n")
    with pytest.raises(ValueError, match=r"train\.tsv: 1 example; at least 2"):
        datamodule(node("classify", path=str(tmp_path), seq_len=8))


def test_lm_validation_sits_between_training_and_test(tmp_path: Path) -> None:
    # every line names itself, so a window's complete lines tell where it was read
    text = "".join(f"<{i:05d}>\n" for i in range(20000))
    corpus = tmp_path / "ids.txt"
    corpus.write_text(text)
    dm = datamodule(node("lm", path=str(corpus), seq_len=32, batch_size=64, n_val=40, n_test=50))
    t = dm.task
    assert torch.equal(torch.cat([t.train_data, t.val_data, t.held_out]),
                       torch.frombuffer(bytearray(text.encode()), dtype=torch.uint8))
    assert len(t.val_data) == 40 * 32 + 1

    def ids(batches) -> set[int]:
        out = set()
        for x, y in batches:
            for row_x, row_y in zip(x.tolist(), y.tolist()):
                out |= {int(m) for m in re.findall(r"<(\d{5})>", bytes(row_x + row_y[-1:]).decode())}
        return out

    val = dm.eval_batches(32, "validation")
    assert sum(len(x) for x, _ in val) == 40
    val_ids, test_ids = ids(val), ids(dm.eval_batches(32, "test"))
    train_ids = ids(islice(t.train_batches(0), 200))
    assert val_ids and test_ids and len(train_ids) > 5000
    assert max(train_ids) < min(val_ids) and max(val_ids) < min(test_ids)
    # a corpus too short to hold a validation window besides a training window is an error
    (tmp_path / "short.txt").write_text("x" * 120)
    with pytest.raises(ValueError, match=r"training part has 60 bytes, fewer than .* = 67"):
        datamodule(node("lm", path=str(tmp_path / "short.txt"), seq_len=32, val_fraction=0.5))


# ---------------------------------------------------------------------------- the datamodule's loaders
def test_loaders_and_unknown_split(tmp_path: Path) -> None:
    dm = datamodule(node("recall", seq_len=8, eval_lengths=[12, 20], batch_size=32, n_test=40, n_val=24))
    val = dm.val_dataloader()
    assert not isinstance(val, list)  # one loader
    assert [x.shape for x, _ in val] == [(24, 8)]
    tests = dm.test_dataloader()
    assert dm.test_lengths == [8, 12, 20] and len(tests) == 3
    assert [[tuple(x.shape) for x, _ in loader] for loader in tests] == [[(32, L), (8, L)] for L in (8, 12, 20)]
    with pytest.raises(ValueError, match="split must be one of 'validation', 'test'"):
        dm.eval_batches(8, "dev")
    with pytest.raises(ValueError, match="split must be one of"):
        dm.task.eval_batches(8, "train")


def test_n_val_is_a_positive_integer() -> None:
    for bad in (0, -3, 2.5, "many", True):
        probs = check(*_resolved(node("recall", n_val=bad)))
        assert any("task.n_val" in p for p in probs), (bad, probs)
    assert check(*_resolved(node("recall", n_val=7))) == []
    for option in ("lm", "classify", "tagging", "glue", "recall"):
        assert OmegaConf.load(CONF / "task" / f"{option}.yaml").n_val == 256


def _resolved(task_node: dict):
    from ablate.components import resolve

    return resolve("task", task_node)


# ---------------------------------------------------------------------------- pairing

def first_batches(cfg) -> tuple[list[Batch], list[Batch], list[list[Batch]]]:
    dm = datamodule(OmegaConf.to_container(cfg.task, resolve=True), seed=cfg.seed)
    return (list(islice(iter(dm.train_dataloader()), 3)), list(dm.val_dataloader()),
            [list(loader) for loader in dm.test_dataloader()])


@pytest.mark.parametrize("task", [["task=reverse", "task.eval_lengths=[24]"],
                                  ["task=lm", "task.path=CORPUS", "task.n_test=20"],
                                  ["task=classify", f"task.path={FIX / 'classify'}", "task.batch_size=2"]])
def test_seed_pairs_variants_on_the_same_data(task: list[str], tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(lm_text())
    task = [o.replace("CORPUS", str(corpus)) for o in task]
    a_cfg = compose_cfg(task + ["seed=4", "qkv_sharing=independent", "pos_enc=learned"])
    b_cfg = compose_cfg(task + ["seed=4", "qkv_sharing=mqa", "pos_enc=rope", "norm=rmsnorm"])
    assert a_cfg.qkv_sharing != b_cfg.qkv_sharing and a_cfg.task == b_cfg.task
    a, b = first_batches(a_cfg), first_batches(b_cfg)
    assert same(a[0], b[0]) and same(a[1], b[1])
    assert len(a[2]) == len(b[2]) and all(same(p, q) for p, q in zip(a[2], b[2]))
    c = first_batches(compose_cfg(task + ["seed=5", "qkv_sharing=independent", "pos_enc=learned"]))
    assert not same(a[0], c[0])  # another seed trains on other batches
    assert same(a[1], c[1]) and all(same(p, q) for p, q in zip(a[2], c[2]))  # and is scored on the same


# ---------------------------------------------------------------------------- the contract
class OneHeldOutSplit(SyntheticTask):
    """A task written against the contract before validation: eval_batches(self, length)."""

    name = "one_split"
    vocab_size = n_classes = 10

    def make_batch(self, g: torch.Generator, batch: int, length: int) -> Batch:
        x = torch.randint(0, 10, (batch, length), generator=g)
        return x, x.clone()

    def eval_batches(self, length: int) -> list[Batch]:  # type: ignore[override]
        return [self.make_batch(torch.Generator().manual_seed(length), 8, length)]


class TwoSplits(OneHeldOutSplit):
    """The same task after adding a split: the old batches are its test split."""

    name = "two_splits"

    def eval_batches(self, length: int, split: str = "test") -> list[Batch]:
        if split == "test":
            return super().eval_batches(length)
        return [self.make_batch(validation_generator(self.name, length), 8, length)]


def test_a_task_without_split_is_stopped_before_training() -> None:
    problems = check(OneHeldOutSplit, {"seq_len": 8})
    assert len(problems) == 1 and "OneHeldOutSplit.eval_batches(self, length) takes" in problems[0]
    assert "takes no `split`" in problems[0] and "split='validation'" in problems[0]
    with pytest.raises(ValueError, match="takes no `split`"):
        build_task({"_target_": f"{__name__}.OneHeldOutSplit", "seq_len": 8})
    # the whole-config check a run makes before it trains
    with pytest.raises(ConfigError, match="takes no `split`"):
        validate(compose_cfg(["task=copy", "~task.n_values", f"task._target_={__name__}.OneHeldOutSplit",
                              "model.d_model=16", "model.n_heads=2"]))
    # written against the new contract, it passes and keeps its old batches as the test split
    assert check(TwoSplits, {"seq_len": 8}) == []
    validate(compose_cfg(["task=copy", "~task.n_values", f"task._target_={__name__}.TwoSplits", "model.d_model=16", "model.n_heads=2"]))
    dm = datamodule({"_target_": f"{__name__}.TwoSplits", "seq_len": 8})
    assert same(dm.eval_batches(8, "test"), OneHeldOutSplit(8).eval_batches(8))
    assert not same(list(dm.val_dataloader()), dm.eval_batches(8, "test"))
    assert issubclass(TwoSplits, Task)
