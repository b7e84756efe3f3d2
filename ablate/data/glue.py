"""GLUE classification tasks (Wang et al., 2019, "GLUE: A Multi-Task Benchmark and Analysis
Platform for Natural Language Understanding"): ``task=glue task.name=NAME`` with NAME one of
:data:`GLUE_TASKS` (cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli).

* ``task.path`` null: the data comes from the Hugging Face hub through the ``datasets`` library
  (``datasets.load_dataset("nyu-mll/glue", NAME)``, the canonical home of the former ``"glue"``
  dataset; splits ``train`` and ``validation`` — ``validation_matched`` for MNLI). ``datasets``
  is an optional dependency: ``pip install -e '.[glue]'``. It is imported lazily, so nothing
  else needs it. The download happens in ``prepare_data`` (rank 0) and is cached by ``datasets``.
* ``task.path`` set: a directory of local files in GLUE's own format (the files of the original
  GLUE distribution): ``train.tsv`` and ``dev.tsv`` (MNLI: ``dev_matched.tsv`` if there is no
  ``dev.tsv``), read by the same TSV reader as ``task=classify``. This is how the tests cover it.

Tokens, layout and label ids are those of ``task=classify`` (byte tokens with CLS/SEP/PAD, or with
``tokenizer`` a tokenizer.json's ids and its specials; labels in sorted order of their strings; the
hub's integer labels are used as strings). The test split is GLUE's dev set (its test labels are not
public); the validation split is carved out of GLUE's training set as in ``task=classify``
(``n_val`` rows, at most a tenth, the same rows for every seed), and those rows are not trained on.
The headline metric is the one GLUE's leaderboard reports: Matthews correlation for CoLA, the mean of
F1 (of the positive class) and accuracy for MRPC and QQP (both recorded too, as ``f1`` and
``label_accuracy``), the mean of Pearson and Spearman correlation for STS-B (a regression: one
output trained by mean squared error on the 0-5 score), accuracy for the others. MNLI's test split is
the matched dev set; the mismatched one is scored beside it (:meth:`GlueTask.extra_test_sets`, the
record's ``metrics.eval_extra``).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any, Sequence

import torch

from .base import N_VAL, Task
from .files import ClassificationTask, _dir_problems
from .formats import read_glue_tsv


def _datasets_available() -> bool:
    """Whether ``import datasets`` can work, without importing it (it is slow)."""
    if "datasets" in sys.modules:
        return sys.modules["datasets"] is not None
    return importlib.util.find_spec("datasets") is not None


#: GLUE's tasks and their number of outputs (classes; STS-B, a regression: one score)
GLUE_TASKS: dict[str, int] = {
    "cola": 2, "sst2": 2, "mrpc": 2, "stsb": 1, "qqp": 2, "mnli": 3, "qnli": 2, "rte": 2, "wnli": 2,
}
#: GLUE's headline metric where it is not accuracy (computed in ablate.lit.CONFUSION_METRICS)
GLUE_METRICS: dict[str, str] = {"cola": "matthews_corr", "mrpc": "f1_accuracy", "qqp": "f1_accuracy",
                                 "stsb": "pearson_spearman"}
#: MNLI's second dev set (GLUE scores matched and mismatched), evaluated beside the test split
MISMATCHED = "mismatched"

#: text columns of each task in the hub's version
HUB_COLUMNS: dict[str, tuple[str, ...]] = {
    "cola": ("sentence",), "sst2": ("sentence",), "mrpc": ("sentence1", "sentence2"), "stsb": ("sentence1", "sentence2"),
    "qqp": ("question1", "question2"), "mnli": ("premise", "hypothesis"),
    "qnli": ("question", "sentence"), "rte": ("sentence1", "sentence2"),
    "wnli": ("sentence1", "sentence2"),
}
HUB_DATASET = "nyu-mll/glue"


def _import_datasets():
    try:
        import datasets  # noqa: PLC0415 - optional dependency, imported lazily
    except ImportError:
        raise ImportError(
            "task.path is null, so GLUE is loaded with the `datasets` library, which is not "
            "installed: pip install -e '.[glue]' (or set task.path to a directory holding "
            "GLUE's train.tsv and dev.tsv)") from None
    return datasets


class GlueTask(ClassificationTask):
    """GLUE (Wang et al., 2019): ``GlueTask(name="sst2", ...)`` builds the class of that GLUE task
    (``GLUE_CLASSES``), each of which sets ``name`` to its GLUE name."""

    def __new__(cls, name: str = "sst2", *args: Any, **kwargs: Any) -> "GlueTask":
        return super().__new__(GLUE_CLASSES[name] if cls is GlueTask else cls)

    def __init__(self, name: str = "sst2", seq_len: int = 128, eval_lengths: Sequence[int] = (), batch_size: int = 32,
                 causal: bool = False, path: str | None = None, n_val: int = N_VAL, tokenizer: str = "bytes"):
        super().__init__(seq_len, eval_lengths, batch_size, causal, n_val, tokenizer)
        self.n_classes = GLUE_TASKS[self.name]
        self.metric = GLUE_METRICS.get(self.name, "accuracy")
        self.path = None if path is None else Path(str(path)).expanduser()
        if self.path is not None:
            probs = _dir_problems(self.name, str(path), self.local_files(), self.what())
            if probs:
                raise ValueError("; ".join(probs))
        self._hub = None

    @classmethod
    def local_files(cls) -> list:
        dev = ["dev.tsv", "dev_matched.tsv"] if cls.name == "mnli" else "dev.tsv"
        return ["train.tsv", dev]

    @classmethod
    def what(cls) -> str:
        dev = "dev.tsv (or dev_matched.tsv)" if cls.name == "mnli" else "dev.tsv"
        return f"a directory holding GLUE's train.tsv and {dev}"

    def _file(self, split: str) -> Path:
        if split == "train":
            return self.path / "train.tsv"
        if split == MISMATCHED:
            return self.path / "dev_mismatched.tsv"
        if self.name == "mnli" and not (self.path / "dev.tsv").is_file():
            return self.path / "dev_matched.tsv"
        return self.path / "dev.tsv"

    def _source(self, split: str) -> str:
        if self.path is not None:
            return str(self._file(split))
        return f"{HUB_DATASET}/{self.name}:{self._hub_split(split)}"

    def _hub_split(self, split: str) -> str:
        if split == "train":
            return "train"
        if split == MISMATCHED:
            return "validation_mismatched"
        return "validation_matched" if self.name == "mnli" else "validation"

    def _load_hub(self):
        if self._hub is None:
            datasets = _import_datasets()
            self._hub = datasets.load_dataset(HUB_DATASET, self.name)
        return self._hub

    def prepare(self) -> None:
        if self.path is None:
            self._load_hub()

    def extra_test_names(self) -> list[str]:
        """The dev sets scored beside the test split: MNLI's mismatched one (locally: when the
        directory holds dev_mismatched.tsv)."""
        if self.name != "mnli" or (self.path is not None and not self._file(MISMATCHED).is_file()):
            return []
        return [MISMATCHED]

    def _setup(self) -> None:
        super()._setup()
        for name in self.extra_test_names():
            self._split_rows[name] = self._rows(name)

    def setup(self) -> None:
        if not self._ready:
            super().setup()
            for name in self.extra_test_names():  # bad data fails before training
                self.encoded(name, self.seq_len)

    def extra_test_sets(self) -> dict[str, list]:
        """``{name: batches}`` at the training length of each dev set scored beside the test split
        (``metrics.eval_extra`` in the record)."""
        out = {}
        for name in self.extra_test_names():
            rows = self.encoded(name, self.seq_len)
            out[name] = [rows.batch(torch.arange(i, min(i + self.batch_size, len(rows))))
                         for i in range(0, len(rows), self.batch_size)]
        return out

    def _rows(self, split: str):
        if self.path is not None:
            return read_glue_tsv(self._file(split))
        ds = self._load_hub()[self._hub_split(split)]
        cols = [list(ds[c]) for c in HUB_COLUMNS[self.name]]
        labels = list(ds["label"])
        label = (lambda x: str(float(x))) if self.regression else (lambda x: str(int(x)))
        return [(tuple(c[i] for c in cols), label(labels[i]), i + 1)
                for i in range(len(labels)) if labels[i] >= 0]  # the hub marks unlabelled rows -1

    @classmethod
    def problems(cls, cfg: dict, context: Any = None) -> list[str]:
        if cls is GlueTask:
            name = cfg.get("name", "sst2")
            if name not in GLUE_CLASSES:
                return [f"task.name={name!r} is not a GLUE task; valid: {', '.join(GLUE_TASKS)}"]
            return GLUE_CLASSES[name].problems(cfg, context)
        out = super().problems(cfg, context)
        if cfg.get("path") is not None:
            out += _dir_problems(cls.name, cfg["path"], cls.local_files(), cls.what())
        elif not _datasets_available():
            out.append("task.path=null loads GLUE with the `datasets` library, which is not installed: "
                       "pip install -e '.[glue]' (or set task.path to a directory of GLUE's TSV files)")
        return out


def _make(name: str) -> type[Task]:
    cls = type(name.upper(), (GlueTask,),
               {"name": name, "regression": name == "stsb",
                "__doc__": f"GLUE {name} (Wang et al., 2019); "
                           + ("a regression (a score)." if name == "stsb" else f"{GLUE_TASKS[name]} classes.")})
    cls.__module__ = __name__
    return cls


GLUE_CLASSES: dict[str, type[Task]] = {n: _make(n) for n in GLUE_TASKS}
