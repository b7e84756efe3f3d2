"""The offline downstream suite (ablate.data.downstream, ablate.data.pysource): py_module,
py_docstring, py_continues, py_tokens. Built in process from the standard library's source: held-out modules,
sizes, balance, splits that are fixed and share no function, the encodings (bytes and a
tokenizer.json), refusals, and one tiny training run per task that beats chance."""

from __future__ import annotations

import io
import tokenize
from collections import Counter
from pathlib import Path

import pytest
import torch
from conftest import IN_PROCESS, compose_cfg, script_module

from ablate.compose import tiny_overrides
from ablate.components import resolve
from ablate.data import DEFAULT_CORPUS_MODULES, check
from ablate.data.base import IGNORE
from ablate.data.downstream import PyContinues, PyDocstring, PyModule, PyTokens
from ablate.data.formats import codec_layout
from ablate.data.pysource import (DOWNSTREAM_MODULES, MODULE_GROUPS, TOKEN_LABELS, first_pieces, functions,
                                  module_file, read_module, token_spans)
from ablate.data.text import default_corpus_files
from ablate.data.vocab import TextCodec
from ablate.job import Job
from ablate.run import run_job

TASKS = {"py_module": PyModule, "py_docstring": PyDocstring, "py_continues": PyContinues, "py_tokens": PyTokens}
SPLITS = ("train", "validation", "dev")  # dev: the test split's rows
#: each task at its defaults, and py_docstring's other label
BUILT = {**{name: (cls, {}) for name, cls in TASKS.items()}, "match": (PyDocstring, {"label": "match"})}


@pytest.fixture(scope="module")
def built() -> dict:
    """Every task of BUILT, set up (the functions are read once per process)."""
    out = {}
    for name, (cls, settings) in BUILT.items():
        out[name] = cls(**settings)
        out[name].setup()
    return out


def texts(task, split: str) -> list[str]:
    """Every text an example of ``split`` reads (py_continues: each pair, since the code before a cut
    in one function, such as a common ``def __len__(self):`` line, can begin one of another split)."""
    rows = task._examples[split]
    if isinstance(task, PyContinues):
        return ["\0".join(pair) for pair, _ in rows]
    return rows if isinstance(task, PyTokens) else [t for segments, _ in rows for t in segments]


# ---------------------------------------------------------------------------- the source
def test_the_held_out_modules_are_not_in_the_pretraining_corpus() -> None:
    assert set(DOWNSTREAM_MODULES).isdisjoint(DEFAULT_CORPUS_MODULES)
    assert {m.split(".")[0] for m in DOWNSTREAM_MODULES}.isdisjoint(DEFAULT_CORPUS_MODULES)
    files = {module_file(m) for m in DOWNSTREAM_MODULES} - {None}
    assert len(files) >= 0.9 * len(DOWNSTREAM_MODULES)  # all since 3.10; a few may go in later versions
    assert files.isdisjoint(default_corpus_files())
    assert {f.module for f in functions()} <= set(DOWNSTREAM_MODULES)


def test_a_function_is_its_code_from_the_def_line_without_its_docstring() -> None:
    source = ('import os\n\n@decorator\ndef f(a, b=1):\n    """Add them.\n\n    Twice.\n    """\n'
              '    return a + b  # sum\n\n\nclass C:\n    def g(self):\n        def inner():\n'
              '            pass\n        return 1\n\n    def stub(self):\n        "Only a docstring."\n\n'
              '    def same_line(self): "doc"; return 2\n')
    found = {f.name: f for f in read_module("g", "m", source)}
    assert set(found) == {"f", "C.g"}  # inner: part of g's text; stub: nothing left; same_line: refused
    assert found["f"].code == "def f(a, b=1):\n    return a + b  # sum"
    assert found["f"].docstring == "Add them. Twice."
    assert found["C.g"].code.startswith("def g(self):\n    def inner():") and found["C.g"].docstring == ""


