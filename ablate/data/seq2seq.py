"""Sequence-to-sequence tasks: a source and a target of their own lengths, in one row per example.

A row of length T (``ablate.model.seq2seq`` draws it) is ``[pad … source SEP target EOS pad …]``:
the source left-padded so that SEP sits at column S - 1 (S: ``source_len(T)``, the same for every
row of that length), the target right after it. Targets label SEP's column and every target column
with the next target token, the last with EOS (teacher forcing: the loss is on the target only, in
every family), -100 elsewhere. A decoder-only model reads the row as a language model does, a
prefix LM reads the source bidirectionally, an encoder–decoder splits the row at S - 1
(``model.arch``). Besides the teacher-forced token accuracy, every evaluation decodes each row's
target greedily and scores it by exact match (the headline ``accuracy``; ``lit.py``).

Built-in, offline, generated from a seed like the digit tasks:

* ``add``: two ``n``-digit numbers (``a+b``) -> their sum, without leading zeros, least significant
  digit first by default (``reversed_sum``; writing the sum in the order it is computed makes
  addition learnable by small Transformers: Lee et al. 2023, "Teaching Arithmetic to Small
  Transformers", §4). ``n = (T - 4) // 3``: a longer ``eval_lengths`` entry means longer numbers.
* ``dedup``: ``m`` digits with runs -> the digits with each run collapsed to one (Unix ``uniq``):
  a target of 1 … m tokens. ``m = (T - 2) // 2``.

T5's span corruption (``span_corruption``, :class:`SpanCorruption`): a window of a text corpus's bytes
with spans replaced by sentinels -> the sentinels and their spans. Its ids begin with the downstream
tasks' vocabulary (``TextCodec``: bytes 0–255, PAD 256, CLS 257, SEP 258, MASK 259), then EOS 260 and
the sentinels 261…, so a fine-tune stage can follow it (docs/finetune.md).

Your own parallel data (``seq2seq_file``): a directory ``task.path`` with ``train.tsv`` and
``dev.tsv``, one example per line, ``source<TAB>target`` (no header), as UTF-8 bytes (ids 0–255;
PAD 256, SEP 257, EOS 258). The source region holds ``task.source_len`` bytes (default: half the
row); a longer source keeps its first bytes, a target longer than the rest of the row is cut (and
so never matches exactly). Scored also by corpus BLEU and chrF (sacrebleu) of the decoded text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Iterator, Mapping, Sequence

import torch

from ablate.components import Range
from ablate.model.seq2seq import Seq2SeqLayout

from .base import IGNORE, N_VAL, Batch, SyntheticTask, held_out_generator, train_generator
from .files import FileTask
from .formats import _TagRows
from .vocab import TextCodec

N_DIGITS = 10


class Seq2SeqTask(SyntheticTask):
    """Base of the seq2seq tasks over digits: ``n_values`` digit tokens, then ``+``, SEP, EOS and
    pad. A subclass gives ``source_len(length)`` and ``pairs(g, batch, length)``."""

    metric = "exact_match"
    seq2seq = True  # model.arch=prefix_lm|encoder_decoder read its layout
    #: the shortest row length a subclass can lay an example out in
    min_len = 4

    def __init__(self, seq_len: int = 16, eval_lengths: Sequence[int] = (), batch_size: int = 64,
                 causal: bool = True, n_test: int = 1000, n_val: int = 256,
                 n_values: Annotated[int, Range(low=2)] = N_DIGITS, max_decode: int | None = None):
        super().__init__(seq_len, eval_lengths, batch_size, causal, n_test, n_val)
        self.n_values = int(n_values)
        self.plus_id, self.sep_id, self.eos_id, self.pad_id = range(self.n_values, self.n_values + 4)
        self.vocab_size = self.n_classes = self.n_values + 4
        self.max_decode = max_decode
        self.layout = Seq2SeqLayout(self.sep_id, self.eos_id, {T: self.source_len(T) for T in self.test_lengths})

    @classmethod
    def problems(cls, cfg: dict, context=None) -> list[str]:
        out = super().problems(cfg, context)
        lengths = [x for x in [cfg.get("seq_len", 16), *(cfg.get("eval_lengths") or [])] if isinstance(x, int)]
        short = [x for x in lengths if x < cls.min_len]
        if short:
            out.append(f"task.seq_len/eval_lengths {short[0]} is too short for {cls.name}: {cls.layout_note} "
                       f"(the least is {cls.min_len})")
        limit = cfg.get("max_decode")
        if limit is not None and lengths and not short:
            if not (isinstance(limit, int) and not isinstance(limit, bool) and limit > 0):
                out.append(f"task.max_decode={limit!r} must be a positive integer or null (null: to the row's end)")
            else:
                longest = max(cls.longest_target(x, cfg) for x in lengths)
                if limit < longest:
                    out.append(f"task.max_decode={limit} is below the longest target of {cls.name} ({longest} "
                               f"tokens with EOS, at length {max(lengths)}); raise it or leave it null")
        return out

    layout_note = ""

    def source_len(self, length: int) -> int:
        """S: the source's columns in a row of ``length``, SEP included."""
        raise NotImplementedError

    @classmethod
    def longest_target(cls, length: int, settings: Mapping[str, Any] | None = None) -> int:
        """The most target tokens (EOS included) a row of ``length`` can hold under the task's
        ``settings`` (its YAML's keys; None: the defaults)."""
        raise NotImplementedError

    def pairs(self, g: torch.Generator, batch: int, length: int) -> list[tuple[list[int], list[int]]]:
        raise NotImplementedError

    def make_batch(self, g: torch.Generator, batch: int, length: int) -> Batch:
        return self.lay_out(self.pairs(g, batch, length), length)

    def lay_out(self, pairs: list[tuple[list[int], list[int]]], length: int) -> Batch:
        """(tokens, targets) rows of ``length`` for (source, target) token lists."""
        S = self.source_len(length)
        tokens = torch.full((len(pairs), length), self.pad_id, dtype=torch.long)
        targets = torch.full((len(pairs), length), IGNORE, dtype=torch.long)
        for row, (source, target) in enumerate(pairs):
            out = list(target) + [self.eos_id]
            tokens[row, S - 1 - len(source):S - 1] = torch.tensor(source, dtype=torch.long)
            tokens[row, S - 1] = self.sep_id
            tokens[row, S:S + len(out) - 1] = torch.tensor(out[:-1], dtype=torch.long)
            targets[row, S - 1:S - 1 + len(out)] = torch.tensor(out, dtype=torch.long)
        return tokens, targets

    def detokenize(self, ids: Sequence[int]) -> str:
        """Token ids as text: digits, ``+``, ``=`` (SEP), ``$`` (EOS), ``_`` (pad)."""
        names = {self.plus_id: "+", self.sep_id: "=", self.eos_id: "$", self.pad_id: "_"}
        return "".join(names.get(int(i), str(int(i)) if int(i) < 10 else f"<{int(i)}>") for i in ids)


