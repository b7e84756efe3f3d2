"""Tasks on your own local files: sentence classification (``task=classify``, GLUE's TSV layout)
and per-token labelling (``task=tagging``).

Both read a directory ``task.path`` holding a training and a held-out ("dev") file, encode every
example once, and then train on an unbounded, seeded stream of shuffled full batches (successive
random permutations of the training rows). Splits:

* test: the whole dev file, in file order;
* validation: ``n_val`` rows of the training file, but at most a tenth of them (at least one),
  chosen by a fixed permutation that does not depend on the run seed
  (:func:`ablate.data.base.carve_validation`); they are left out of training. Vocabularies and
  label ids still come from the whole training file, so they do not depend on the carving;
* train: the remaining training rows.

Sequences are truncated to the input length and padded on the right with ``pad_id``.

classify
    Byte-level tokens (the UTF-8 bytes, ids 0–255, no tokenizer, nothing downloaded) plus the
    specials PAD=256, CLS=257, SEP=258 (``vocab_size`` 259). Files: ``train.tsv`` and
    ``dev.tsv`` (GLUE's names; keys ``train_file``/``dev_file``), tab-separated, a header row,
    no quoting. Text columns are found by name — ``sentence``, or a pair ``sentence1/sentence2``,
    ``question/sentence``, ``question1/question2``, ``premise/hypothesis``,
    ``#1 String/#2 String`` (MRPC) — and the label column is ``label``, ``gold_label`` (MNLI),
    ``is_duplicate`` (QQP) or ``Quality`` (MRPC); keys ``text_columns`` (a list of one or two
    names) and ``label_column`` override the search. CoLA's header-less 4-column files are
    recognised too. Labels are mapped to ids in sorted order of the distinct label strings of
    the training file (numeric order when all are integers).

    Layout (BERT, Devlin et al. 2019, §3; GPT, Radford et al. 2018, §3.3)::

        encoder (causal=false):  CLS a SEP [b SEP] PAD ...   label at position 0 (CLS)
        causal  (causal=true):   a [SEP b] CLS PAD ...       label at the CLS, the last real token

    Pairs that do not fit are truncated longest-first.

tagging
    One example per line: input tokens separated by whitespace, a tab, then exactly as many
    target tokens separated by whitespace. Files ``train.txt`` and ``dev.txt`` (keys
    ``train_file``/``dev_file``). Input vocabulary: PAD=0, UNK=1, then the distinct training
    tokens in sorted order (dev tokens unseen in training become UNK). Label vocabulary: the
    distinct training target tokens in sorted order. Every real position is labelled; padding
    positions get ``-100``. Blank lines are skipped.

The files' formats are read and encoded in ``ablate.data.formats``; this module holds the tasks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from .base import (IGNORE, N_VAL, Batch, RowsStream, Task, _is_int, carve_validation, check_split,
                   train_generator)
from .vocab import TextCodec, task_tokenizer_problems
from .formats import BYTE_VOCAB, PAD, Row, _ClassRows, _TagRows, encode_classification, read_glue_tsv, \
    read_tagging_file, sorted_labels


def _dir_problems(task: str, path, files: Sequence[str | Sequence[str]], what: str) -> list[str]:
    """Problems of ``task.path``: missing, nonexistent, not a directory, or lacking a file.
    An entry of ``files`` may be a list of alternatives."""
    if path is None:
        return [f"task.path is required for task {task!r}: {what} (e.g. task.path=/data/mytask)"]
    p = Path(str(path)).expanduser()
    if not p.exists():
        return [f"task.path={str(path)!r} does not exist (task {task!r} needs {what})"]
    if not p.is_dir():
        return [f"task.path={str(path)!r} is not a directory (task {task!r} needs {what})"]
    out = []
    for f in files:
        alts = [f] if isinstance(f, str) else list(f)
        if not any((p / a).is_file() for a in alts):
            out.append(f"task.path={str(path)!r} has no {' or '.join(alts)} (task {task!r} needs {what})")
    return out


class FileTask(Task):
    """Shared logic of tasks over pre-encoded rows of local (or downloaded) files. Row splits:
    ``"train"`` and ``"validation"`` (carved from the training file) and ``"dev"`` (the test
    split)."""

    def __init__(self, seq_len: int, eval_lengths: Sequence[int] = (), batch_size: int = 32, causal: bool = False,
                 n_val: int = N_VAL):
        super().__init__(seq_len, eval_lengths, batch_size, causal)
        self.n_val = int(n_val)
        self._encoded: dict[tuple[str, int], _ClassRows | _TagRows] = {}

    def _carve(self, rows: list, source: str) -> dict[str, list]:
        """``{"train": ..., "validation": ...}``: the rows of the training file, split."""
        train, val = carve_validation(self.name, len(rows), self.n_val, source)
        return {"train": [rows[i] for i in train.tolist()], "validation": [rows[i] for i in val.tolist()]}

    def _locate(self, path, train_file: str, dev_file: str) -> None:
        """Check ``task.path`` holds the train and dev files; set ``self.path`` and ``self.files``."""
        problems = _dir_problems(self.name, path, [train_file, dev_file], self.what(train_file, dev_file))
        if problems:
            raise ValueError("; ".join(problems))
        self.path = Path(str(path)).expanduser()
        self.files = {"train": self.path / train_file, "dev": self.path / dev_file}

    def setup(self) -> None:
        """Read the files and encode every split and length now, so bad data fails early."""
        if not self._ready:
            super().setup()
            self.encoded("train", self.seq_len)
            self.encoded("validation", self.seq_len)
            for length in self.test_lengths:
                self.encoded("dev", length)

    def encoded(self, split: str, length: int):
        self.setup()
        key = (split, length)
        if key not in self._encoded:
            self._encoded[key] = self._encode(split, length)
        return self._encoded[key]

    def _encode(self, split: str, length: int):
        raise NotImplementedError

    def train_batches(self, seed: int, rank: int = 0) -> Iterator[Batch]:
        rows = self.encoded("train", self.seq_len)
        g = train_generator(self.name, seed, rank)
        for idx in RowsStream(len(rows), self.batch_size, g):
            yield rows.batch(idx)

    def eval_batches(self, length: int, split: str = "test") -> list[Batch]:
        check_split(split)
        rows = self.encoded("dev" if split == "test" else "validation", length)
        return [rows.batch(torch.arange(i, min(i + self.batch_size, len(rows))))
                for i in range(0, len(rows), self.batch_size)]


class ClassificationTask(FileTask):
    """Sentence (pair) classification with byte tokens; subclasses provide :meth:`_rows`."""

    metric = "accuracy"
    #: the labels are scores and the head one output trained by mean squared error (GLUE's STS-B)
    regression = False
    vocab_size = BYTE_VOCAB
    pad_id = PAD
    #: the vocabulary its ids come from: the bytes, then PAD, CLS, SEP at TextCodec's ids (a fine-tune
    #: from a byte-level pretraining shares it; MASK, which it never uses, follows)
    codec = TextCodec("bytes", 256, True)

    def __init__(self, seq_len: int, eval_lengths: Sequence[int] = (), batch_size: int = 32, causal: bool = False,
                 n_val: int = N_VAL, tokenizer: str = "bytes"):
        super().__init__(seq_len, eval_lengths, batch_size, causal, n_val)
        problems = task_tokenizer_problems(tokenizer)
        if problems:
            raise ValueError("; ".join(problems))
        self.tokenizer = str(tokenizer)
        if self.tokenizer != "bytes":  # the byte layout keeps its 259 ids (no MASK), as every run before
            self.codec = TextCodec.of(self.tokenizer, specials=True)
            self.vocab_size, self.pad_id = self.codec.vocab_size, self.codec.pad_id

    def _rows(self, split: str) -> list[Row]:
        raise NotImplementedError

    def _source(self, split: str) -> str:
        return split

    def _setup(self) -> None:
        train = self._rows("train")
        self.labels = [] if self.regression else sorted_labels(r[1] for r in train)
        self.label_ids = None if self.regression else {l: i for i, l in enumerate(self.labels)}
        if len(self.labels) > self.n_classes:
            raise ValueError(f"{self._source('train')}: {len(self.labels)} distinct labels, "
                             f"more than the {self.n_classes} classes expected")
        self._split_rows = {**self._carve(train, self._source("train")), "dev": self._rows("dev")}

    def _encode(self, split, length):
        source = self._source("train" if split == "validation" else split)  # validation rows are training rows
        codec = None if self.tokenizer == "bytes" else self.codec
        return encode_classification(self._split_rows[split], self.label_ids, length, self.causal, source, codec)

    @classmethod
    def problems(cls, cfg: dict, context: Any = None) -> list[str]:
        out = super().problems(cfg, context) + task_tokenizer_problems(cfg.get("tokenizer", "bytes"))
        extra = cfg.get("eval_lengths") or []
        lengths = [cfg.get("seq_len")] + (list(extra) if isinstance(extra, (list, tuple)) else [])
        if all(_is_int(x) and x > 0 for x in lengths) and min(lengths) < 4:
            out.append(f"task.seq_len={cfg.get('seq_len')} is too short for classification: "
                       "the specials alone take up to 3 positions; use at least 4")
        return out


class Classify(ClassificationTask):
    """Your sentence (pair) classification data in GLUE's TSV layout (Wang et al., 2019,
    "GLUE: A Multi-Task Benchmark and Analysis Platform for Natural Language Understanding")."""

    name = "classify"
    path_required = True

    def __init__(self, seq_len: int = 128, eval_lengths: Sequence[int] = (), batch_size: int = 32,
                 causal: bool = False, path: str | None = None, train_file: str = "train.tsv",
                 dev_file: str = "dev.tsv", text_columns: Sequence[str] | None = None,
                 label_column: str | None = None, n_val: int = N_VAL, tokenizer: str = "bytes"):
        super().__init__(seq_len, eval_lengths, batch_size, causal, n_val, tokenizer)
        self._locate(path, train_file, dev_file)
        self.text_columns = None if text_columns is None else (
            [text_columns] if isinstance(text_columns, str) else list(text_columns))
        self.label_column = label_column
        # the number of classes must be known before the model is built: read train now
        self._train_rows = self._read("train")
        self.n_classes = len(sorted_labels(r[1] for r in self._train_rows))

    @staticmethod
    def what(train_file="train.tsv", dev_file="dev.tsv") -> str:
        return f"a directory holding {train_file} and {dev_file} in GLUE's TSV layout"

    def _read(self, split):
        return read_glue_tsv(self.files[split], self.text_columns, self.label_column)

    def _source(self, split):
        return str(self.files[split])

    def _rows(self, split):
        return self._train_rows if split == "train" else self._read(split)

    @classmethod
    def problems(cls, cfg: dict, context: Any = None) -> list[str]:
        out = super().problems(cfg, context)
        tf, df = cfg.get("train_file", "train.tsv"), cfg.get("dev_file", "dev.tsv")
        return out + _dir_problems(cls.name, cfg.get("path"), [tf, df], cls.what(tf, df))


# ---------------------------------------------------------------------------------------------
# tagging

class Tagging(FileTask):
    """Per-token labelling of your own data (sequence labelling as in CoNLL-2003 NER,
    Tjong Kim Sang & De Meulder, 2003): one label per input token."""

    name = "tagging"
    metric = "token_accuracy"
    path_required = True
    PAD_ID, UNK_ID = 0, 1

    def __init__(self, seq_len: int = 64, eval_lengths: Sequence[int] = (), batch_size: int = 32,
                 causal: bool = False, path: str | None = None, train_file: str = "train.txt",
                 dev_file: str = "dev.txt", n_val: int = N_VAL):
        super().__init__(seq_len, eval_lengths, batch_size, causal, n_val)
        self._locate(path, train_file, dev_file)
        train = read_tagging_file(self.files["train"])
        self._rows = {"train": train}
        self.tokens = sorted({t for xs, _, _ in train for t in xs})
        self.token_ids = {t: i + 2 for i, t in enumerate(self.tokens)}
        self.tags = sorted({t for _, ys, _ in train for t in ys})
        self.tag_ids = {t: i for i, t in enumerate(self.tags)}
        self.vocab_size = 2 + len(self.tokens)
        self.n_classes = len(self.tags)
        self.pad_id = self.PAD_ID

    @staticmethod
    def what(train_file="train.txt", dev_file="dev.txt") -> str:
        return (f"a directory holding {train_file} and {dev_file}, one example per line: "
                "input tokens, a tab, as many target tokens")

    def _setup(self) -> None:
        self._rows = {**self._carve(self._rows["train"], str(self.files["train"])),
                      "dev": read_tagging_file(self.files["dev"])}

    def _encode(self, split, length):
        rows = self._rows[split]
        source = self.files["dev" if split == "dev" else "train"]  # validation rows are training rows
        n = len(rows)
        x = np.full((n, length), self.PAD_ID, dtype=np.int16 if self.vocab_size < 2**15 else np.int64)
        y = np.full((n, length), IGNORE, dtype=np.int16 if self.n_classes < 2**15 else np.int64)
        for i, (xs, ys, line) in enumerate(rows):
            xs, ys = xs[:length], ys[:length]
            x[i, :len(xs)] = [self.token_ids.get(t, self.UNK_ID) for t in xs]
            try:
                y[i, :len(ys)] = [self.tag_ids[t] for t in ys]
            except KeyError as e:
                raise ValueError(f"{source}, line {line}: target {e.args[0]!r} does not "
                                 f"occur in {self.files['train'].name} (known: {self.tags})") from None
        return _TagRows(torch.from_numpy(x), torch.from_numpy(y))

    @classmethod
    def problems(cls, cfg: dict, context: Any = None) -> list[str]:
        out = super().problems(cfg, context)
        tf, df = cfg.get("train_file", "train.txt"), cfg.get("dev_file", "dev.txt")
        return out + _dir_problems(cls.name, cfg.get("path"), [tf, df], cls.what(tf, df))