def test_token_spans_are_tokenizes_classes() -> None:
    code = 'def f(x):\n    if x >= 10:  # big\n        return f"{x}!" + match\n'
    spans = token_spans(code)
    got = [(code[a:b], TOKEN_LABELS[label]) for a, b, label in spans]
    assert got == [("def", "keyword"), ("f", "name"), ("(", "operator"), ("x", "name"), (")", "operator"),
                   (":", "operator"), ("if", "keyword"), ("x", "name"), (">=", "operator"), ("10", "number"),
                   (":", "operator"), ("# big", "comment"), ("return", "keyword"), ('f"{x}!"', "string"),
                   ("+", "operator"), ("match", "name")]
    assert token_spans(code, limit=code.index("if")) == spans[:6]
    assert len(list(tokenize.generate_tokens(io.StringIO(code).readline))) > len(spans)  # layout tokens: no label


def test_the_first_piece_of_each_token_is_labelled() -> None:
    spans = [(0, 2, 0), (3, 4, 1), (5, 7, 2), (8, 10, 3), (10, 11, 2)]  # "if x == 10:"
    offsets = [(0, 2), (2, 4), (4, 5), (5, 6), (6, 7), (7, 10), (10, 11)]  # "if", " x", " ", "=", "=", " 10", ":"
    assert first_pieces(offsets, spans, IGNORE) == [0, 1, IGNORE, 2, IGNORE, 3, 2]
    # two tokens starting in one piece: the first one's label; the second has no piece of its own
    assert first_pieces([(0, 4), (4, 11)], spans, IGNORE) == [0, 2]


# ---------------------------------------------------------------------------- sizes and splits
#: the least train, validation and test examples of each (CPython 3.11: 1669/185/456, 535/59/156,
#: 2341/256/624, 1494/166/410)
SIZES = {"py_module": (1200, 120, 300), "py_docstring": (400, 40, 100), "py_tokens": (1800, 200, 450),
         "match": (1000, 100, 250), "py_continues": (3600, 200, 900)}


@pytest.mark.parametrize("name", BUILT)
def test_sizes_and_classes(built: dict, name: str) -> None:
    task = built[name]
    sizes = tuple(len(task._examples[split]) for split in SPLITS)
    assert all(n >= least for n, least in zip(sizes, SIZES[name])) and sizes[1] <= task.n_val, sizes
    classes = {"py_module": len(MODULE_GROUPS), "py_docstring": len(MODULE_GROUPS), "py_tokens": len(TOKEN_LABELS),
               "match": 2, "py_continues": 2}
    assert task.n_classes == classes[name]
    assert (task.vocab_size, task.pad_id) == (260, 256) and task.metric == (
        "token_accuracy" if name == "py_tokens" else "accuracy")


def test_the_classes_are_balanced(built: dict) -> None:
    for split in SPLITS:
        for name in ("py_module", "py_docstring"):
            counts = Counter(label for _, label in built[name]._examples[split])
            assert set(counts) == set(range(len(MODULE_GROUPS))), (name, split)
            if split == "dev":
                assert len(set(counts.values())) == 1, (name, counts)  # exactly balanced
            else:  # validation carved at random from a balanced pool
                assert max(counts.values()) <= 2 * min(counts.values()), (name, split, counts)
        for name in ("match", "py_continues"):
            pairs = Counter(label for _, label in built[name]._examples[split])
            assert pairs[0] == pairs[1], (name, split, pairs)
    rows = built["py_tokens"].encoded("dev", 128)
    labels = Counter(rows.targets[rows.targets != IGNORE].tolist())
    assert set(labels) == set(range(len(TOKEN_LABELS)))
    assert 0.35 < max(labels.values()) / sum(labels.values()) < 0.6  # operator: the majority, not most


@pytest.mark.parametrize("name", BUILT)
def test_no_function_is_in_two_splits(built: dict, name: str) -> None:
    task = built[name]
    split = task.split_functions()
    codes = {s: {f.code for f in split[s]} for s in SPLITS}
    for i, a in enumerate(SPLITS):
        for b in SPLITS[i + 1:]:
            assert not codes[a] & codes[b], (a, b)
            assert not set(texts(task, a)) & set(texts(task, b)), (a, b)
    assert all(f.held_out for f in split["dev"]) and not any(f.held_out for s in ("train", "validation")
                                                              for f in split[s])
    if name == "match":  # a negative's code is another function of the same split
        for s in SPLITS:
            assert {code for (_, code), _ in task._examples[s]} == codes[s]
    if name == "py_continues":  # each side is a piece of one function of the split
        for s in SPLITS:
            assert {before + after for (before, after), label in task._examples[s] if label} == codes[s]


