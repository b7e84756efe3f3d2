"""Byte-level language modelling on local text (``task=lm``).

Tokens are the UTF-8 bytes of the text (vocabulary 256, no tokenizer, no specials). Each input
position is labelled with the next byte (metric ``next_token_accuracy``; the loss is nats per
byte, ``loss / ln 2`` bits per byte).

``task.path``: a text file, or a directory whose ``*.txt`` files (recursively, sorted by path)
are concatenated with a newline between files. When ``task.path`` is null the default corpus is
used: the source code of a fixed list of pure-Python standard-library modules of the running
interpreter (:data:`DEFAULT_CORPUS_MODULES`, ~1.6 MB on CPython 3.11), located with
``importlib.util.find_spec`` (falling back to ``sysconfig``'s stdlib directory) and read in that
order. Every CPython installation ships these files, so nothing is downloaded. The bytes differ
slightly between Python versions: compare runs made with the same interpreter.

Split by position::

    |<------------------ training part: 1 - val_fraction ------------------>|<- val_fraction ->|
    |  train: windows at seeded random offsets          | validation        | test             |

The last ``val_fraction`` of the bytes is the test split (``val_fraction`` keeps its name from
when it was the only held-out part). The validation split is the end of the training part:
``n_val * seq_len + 1`` bytes, but at most a tenth of the training part (and at least
``seq_len + 1``). Training windows start at seeded uniform random offsets of what is left, so no
training window reads a validation or test byte. Held-out windows are fixed: up to ``n_test``
(test) or ``n_val`` (validation) non-overlapping windows, evenly spread over their part, at each
length asked for.
"""

from __future__ import annotations

from typing import Any, Sequence

import importlib.util
import os
import sysconfig
from pathlib import Path

import torch

from .base import N_VAL, Batch, Task, check_split, train_generator

#: stdlib modules whose source forms the default corpus (all present since Python 3.10)
DEFAULT_CORPUS_MODULES: tuple[str, ...] = (
    "argparse", "ast", "calendar", "collections", "configparser", "contextlib", "copy", "csv",
    "dataclasses", "difflib", "enum", "fractions", "functools", "getopt", "gettext", "glob",
    "heapq", "inspect", "logging", "optparse", "pprint", "queue", "random", "shlex", "shutil",
    "statistics", "string", "tarfile", "tempfile", "textwrap", "threading", "tokenize",
    "traceback", "typing", "warnings", "weakref",
)