def _digits(values: torch.Tensor, n_values: int, width: int) -> torch.Tensor:
    """(B,) integers -> (B, width) base-``n_values`` digits, most significant first."""
    powers = n_values ** torch.arange(width - 1, -1, -1)
    return (values[:, None] // powers) % n_values


class Add(Seq2SeqTask):
    """``a+b`` -> the digits of a + b (base ``n_values``), least significant first unless
    ``reversed_sum`` is false; a and b uniform over n-digit strings, n = (T - 4) // 3."""

    name = "add"
    min_len = 7
    layout_note = "a row holds two n-digit numbers, '+', SEP, the sum (n + 1 digits) and EOS: 3n + 4 tokens"

    def __init__(self, seq_len: int = 16, eval_lengths: Sequence[int] = (), batch_size: int = 64,
                 causal: bool = True, n_test: int = 1000, n_val: int = 256,
                 n_values: Annotated[int, Range(low=2)] = N_DIGITS, max_decode: int | None = None,
                 reversed_sum: bool = True):
        self.reversed_sum = bool(reversed_sum)
        super().__init__(seq_len, eval_lengths, batch_size, causal, n_test, n_val, n_values, max_decode)

    @staticmethod
    def n_digits(length: int) -> int:
        return (length - 4) // 3

    def source_len(self, length: int) -> int:
        return 2 * self.n_digits(length) + 2

    @classmethod
    def longest_target(cls, length: int, settings: Mapping[str, Any] | None = None) -> int:
        return cls.n_digits(length) + 2

    def pairs(self, g: torch.Generator, batch: int, length: int) -> list[tuple[list[int], list[int]]]:
        n, base = self.n_digits(length), self.n_values
        a, b = (torch.randint(0, base ** n, (batch,), generator=g) for _ in range(2))
        total = _digits(a + b, base, n + 1)
        out = []
        for row_a, row_b, row_sum in zip(_digits(a, base, n).tolist(), _digits(b, base, n).tolist(), total.tolist()):
            while len(row_sum) > 1 and row_sum[0] == 0:
                row_sum = row_sum[1:]
            out.append((row_a + [self.plus_id] + row_b, row_sum[::-1] if self.reversed_sum else row_sum))
        return out


class Dedup(Seq2SeqTask):
    """m digits -> the digits with every run of equal neighbours collapsed to one (``uniq``); each
    digit repeats its predecessor with probability ``repeat``, so runs are common. m = (T - 2) // 2."""

    name = "dedup"
    layout_note = "a row holds m digits, SEP, up to m digits and EOS: 2m + 2 tokens"

    def __init__(self, seq_len: int = 16, eval_lengths: Sequence[int] = (), batch_size: int = 64,
                 causal: bool = True, n_test: int = 1000, n_val: int = 256,
                 n_values: Annotated[int, Range(low=2)] = N_DIGITS, max_decode: int | None = None,
                 repeat: Annotated[float, Range(low=0.0, high=1.0)] = 0.5):
        self.repeat = float(repeat)
        super().__init__(seq_len, eval_lengths, batch_size, causal, n_test, n_val, n_values, max_decode)

    @staticmethod
    def n_digits(length: int) -> int:
        return (length - 2) // 2

    def source_len(self, length: int) -> int:
        return self.n_digits(length) + 1

    @classmethod
    def longest_target(cls, length: int, settings: Mapping[str, Any] | None = None) -> int:
        return cls.n_digits(length) + 1

    def pairs(self, g: torch.Generator, batch: int, length: int) -> list[tuple[list[int], list[int]]]:
        m = self.n_digits(length)
        fresh = torch.randint(0, self.n_values, (batch, m), generator=g)
        repeat = torch.rand(batch, m, generator=g) < self.repeat
        out = []
        for digits, again in zip(fresh.tolist(), repeat.tolist()):
            for i in range(1, m):
                if again[i]:
                    digits[i] = digits[i - 1]
            out.append((digits, [d for i, d in enumerate(digits) if i == 0 or d != digits[i - 1]]))
        return out


def read_pairs(path: Path) -> list[tuple[str, str]]:
    """``source<TAB>target`` lines of ``path`` (blank lines skipped); a line without exactly one tab
    is refused, naming the file and the line."""
    pairs = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 2:
            raise ValueError(f"{path}:{number}: a line must be source<TAB>target (one tab), got {len(parts) - 1} tabs")
        pairs.append((parts[0], parts[1]))
    if not pairs:
        raise ValueError(f"{path}: no source<TAB>target line")
    return pairs


class Seq2SeqFile(FileTask):
    """Your own parallel text (module docstring): ``train.tsv`` and ``dev.tsv`` in ``task.path``, UTF-8
    bytes. Test: the whole dev file; validation: carved out of the training file (``FileTask``)."""

    name = "seq2seq_file"
    metric = "exact_match"
    seq2seq = True
    text = True  # decodings are text: BLEU and chrF too
    path_required = True
    BYTES = 256

    def __init__(self, seq_len: int = 64, eval_lengths: Sequence[int] = (), batch_size: int = 32, causal: bool = True,
                 n_val: int = N_VAL, path: str | None = None, train_file: str = "train.tsv", dev_file: str = "dev.tsv",
                 source_len: int | None = None, max_decode: int | None = None):
        super().__init__(seq_len, eval_lengths, batch_size, causal, n_val)
        self.pad_id, self.sep_id, self.eos_id = self.BYTES, self.BYTES + 1, self.BYTES + 2
        self.vocab_size = self.n_classes = self.BYTES + 3
        self.capacity = int(source_len) if source_len is not None else (self.seq_len - 1) // 2
        self.max_decode = max_decode
        self.layout = Seq2SeqLayout(self.sep_id, self.eos_id, {T: self.capacity + 1 for T in self.test_lengths},
                                    padded_sources=True)
        self._path, self._files = path, (train_file, dev_file)

    @staticmethod
    def what(train_file: str = "train.tsv", dev_file: str = "dev.tsv") -> str:
        return f"{train_file} and {dev_file}, one source<TAB>target pair per line"

    @classmethod
    def problems(cls, cfg: dict, context: Any = None) -> list[str]:
        from .files import _dir_problems

        out = super().problems(cfg, context)
        out += _dir_problems(cls.name, cfg.get("path"), [cfg.get("train_file", "train.tsv"), cfg.get("dev_file", "dev.tsv")],
                             cls.what(cfg.get("train_file", "train.tsv"), cfg.get("dev_file", "dev.tsv")))
        seq_len, capacity = cfg.get("seq_len", 64), cfg.get("source_len")
        if isinstance(seq_len, int) and isinstance(capacity, int) and not 1 <= capacity <= seq_len - 2:
            out.append(f"task.source_len={capacity} must leave room for SEP and a target in task.seq_len={seq_len}: "
                       f"valid 1 to {seq_len - 2}")
        limit = cfg.get("max_decode")
        if limit is not None and not (isinstance(limit, int) and not isinstance(limit, bool) and limit > 0):
            out.append(f"task.max_decode={limit!r} must be a positive integer or null (null: to the row's end)")
        return out

    def _setup(self) -> None:
        self._locate(self._path, *self._files)
        rows = self._carve(read_pairs(self.files["train"]), str(self.files["train"]))
        self._pairs = {**rows, "dev": read_pairs(self.files["dev"])}
        limit, longest = self.max_decode, max(len(t.encode()) + 1 for _, t in self._pairs["train"])
        if limit is not None and limit < min(longest, self.seq_len - self.capacity):
            raise ValueError(f"task.max_decode={limit} is below the longest training target of {self.files['train']} "
                             f"({longest} tokens with EOS); raise it or leave it null")

    def _encode(self, split: str, length: int) -> _TagRows:
        pairs = self._pairs[split]
        S = self.capacity + 1
        tokens = torch.full((len(pairs), length), self.pad_id, dtype=torch.long)
        targets = torch.full((len(pairs), length), IGNORE, dtype=torch.long)
        for row, (source, target) in enumerate(pairs):
            src = list(source.encode())[:self.capacity]
            out = (list(target.encode()) + [self.eos_id])[:length - S + 1]
            if src:
                tokens[row, S - 1 - len(src):S - 1] = torch.tensor(src)
            tokens[row, S - 1] = self.sep_id
            tokens[row, S:S + len(out) - 1] = torch.tensor(out[:-1], dtype=torch.long)
            targets[row, S - 1:S - 1 + len(out)] = torch.tensor(out, dtype=torch.long)
        return _TagRows(tokens, targets)  # rows of (tokens, targets), as tagging's

    def detokenize(self, ids: Sequence[int]) -> str:
        """The text of token ids up to the first EOS (specials dropped), UTF-8 decoded leniently."""
        out = bytearray()
        for i in ids:
            if int(i) == self.eos_id:
                break
            if int(i) < self.BYTES:
                out.append(int(i))
        return out.decode("utf-8", errors="replace")


def random_segments(n: int, k: int, g: torch.Generator) -> list[int]:
    """``n`` items cut into ``k`` non-empty segments at random: their lengths (T5's
    ``random_spans_noise_mask`` partition)."""
    cuts = (torch.randperm(n - 1, generator=g)[:k - 1] + 1).sort().values.tolist()
    return [b - a for a, b in zip([0, *cuts], [*cuts, n])]


#: T5's span corruption: 15 % of the tokens, in spans of mean length 3 (Raffel et al. 2020, §3.3.4)
NOISE_DENSITY, MEAN_SPAN = 0.15, 3.0


class SpanCorruption(Seq2SeqTask):
    """T5's pretraining objective (Raffel et al. 2020, §3.1.4, Fig. 2; "span corruption", §3.3.4)
    over the bytes of a text corpus (``task.path``, or ``task=lm``'s default corpus): in each window
    ``noise_density`` of the bytes, in spans of mean length ``mean_span``, are each replaced by a
    sentinel; the target is every sentinel followed by the bytes it replaced. The window's length is
    the most that fits the row with its sentinels, SEP and EOS. The corpus is split by position: its
    first 90 % trains, the next 5 % validates, the last 5 % tests (windows and spans of the held-out
    splits are fixed: the same for every seed).

    Its ids are the byte codec's (:meth:`codec`: bytes, then PAD, CLS, SEP, MASK at that codec's ids)
    followed by EOS and the sentinels, so the downstream tasks' ids (bytes and specials) are rows of
    the pretrained embedding, as after ``task=lm`` or ``task=mlm`` with special tokens."""

    name = "span_corruption"
    min_len = 16
    layout_note = "a row holds a window of bytes with its spans replaced by sentinels, SEP, the spans and EOS"
    N_SENTINELS = 64
    BYTES = 256

    def __init__(self, seq_len: int = 64, eval_lengths: Sequence[int] = (), batch_size: int = 32,
                 causal: bool = True, n_test: int = 256, n_val: int = 128, path: str | None = None,
                 noise_density: Annotated[float, Range(low=0.01, high=0.5)] = NOISE_DENSITY,
                 mean_span: Annotated[float, Range(low=1.0)] = MEAN_SPAN, max_decode: int | None = None):
        self.noise_density, self.mean_span, self.path = float(noise_density), float(mean_span), path
        SyntheticTask.__init__(self, seq_len, eval_lengths, batch_size, causal, n_test, n_val)
        shared = self.codec()
        self.pad_id, self.sep_id = shared.pad_id, shared.sep_id
        self.eos_id = shared.vocab_size
        self.sentinel_id = self.eos_id + 1
        self.vocab_size = self.n_classes = self.sentinel_id + self.N_SENTINELS
        self.n_values, self.plus_id, self.max_decode = self.BYTES, None, max_decode
        self.layout = Seq2SeqLayout(self.sep_id, self.eos_id, {T: self.source_len(T) for T in self.test_lengths})

    def codec(self) -> TextCodec:
        """The vocabulary this task shares with downstream tasks (bytes with the specials; ``TextCodec``)."""
        return TextCodec.of("bytes")

    @classmethod
    def _spans(cls, window: int, noise_density: float, mean_span: float) -> tuple[int, int]:
        noise = max(1, round(window * noise_density))
        return noise, min(cls.N_SENTINELS, max(1, round(noise / mean_span)), noise, window - noise)

    @classmethod
    def _window(cls, length: int, noise_density: float, mean_span: float) -> int:
        for w in range(length - 2, 1, -1):
            noise, k = cls._spans(w, noise_density, mean_span)
            if (w - noise + k) + 1 + (noise + k) + 1 <= length:
                return w
        raise ValueError(f"task.seq_len={length} is too short for span corruption")

    def spans(self, window: int) -> tuple[int, int]:
        """(noise bytes, spans) of a window of ``window`` bytes."""
        return self._spans(window, self.noise_density, self.mean_span)

    def window(self, length: int) -> int:
        """The longest window whose corrupted source, SEP, target and EOS fit a row of ``length``."""
        return self._window(length, self.noise_density, self.mean_span)

    def source_len(self, length: int) -> int:
        w = self.window(length)
        noise, k = self.spans(w)
        return w - noise + k + 1

    @classmethod
    def longest_target(cls, length: int, settings: Mapping[str, Any] | None = None) -> int:
        """Every row's target: the spans of the longest window that fits, their sentinels and EOS."""
        settings = settings or {}
        density, mean = settings.get("noise_density", NOISE_DENSITY), settings.get("mean_span", MEAN_SPAN)
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (density, mean)):
            density, mean = NOISE_DENSITY, MEAN_SPAN  # their types are named by the settings check
        noise, k = cls._spans(cls._window(length, density, mean), density, mean)
        return noise + k + 1

    def _setup(self) -> None:
        from .text import read_corpus

        data = torch.frombuffer(bytearray(read_corpus(self.path)), dtype=torch.uint8).long()
        n = len(data)
        self._splits = {"train": data[:int(n * 0.9)], "validation": data[int(n * 0.9):int(n * 0.95)],
                        "test": data[int(n * 0.95):]}

    def train_batches(self, seed: int, rank: int = 0) -> Iterator[Batch]:
        self.setup()
        g = train_generator(self.name, seed, rank)
        while True:
            yield self.lay_out(self.corrupted(self._splits["train"], g, self.batch_size, self.seq_len), self.seq_len)

    def eval_batches(self, length: int, split: str = "test") -> list[Batch]:
        self.setup()
        g, left, out = held_out_generator(self.name, length, split), self.n_test if split == "test" else self.n_val, []
        while left > 0:
            b = min(self.batch_size, left)
            out.append(self.lay_out(self.corrupted(self._splits[split], g, b, length), length))
            left -= b
        return out

    def corrupted(self, text: torch.Tensor, g: torch.Generator, batch: int, length: int) -> list[tuple[list[int], list[int]]]:
        """``batch`` windows of ``text`` drawn with ``g``, each as (corrupted source, spans target)."""
        w = self.window(length)
        noise, k = self.spans(w)
        starts = torch.randint(0, max(1, len(text) - w), (batch,), generator=g).tolist()
        out = []
        for start in starts:
            window = text[start:start + w].tolist()
            noisy, kept = random_segments(noise, k, g), random_segments(w - noise, k, g)
            source, target, at = [], [], 0
            for i, (keep, drop) in enumerate(zip(kept, noisy)):  # kept bytes, then a span (T5 starts with kept)
                source += window[at:at + keep] + [self.sentinel_id + i]
                target += [self.sentinel_id + i] + window[at + keep:at + keep + drop]
                at += keep + drop
            out.append((source, target))
        return out

    def detokenize(self, ids: Sequence[int]) -> str:
        """Bytes as text (``\\xNN`` where not printable ASCII), each sentinel as ``<k>``, up to EOS; the
        other specials (PAD, CLS, SEP, MASK) as nothing."""
        out = []
        for i in map(int, ids):
            if i == self.eos_id:
                break
            out.append(chr(i) if 32 <= i < 127 else f"\\x{i:02x}" if i < self.BYTES
                       else f"<{i - self.sentinel_id}>" if i >= self.sentinel_id else "")
        return "".join(out)