@pytest.mark.parametrize("name", TASKS)
def test_the_splits_are_fixed_and_the_training_stream_is_seeded(built: dict, name: str) -> None:
    again = TASKS[name]()
    for split in ("validation", "test"):
        for (x1, y1), (x2, y2) in zip(built[name].eval_batches(128, split), again.eval_batches(128, split)):
            assert torch.equal(x1, x2) and torch.equal(y1, y2)
    first = [next(again.train_batches(seed))[0] for seed in (0, 0, 1)]
    assert torch.equal(first[0], first[1]) and not torch.equal(first[0], first[2])
    train = {tuple(row) for row in again.encoded("train", 128).tokens.tolist()}
    assert all(tuple(row) in train for row in first[2].tolist())


def test_py_continues_pairs_each_side_once_with_each_label_and_keeps_the_cut(built: dict) -> None:
    task = built["py_continues"]
    for split in SPLITS:
        rows = task._examples[split]
        for side in (0, 1):  # neither side alone tells the label: each text comes as often with 1 as with 0
            labels: dict[str, list[int]] = {}
            for example, label in rows:
                labels.setdefault(example[side], []).append(label)
            assert all(found.count(0) == found.count(1) > 0 for found in labels.values()), (split, side)
        for (before, after), label in rows[:200]:
            whole = len(before + after)  # a positive's two sides are its function: cut in its middle half
            assert not label or whole // 4 <= len(before) <= whole - whole // 4, (before, after)
    codec = task.codec
    for length in (16, 64, 128):
        width = (length - 3) // 2
        for example, label in task._examples["dev"][:100]:
            a, b = task.segments(example, length)
            assert a == example[0][-width:] and b == example[1][:width]
            ids = codec_layout(codec, [codec.encode(a), codec.encode(b)], length, causal=False)
            sep = ids.index(codec.sep_id)
            assert ids[sep - len(a.encode()):sep] == codec.encode(a)  # the cut's two sides meet at the SEP
            assert ids[sep + 1:sep + 1 + len(b.encode())][:len(codec.encode(b))] == codec.encode(b)[:length - sep - 2]


def test_n_train_caps_the_training_examples_only() -> None:
    full, capped = PyDocstring(label="match"), PyDocstring(label="match", n_train=200)
    assert len(capped.encoded("train", 128)) == 200
    for split in ("validation", "dev"):
        assert torch.equal(full.encoded(split, 128).tokens, capped.encoded(split, 128).tokens)
    assert len(PyModule(n_train=300).encoded("train", 128)) == 300


# ---------------------------------------------------------------------------- encodings
def test_the_classification_layouts(built: dict) -> None:
    codec = TextCodec.of("bytes")
    rows = built["py_module"].encoded("dev", 128)
    (segments,), label = built["py_module"]._examples["dev"][0]
    x, y = rows.batch(torch.tensor([0]))
    body = list(segments.encode())[:126]
    assert x[0].tolist()[:len(body) + 2] == [codec.cls_id, *body, codec.sep_id]
    assert (y[0] != IGNORE).nonzero().flatten().tolist() == [0] and int(y[0, 0]) == label
    short = next(i for i, ((s,), _) in enumerate(built["py_module"]._examples["dev"]) if len(s) < 100)
    row = rows.tokens[short].tolist()
    n = len(built["py_module"]._examples["dev"][short][0][0])
    assert row[n + 1] == codec.sep_id and set(row[n + 2:]) == {codec.pad_id}  # PAD on the right

    for (doc, code), _ in built["py_docstring"]._examples["dev"][:100]:
        ids = codec_layout(codec, [list(doc.encode()), list(code.encode())], 128, causal=False)
        sep = ids.index(codec.sep_id)
        a, b, whole = sep - 1, len(ids) - sep - 2, (len(doc.encode()), len(code.encode()))
        assert ids[0] == codec.cls_id and ids[-1] == codec.sep_id and a + b == min(sum(whole), 125)
        if min(whole) <= 62:  # longest-first: the shorter one whole, the longer one cut
            assert min(whole) == (a if whole[0] <= whole[1] else b)
        else:
            assert min(a, b) >= 62
    causal = PyDocstring(causal=True)
    x, y = causal.eval_batches(128)[0]
    for row, labels in zip(x.tolist(), y.tolist()):
        last = max(i for i, t in enumerate(row) if t != codec.pad_id)
        assert row[last] == codec.cls_id and [i for i, t in enumerate(labels) if t != IGNORE] == [last]