def _module_source(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin and spec.origin.endswith(".py") and os.path.isfile(spec.origin):
        return Path(spec.origin)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for cand in (stdlib / f"{name}.py", stdlib / name / "__init__.py"):
        if cand.is_file():
            return cand
    return None


def default_corpus_files() -> list[Path]:
    """The files of the default corpus, in order (modules absent from this Python are skipped)."""
    return [p for p in map(_module_source, DEFAULT_CORPUS_MODULES) if p is not None]


def read_corpus(path: str | os.PathLike | None) -> bytes:
    """The bytes of ``path`` (file, or directory of ``*.txt``), or of the default corpus."""
    if path is None:
        files = default_corpus_files()
        if not files:
            raise ValueError("task.path is null and the default corpus (Python standard-library "
                             "sources) was not found on this machine; set task.path=FILE")
    else:
        p = Path(path).expanduser()
        if p.is_file():
            files = [p]
        elif p.is_dir():
            files = sorted(q for q in p.rglob("*.txt") if q.is_file())
            if not files:
                raise ValueError(f"task.path={str(path)!r} is a directory without *.txt files")
        else:
            raise ValueError(f"task.path={str(path)!r} does not exist (lm needs a text file or "
                             "a directory of *.txt files; null uses the built-in corpus)")
    return b"\n".join(f.read_bytes() for f in files)


class LanguageModel(Task):
    """Byte-level causal language modelling (next-byte prediction, Shannon 1951; the
    character-level setting of Al-Rfou et al., 2019, "Character-Level Language Modeling with
    Deeper Self-Attention")."""

    name = "lm"
    metric = "next_token_accuracy"
    vocab_size = 256
    n_classes = 256
    pad_id = None

    def __init__(self, seq_len: int = 128, eval_lengths: Sequence[int] = (), batch_size: int = 32,
                 causal: bool = True, path: str | None = None, val_fraction: float = 0.1,
                 n_test: int = 256, n_val: int = N_VAL):
        super().__init__(seq_len, eval_lengths, batch_size, causal)
        self.path = None if path is None else str(path)
        self.val_fraction = float(val_fraction)
        self.n_test = int(n_test)
        self.n_val = int(n_val)
        if self.path is not None and not Path(self.path).expanduser().exists():
            raise ValueError(f"task.path={self.path!r} does not exist")

    def _setup(self) -> None:
        corpus = read_corpus(self.path)
        if not corpus:
            raise ValueError(f"task.path={self.path!r} is empty: a language model needs text to read")
        data = torch.frombuffer(bytearray(corpus), dtype=torch.uint8)
        split = int(round(len(data) * (1 - self.val_fraction)))
        training, self.held_out = data[:split], data[split:]
        n_val = min(self.n_val * self.seq_len + 1, max(self.seq_len + 1, len(training) // 10))
        if len(training) < n_val + self.seq_len + 2:
            raise ValueError(f"task.path={self.path!r}: the training part has {len(training)} bytes, "
                             f"fewer than one validation window and one training window need "
                             f"(2 * (task.seq_len + 1) + 1 = {2 * self.seq_len + 3})")
        self.train_data, self.val_data = training[:-n_val], training[-n_val:]
        if len(self.held_out) < self.max_len + 1:
            raise ValueError(f"task.path={self.path!r}: the held-out part ({self.val_fraction:g} of "
                             f"the text) has {len(self.held_out)} bytes, fewer than the longest "
                             f"evaluation length + 1 = {self.max_len + 1}")

    @staticmethod
    def _windows(data: torch.Tensor, starts: torch.Tensor, length: int) -> Batch:
        w = data[starts[:, None] + torch.arange(length + 1)].long()
        return w[:, :-1], w[:, 1:]

    def train_batches(self, seed: int, rank: int = 0):
        self.setup()
        g = train_generator(self.name, seed, rank)
        B, T = self.batch_size, self.seq_len
        data = self.train_data
        hi = len(data) - T  # start s needs s + T < len(data)
        ar = torch.arange(T + 1)
        while True:
            starts = torch.randint(0, hi, (B,), generator=g)
            w = data[starts[:, None] + ar].long()
            yield w[:, :-1], w[:, 1:]

    def eval_batches(self, length: int, split: str = "test") -> list[Batch]:
        self.setup()
        check_split(split)
        data, n = (self.held_out, self.n_test) if split == "test" else (self.val_data, self.n_val)
        avail = (len(data) - 1) // length
        if avail < 1:
            raise ValueError(f"task.path={self.path!r}: the {split} part has {len(data)} bytes, "
                             f"fewer than length + 1 = {length + 1}")
        k = min(n, avail)
        starts = (torch.arange(k) * avail // k) * length
        return [self._windows(data, starts[i:i + self.batch_size], length)
                for i in range(0, k, self.batch_size)]

    @classmethod
    def problems(cls, cfg: dict, context: Any = None) -> list[str]:
        out = super().problems(cfg, context)
        path = cfg.get("path")
        if path is not None and not Path(str(path)).expanduser().exists():
            out.append(f"task.path={str(path)!r} does not exist (lm needs a text file or a "
                       "directory of *.txt files; null uses the built-in corpus)")
        elif path is not None:
            p = Path(str(path)).expanduser()
            files = [p] if p.is_file() else list(p.rglob("*.txt"))
            if files and not any(f.stat().st_size for f in files if f.is_file()):
                out.append(f"task.path={str(path)!r} is empty: a language model needs text to read")
        vf = cfg.get("val_fraction", 0.1)
        if not (isinstance(vf, (int, float)) and 0 < vf < 1):
            out.append(f"task.val_fraction must be in (0, 1), got {vf!r}")
        if cfg.get("causal", True) is False:
            out.append("task.causal=false lets a language model see the byte it must predict; "
                       "lm needs task.causal=true")
        return out
