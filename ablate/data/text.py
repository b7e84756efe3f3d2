"""Language modelling on local text (``task=lm``, ``task=mlm``): bytes, BPE, or your own tokenizer.

``task.objective``:

* ``clm`` (``task=lm``, the default): causal LM; every input position is labelled with the next
  token (metric ``next_token_accuracy``; the loss is nats per token);
* ``mlm`` (``task=mlm``): BERT's masked LM (:mod:`ablate.data.masking`) on an encoder
  (``task.causal=false``); the inputs are the window itself with ``task.mask_rate`` of its
  positions corrupted, and only those positions are labelled, with their original token (metric
  ``masked_token_accuracy``). Training masks come from the run's training stream; held-out masks
  are fixed (:func:`ablate.data.base.held_out_generator`), the same for every seed and variant.

``task.special_tokens`` (null: true for ``mlm``, false for ``clm``) appends PAD, CLS, SEP, MASK
after the tokenizer's ids (:class:`ablate.data.vocab.TextCodec`, :meth:`LanguageModel.codec`), so
a pretrained model shares its vocabulary with downstream tasks; the windows themselves never hold
a special but MASK. ``task.tokenizer`` (see :mod:`ablate.data.tokens` and
:mod:`ablate.data.encoders`):

* ``bytes`` (default): the tokens are the UTF-8 bytes (vocabulary 256, 260 with the specials); the loss
  is nats per byte, ``loss / ln 2`` bits per byte;
* ``bpe``: byte-level BPE trained locally on (the start of) the training part, ``task.vocab_size``
  tokens (default 4096);
* a path to a saved Hugging Face ``tokenizer.json``.

Per-token losses of different tokenizers are not comparable; bits per byte are. They divide the
loss summed over the scored targets (nats) by ln 2 and by the UTF-8 bytes of those same targets:
``bits_per_byte = loss / ln 2 / bytes_per_token``, where ``loss`` is the mean over the targets of
the test windows at a length and ``bytes_per_token`` is the bytes of those targets over their
number (:meth:`LanguageModel.target_bytes`; not the whole test text's, since the windows cover only
part of it). A byte-level tokenizer (``bpe``, or a ``tokenizer.json`` with a ``ByteLevel``
decoder) counts each id's bytes exactly; another ``tokenizer.json`` decodes each window's targets
(see :class:`ablate.data.tokens.TargetBytes` for where that is approximate). A ``.bin`` has no
tokenizer: :attr:`LanguageModel.bytes_per_token` then holds its sidecar's ``bytes_per_token``, if
any, and that is used instead.

``task.path``: a text file, or a directory whose ``*.txt`` files (recursively, sorted by path)
are concatenated with a newline between files, or a pre-tokenized ``.bin`` (nanoGPT's layout;
its vocabulary from ``task.vocab_size`` or the sidecar ``x.json``). When ``task.path`` is null the
default corpus is used: the source code of a fixed list of pure-Python standard-library modules
of the running interpreter (:data:`DEFAULT_CORPUS_MODULES`, ~1.6 MB on CPython 3.11), located
with ``importlib.util.find_spec`` (falling back to ``sysconfig``'s stdlib directory) and read in
that order. Every CPython installation ships these files, so nothing is downloaded. The bytes
differ slightly between Python versions: compare runs made with the same interpreter.

The text is encoded once into a memory-mapped token file, in a cache shared by every job
(``task.cache_dir``, else ``$ABLATE_CACHE_DIR``, else ``~/.cache/ablate/tokens``); under ``bytes``
a single text file is mapped as it is, and the built-in corpus (small, fixed) is read. Training and held-out windows are read from the map, so
a job's memory does not grow with the corpus.

Split by position::

    |<------------------ training part: 1 - val_fraction ------------------>|<- val_fraction ->|
    |  train: windows at seeded random offsets          | validation        | test             |

The last ``val_fraction`` of the text is the test split (``val_fraction`` keeps its name from
when it was the only held-out part): of its bytes (moved forward to a character boundary for a
tokenizer, which encodes the two parts separately), or of the tokens of a ``.bin``. The
validation split is the end of the training part: ``n_val * seq_len + 1`` tokens, but at most a
tenth of the training part (and at least ``seq_len + 1``). Training windows start at seeded
uniform random offsets of what is left, so no training window reads a validation or test token.
Held-out windows are fixed: up to ``n_test`` (test) or ``n_val`` (validation) non-overlapping
windows, evenly spread over their part, at each length asked for.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import importlib.util
import math
import os
import sysconfig
from pathlib import Path

import numpy as np
import torch

from . import tokens as tok
from .base import IGNORE, N_VAL, Batch, Task, check_split, held_out_generator, train_generator
from .encoders import tokenizer_vocab_size
from .masking import bert_mask
from .vocab import TextCodec

#: the training objectives of ``task.objective``
OBJECTIVES: tuple[str, ...] = ("clm", "mlm")

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


def corpus_files(path: str | os.PathLike | None) -> list[Path]:
    """The files of the corpus at ``path`` (file, or directory of ``*.txt``), or of the default."""
    if path is None:
        files = default_corpus_files()
        if not files:
            raise ValueError("task.path is null and the default corpus (Python standard-library "
                             "sources) was not found on this machine; set task.path=FILE")
        return files
    p = Path(path).expanduser()
    if p.is_file():
        return [p]
    if p.is_dir():
        files = sorted(q for q in p.rglob("*.txt") if q.is_file())
        if not files:
            raise ValueError(f"task.path={str(path)!r} is a directory without *.txt files")
        return files
    raise ValueError(f"task.path={str(path)!r} does not exist (lm needs a text file, a directory "
                     "of *.txt files or a .bin token file; null uses the built-in corpus)")


def read_corpus(path: str | os.PathLike | None) -> bytes:
    """The bytes of ``path`` (file, or directory of ``*.txt``), or of the default corpus, in
    memory (a job reads them through :mod:`ablate.data.tokens` instead)."""
    return tok.Corpus(corpus_files(path)).read(0, 1 << 62)


def is_token_file(path: str | None) -> bool:
    return path is not None and Path(path).suffix == ".bin"


class LanguageModel(Task):
    """Causal language modelling (next-token prediction; Shannon 1951) over bytes, as in the
    character-level setting of Al-Rfou et al., 2019, "Character-Level Language Modeling with
    Deeper Self-Attention", or over byte-level BPE tokens (Sennrich et al., 2016; Radford et
    al., 2019); or masked language modelling (``objective="mlm"``; Devlin et al., 2019, "BERT")."""

    name = "lm"
    metric = "next_token_accuracy"
    vocab_size = 256
    n_classes = 256
    pad_id = None

    def __init__(self, seq_len: int = 128, eval_lengths: Sequence[int] = (), batch_size: int = 32,
                 causal: bool = True, path: str | None = None, val_fraction: float = 0.1,
                 n_test: int = 256, n_val: int = N_VAL, tokenizer: str = "bytes",
                 vocab_size: int | None = None, cache_dir: str | None = None,
                 bpe_sample_mb: float = tok.DEFAULT_SAMPLE_MB, objective: str = "clm",
                 mask_rate: float = 0.15, special_tokens: bool | None = None):
        super().__init__(seq_len, eval_lengths, batch_size, causal)
        self.path = None if path is None else str(path)
        self.val_fraction = float(val_fraction)
        self.n_test = int(n_test)
        self.n_val = int(n_val)
        self.tokenizer = str(tokenizer)
        self.cache_dir = cache_dir
        self.bpe_sample_mb = float(bpe_sample_mb)
        if self.path is not None and not Path(self.path).expanduser().exists():
            raise ValueError(f"task.path={self.path!r} does not exist")
        problems = self._tokenizer_problems({"path": path, "tokenizer": tokenizer, "vocab_size": vocab_size})
        problems += self._objective_problems({"objective": objective, "mask_rate": mask_rate, "causal": causal})
        if problems:
            raise ValueError("; ".join(problems))
        self.objective, self.mask_rate = objective, float(mask_rate)
        self.special_tokens = objective == "mlm" if special_tokens is None else bool(special_tokens)
        self.metric = "masked_token_accuracy" if objective == "mlm" else "next_token_accuracy"
        #: the tokenizer's ids (the corpus vocabulary); the specials, if any, follow them
        self.base_vocab = self._vocab_size(vocab_size)
        self.vocab_size = self.n_classes = self._ids.vocab_size
        #: UTF-8 bytes per token of the whole test text (the token file's figure, or a ``.bin``
        #: sidecar's; None until ``setup``, or when unknown). Bits per byte use
        #: :meth:`target_bytes`, the bytes of the scored targets, where it is known.
        self.bytes_per_token: float | None = 1.0 if self.tokenizer == "bytes" and not is_token_file(self.path) else None
        #: the token file read (set by ``setup``)
        self.tokens: tok.Tokens | None = None
        self._target_bytes: tok.TargetBytes | None = None  # made by the first ``target_bytes``

    def codec(self) -> TextCodec:
        """The vocabulary of this task's model (tokenizer + specials, if any), for downstream
        tasks to encode their text with. Raises ``ValueError`` for a pre-tokenized ``.bin``."""
        self.setup()
        if is_token_file(self.path):
            raise ValueError(f"task.path={self.path!r} is pre-tokenized: it has no tokenizer to encode "
                             "downstream text with (pretrain on text with task.tokenizer=bytes, bpe or a "
                             "tokenizer.json)")
        if self.tokenizer == "bytes":
            return TextCodec.of("bytes", self.special_tokens)
        if self.tokenizer == "bpe":  # the tokenizer trained on this corpus: its cache entry's, beside tokens.bin
            path = Path(self.tokens.path).parent / "tokenizer.json"
        else:
            path = Path(self.tokenizer).expanduser()
        # the task's base, not the file's count: the specials' ids follow it (a BPE may learn fewer merges)
        return TextCodec(str(path), self.base_vocab, self.special_tokens)

    @property
    def _ids(self) -> TextCodec:
        """The id layout (the tokenizer's ids, then the specials): TextCodec's arithmetic, one place."""
        return TextCodec(str(self.tokenizer), self.base_vocab, self.special_tokens)

    @property
    def mask_id(self) -> int:
        return self._ids.mask_id

    def _vocab_size(self, setting: int | None) -> int:
        if is_token_file(self.path):
            return tok.bin_tokens(self.path, setting).vocab_size
        if self.tokenizer == "bytes":
            return 256
        if self.tokenizer == "bpe":
            return int(setting or tok.DEFAULT_BPE_VOCAB)
        return tokenizer_vocab_size(self.tokenizer)

    @property
    def unit(self) -> str:
        return "bytes" if self.tokenizer == "bytes" and not is_token_file(self.path) else "tokens"

    def _load(self) -> tok.Tokens:
        if is_token_file(self.path):
            return tok.bin_tokens(self.path, self.base_vocab)
        if self.tokenizer == "bytes" and self.path is None:  # small and fixed: read, not cached
            data = np.frombuffer(bytearray(read_corpus(None)), np.uint8)
            return tok.Tokens(path="", dtype="uint8", vocab_size=256, tokenizer="bytes", n_tokens=len(data),
                              bytes_per_token=1.0, data=data)
        files = corpus_files(self.path)
        if self.tokenizer == "bytes" and len(files) == 1:
            size = files[0].stat().st_size  # a text file is its own byte-token file
            return tok.Tokens(path=str(files[0]), dtype="uint8", vocab_size=256, tokenizer="bytes",
                              n_tokens=size, bytes_per_token=1.0)
        corpus = tok.Corpus(files)
        if corpus.size == 0:
            raise ValueError(f"task.path={self.path!r} is empty: a language model needs text to read")
        return tok.prepare(corpus, self.tokenizer, self.base_vocab, self.val_fraction, self.cache_dir,
                           self.bpe_sample_mb, describe=self.path or "the built-in corpus")

    def _setup(self) -> None:
        self.tokens = self._load()
        if self.tokens.n_tokens == 0:
            raise ValueError(f"task.path={self.path!r} is empty: a language model needs text to read")
        data = self.tokens.array()
        split = self.tokens.train_tokens
        if split is None:
            split = int(round(len(data) * (1 - self.val_fraction)))
        if self.tokens.bytes_per_token is not None:
            self.bytes_per_token = self.tokens.bytes_per_token
        training, held_out = data[:split], data[split:]
        unit = self.unit
        n_val = min(self.n_val * self.seq_len + 1, max(self.seq_len + 1, len(training) // 10))
        if len(training) < n_val + self.seq_len + 2:
            raise ValueError(f"task.path={self.path!r}: the training part has {len(training)} {unit}, "
                             f"fewer than one validation window and one training window need "
                             f"(2 * (task.seq_len + 1) + 1 = {2 * self.seq_len + 3})")
        if len(held_out) < self.max_len + 1:
            raise ValueError(f"task.path={self.path!r}: the held-out part ({self.val_fraction:g} of "
                             f"the text) has {len(held_out)} {unit}, fewer than the longest "
                             f"evaluation length + 1 = {self.max_len + 1}")
        # where each split lies in the token file; ``train_data``, ``val_data``, ``held_out``: the
        # same as tensors (views of one map, for inspection; batches map the file afresh)
        self._parts = {"train": (0, split - n_val), "validation": (split - n_val, split),
                       "test": (split, len(data))}
        self.train_data, self.val_data, self.held_out = (torch.from_numpy(data[lo:hi]) for lo, hi in self._parts.values())
        self._check_ids = is_token_file(self.path)

    def _part(self, split: str) -> np.ndarray:
        """The tokens of ``split`` ("train", "validation", "test") in a new map of the file. A
        batch drops its map when done, so the pages it read leave the job's resident memory
        (one long-lived map would count every page ever read; nanoGPT maps per batch too)."""
        lo, hi = self._parts[split]
        return self.tokens.array()[lo:hi]

    def _windows(self, data: np.ndarray, starts: np.ndarray, length: int) -> torch.Tensor:
        """The ``length + 1`` tokens from each of ``starts``."""
        w = data[starts[:, None] + np.arange(length + 1)].astype(np.int64)
        if self._check_ids and len(w) and int(w.max()) >= self.base_vocab:
            raise ValueError(f"task.path={self.path!r} holds token id {int(w.max())}, outside "
                             f"task.vocab_size={self.base_vocab}")
        return torch.from_numpy(w)

    def _gather(self, data: np.ndarray, starts: np.ndarray, length: int) -> Batch:
        w = self._windows(data, starts, length)
        return w[:, :-1], w[:, 1:]

    def _masked(self, data: np.ndarray, starts: np.ndarray, length: int, g: torch.Generator) -> Batch:
        """Masked-LM inputs and targets of the windows at ``starts`` (not shifted: a window's first
        ``length`` tokens), the corruption drawn from ``g``."""
        return bert_mask(self._windows(data, starts, length)[:, :length], g, self.mask_rate, self.mask_id,
                         self.base_vocab)

    def train_batches(self, seed: int, rank: int = 0):
        self.setup()
        g = train_generator(self.name, seed, rank)
        B, T = self.batch_size, self.seq_len
        lo, hi = self._parts["train"]
        hi = hi - lo - T  # start s needs s + T < len(data)
        while True:
            starts = torch.randint(0, hi, (B,), generator=g)
            if self.objective == "mlm":
                yield self._masked(self._part("train"), starts.numpy(), T, g)
            else:
                yield self._gather(self._part("train"), starts.numpy(), T)

    def eval_batches(self, length: int, split: str = "test") -> list[Batch]:
        self.setup()
        check_split(split)
        data, n = self._part(split), self.n_test if split == "test" else self.n_val
        avail = (len(data) - 1) // length
        if avail < 1:
            raise ValueError(f"task.path={self.path!r}: the {split} part has {len(data)} {self.unit}, "
                             f"fewer than length + 1 = {length + 1}")
        k = min(n, avail)
        starts = ((torch.arange(k) * avail // k) * length).numpy()
        if self.objective == "mlm":  # masked all at once, so the masks do not depend on batch_size
            x, y = self._masked(data, starts, length, held_out_generator("mlm", length, split))
            return list(zip(x.split(self.batch_size), y.split(self.batch_size)))
        return [self._gather(data, starts[i:i + self.batch_size], length)
                for i in range(0, k, self.batch_size)]

    def target_bytes(self, batches: Sequence[Batch]) -> int | None:
        """The UTF-8 bytes of the text that the labelled targets of ``batches`` stand for (for
        bits per byte: ``eval_batches(length, "test")`` gives the bytes of the targets its loss
        averages over), or None when unknown (a ``.bin``)."""
        self.setup()
        if self._target_bytes is None and not is_token_file(self.path):
            self._target_bytes = tok.TargetBytes.of(self.tokens)
        if self._target_bytes is None:
            return None
        return self._target_bytes(row[row != IGNORE].numpy() for _, y in batches for row in y)

    def add_bits_per_byte(self, evals: dict[str, dict], batches: Callable[[int], Sequence[Batch]]) -> None:
        """Add ``bytes_per_token`` and ``bits_per_byte`` to each entry of ``evals`` (length ->
        ``{"loss", "count", ...}``: the mean loss in nats over the ``count`` targets of the test
        batches at that length, ``batches(length)``). ``bytes_per_token`` is the UTF-8 bytes of those
        targets over ``count`` (:meth:`target_bytes`; for a ``.bin``, its sidecar's figure, if any),
        so ``bits_per_byte = loss / ln 2 / bytes_per_token`` is the summed loss in bits over the bytes
        the scored targets stand for."""
        for length, e in evals.items():
            n_bytes = self.target_bytes(batches(int(length)))
            bpt = n_bytes / e["count"] if n_bytes and e.get("count") else self.bytes_per_token
            if bpt:
                e.update(bytes_per_token=bpt, bits_per_byte=e["loss"] / math.log(2) / bpt)

    @classmethod
    def _tokenizer_problems(cls, cfg: dict) -> list[str]:
        path, tokenizer, vocab = cfg.get("path"), cfg.get("tokenizer", "bytes"), cfg.get("vocab_size")
        problem = tok.tokenizer_problem(tokenizer)
        if problem:
            return [problem]
        if vocab is not None and not (isinstance(vocab, int) and not isinstance(vocab, bool) and vocab > 0):
            return [f"task.vocab_size must be a positive integer or null, got {vocab!r}"]
        if path is not None and is_token_file(str(path)) and Path(str(path)).expanduser().is_file():
            if tokenizer != "bytes":
                return [f"task.path={str(path)!r} is already tokenized: leave task.tokenizer unset "
                        f"(it is {tokenizer!r})"]
            return tok.bin_problems(str(path), vocab)
        if tokenizer == "bytes" and vocab not in (None, 256):
            return [f"task.vocab_size={vocab} needs task.tokenizer=bpe (bytes have 256 tokens)"]
        if tokenizer == "bpe" and vocab is not None and not 256 < vocab <= 1 << 32:
            return [f"task.vocab_size={vocab}: a BPE vocabulary holds the 256 bytes and at least one "
                    "merge, so it must be in 257 .. 2**32"]
        if tok.is_tokenizer_file(tokenizer) and vocab is not None:
            return [f"task.vocab_size={vocab}: the vocabulary of task.tokenizer={tokenizer!r} is its "
                    "own; leave task.vocab_size unset"]
        return []

    @classmethod
    def problems(cls, cfg: dict, context: Any = None) -> list[str]:
        out = super().problems(cfg, context)
        path = cfg.get("path")
        if path is not None and not Path(str(path)).expanduser().exists():
            out.append(f"task.path={str(path)!r} does not exist (lm needs a text file, a directory "
                       "of *.txt files or a .bin token file; null uses the built-in corpus)")
        elif path is not None and not is_token_file(str(path)):
            p = Path(str(path)).expanduser()
            files = [p] if p.is_file() else list(p.rglob("*.txt"))
            if files and not any(f.stat().st_size for f in files if f.is_file()):
                out.append(f"task.path={str(path)!r} is empty: a language model needs text to read")
        out += cls._tokenizer_problems(cfg)
        vf = cfg.get("val_fraction", 0.1)
        if not (isinstance(vf, (int, float)) and 0 < vf < 1):
            out.append(f"task.val_fraction must be in (0, 1), got {vf!r}")
        sample = cfg.get("bpe_sample_mb", tok.DEFAULT_SAMPLE_MB)
        if not (isinstance(sample, (int, float)) and not isinstance(sample, bool) and sample > 0):
            out.append(f"task.bpe_sample_mb must be a positive number, got {sample!r}")
        out += cls._objective_problems(cfg)
        return out

    @classmethod
    def _objective_problems(cls, cfg: dict) -> list[str]:
        objective, causal, rate = cfg.get("objective", "clm"), cfg.get("causal", True), cfg.get("mask_rate", 0.15)
        if objective not in OBJECTIVES:
            return [f"task.objective={objective!r} is not a training objective; valid: {', '.join(OBJECTIVES)}"]
        if objective == "clm":
            return [] if causal is not False else [
                "task.causal=false lets a language model see the token it must predict; lm needs "
                "task.causal=true (for an encoder, masked LM: task=mlm)"]
        out = []
        if causal is True:
            out.append("task.objective=mlm with task.causal=true: masked LM reads the context on both sides "
                       "of a masked token; use task=mlm or task.causal=false")
        if not (isinstance(rate, (int, float)) and not isinstance(rate, bool) and 0 < rate < 1):
            out.append(f"task.mask_rate must be a number in (0, 1), got {rate!r}")
        return out