def test_py_tokens_labels_the_first_byte_of_each_token(built: dict) -> None:
    task = built["py_tokens"]
    code = task._examples["dev"][0]
    ids, labels = task.tagged(code, 128)
    assert ids[0] == task.codec.cls_id and ids[-1] == task.codec.sep_id and labels[0] == labels[-1] == IGNORE
    spans = token_spans(code)
    assert {i + 1: label for i, (_, _, label) in ((s[0], s) for s in spans) if i < 126} == \
        {p: label for p, label in enumerate(labels) if label != IGNORE}


@pytest.fixture(scope="module")
def bpe(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A small byte-level BPE (600 ids) trained on some of the pretraining corpus, saved as tokenizer.json."""
    from ablate.data.encoders import train_bpe

    text = "".join(p.read_text() for p in default_corpus_files()[:8])
    path = tmp_path_factory.mktemp("bpe") / "tokenizer.json"
    train_bpe([text[i:i + 65536] for i in range(0, len(text), 65536)], 600).save(str(path))
    return str(path)


def test_a_tokenizer_json_gives_the_vocabulary_and_first_pieces(bpe: str) -> None:
    codec = TextCodec.of(bpe)
    task = PyTokens(tokenizer=bpe, seq_len=64)
    assert (task.vocab_size, task.pad_id) == (codec.base_vocab + 4, codec.base_vocab)
    for code in task.split_functions()["dev"][:50]:
        code = code.code
        ids, labels = task.tagged(code, 64)
        assert ids[1:-1] == codec.encode(code)[:62]  # the codec's ids
        _, offsets = codec.encode_with_offsets(code, 62)
        starts = {s: label for s, _, label in token_spans(code)}
        for p, label in enumerate(labels[1:-1]):
            a, b = offsets[p]
            inside = [s for s in starts if a <= s < b]
            assert label == (starts[min(inside)] if inside else IGNORE), (code, p)
        assert sum(label != IGNORE for label in labels) < len([s for s in starts if s < offsets[-1][1]]) + 1
    rows = PyModule(tokenizer=bpe).encoded("dev", 128)
    assert int(rows.tokens.max()) < codec.vocab_size and int(rows.tokens[:, 0].unique()) == codec.cls_id


# ---------------------------------------------------------------------------- refusals
def problems(name: str, **settings) -> list[str]:
    return check(*resolve("task", {"_target_": f"ablate.data.downstream.{TASKS[name].__name__}", **settings}))


@pytest.mark.parametrize("name", TASKS)
def test_bad_keys_are_refused_one_line_each(name: str, tmp_path: Path) -> None:
    assert problems(name) == []
    not_json = tmp_path / "tokenizer.json"
    not_json.write_text("{")
    cases = {"tokenizer": ("bpe", "'bpe' would train a new BPE, whose ids no pretrained model knows; valid: bytes"),
             "n_train": (0, "task.n_train must be a positive integer (at most that many training examples) "
                            "or null (all), got 0"),
             "seq_len": (3, f"task.seq_len=3 is too short for {name}")}
    for key, (value, said) in cases.items():
        found = problems(name, **{key: value})
        assert len(found) == 1 and said in found[0], (key, found)
    found = problems(name, tokenizer="/no/such/tokenizer.json")
    assert found == ["task.tokenizer='/no/such/tokenizer.json' is not a tokenizer file; valid: bytes, or the "
                     "path of a tokenizer.json (the pretraining's)"]
    found = problems(name, tokenizer=str(not_json))
    assert len(found) == 1 and "is not a Hugging Face tokenizer.json" in found[0]
    with pytest.raises(ValueError, match="'bpe' would train"):
        TASKS[name](tokenizer="bpe")
    if name == "py_docstring":
        assert problems(name, label="matches") == ["task.label='matches' is not a py_docstring label; valid: "
                                                    "package, match"]
        assert problems(name, label="match") == []


# ---------------------------------------------------------------------------- training
#: each task's tiny run: its changes to TINY, chance (py_tokens: the majority label's share of the test
#: split's labels) and the test accuracy it must beat. The classifications read a small BPE: over bytes
#: a model this small needs many more steps to find the words (about 0.6 and 0.7 here after 200 steps)
RUNS = {
    "py_module": (["task.tokenizer={bpe}", "model.d_model=32", "task.seq_len=64", "task.batch_size=16",
                   "trainer.max_steps=200", "optim.warmup_steps=20"], 1 / 6, 0.35),
    "py_docstring": (["task.tokenizer={bpe}", "model.d_model=32", "task.seq_len=64", "task.batch_size=16",
                      "trainer.max_steps=200", "optim.warmup_steps=20"], 1 / 6, 0.35),
    "py_tokens": (["task.seq_len=64", "task.batch_size=8", "trainer.max_steps=100", "optim.warmup_steps=10"],
                  0.46, 0.7),
}


@pytest.mark.parametrize("name", RUNS)
def test_a_tiny_run_beats_chance(name: str, bpe: str, tmp_path: Path, one_thread) -> None:
    changes, chance, floor = RUNS[name]
    overrides = tiny_overrides(*IN_PROCESS, f"task={name}", "eval.every=0", *(c.format(bpe=bpe) for c in changes))
    record = run_job(compose_cfg(overrides), Job(tmp_path / "job", overrides, {}, None, None))
    assert record.status == "ok", record.error
    assert record.metrics.accuracy > floor > chance, record.metrics.accuracy


# ---------------------------------------------------------------------- pretraining helps

#: per task: fine-tune steps (the experiment has 300), learning rate (the experiment's), fine-tune seed
#: (one per task, both seeds among them: the pairs the test can afford) and the least gain of the
#: pretrained body over a fresh one (accuracy points; about half the least gain over seeds 0-3: see the test)
GAINS = {"py_module": (100, 2e-3, 0, 0.016), "py_continues": (150, 5e-4, 1, 0.027), "py_tokens": (100, 2e-3, 0, 0.0035)}
#: batches of 16, both stages: half the cost of the experiment's 32, with the gain kept on every seed 0-3
SMALLER_BATCHES = ["task.batch_size=16"]


@pytest.mark.slow  # about 60 s: 1000 pretraining steps, then 6 fine-tunes
def test_a_pretrained_model_beats_the_same_model_from_scratch(tmp_path: Path) -> None:
    """The protocol's premise, paired (``scripts/pretraining_gain.py``, shorter and at batches of 16):
    one masked-LM pretraining of the shipped experiment's model, then each task fine-tuned from it and
    from scratch with the same seed (same head, same batches, same steps); the pretrained model scores
    higher on the task's test split in every pair, by a margin. Single-threaded and seeded, so the
    figures repeat; measured here (fine-tune seeds 0, 1, 2, 3): py_module +0.033/+0.061/+0.064/+0.143,
    py_continues +0.063/+0.059/+0.056/+0.055 (scratch stays at chance), py_tokens
    +0.013/+0.011/+0.007/+0.011 (accuracy); the margins are about half the smallest gain. Cheaper
    settings kept no clear margin on every seed: 700 pretraining steps (py_continues, seed 0: +0.000;
    py_tokens below 0 on every seed), batches of 8 or 12 in pretraining, sequences of 32 (py_tokens below
    0), py_tokens at 75 steps (seed 2: -0.004), py_module at 75 (seed 0: -0.015). (At the experiment's
    batches of 32, py_continues at 200 steps gained only +0.011 on seed 3.) py_docstring's package label
    is left out: its docstring's words give the label away, and pretraining showed no gain there
    (docs/finetune.md)."""
    script = script_module("pretraining_gain")  # the calibration this test runs a part of
    torch.set_num_threads(1)
    pretrained = script.pretrain(1000, SMALLER_BATCHES, str(tmp_path))
    gains = {}
    for task, (steps, lr, seed, _) in GAINS.items():
        pre, scratch = (script.fine_tune_score(task, seed, steps, lr, start, SMALLER_BATCHES)
                        for start in (pretrained, None))
        gains[task] = pre - scratch
    assert all(gain > GAINS[task][-1] for task, gain in gains.items()), gains
