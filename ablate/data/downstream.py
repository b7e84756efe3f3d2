"""The offline downstream suite: GLUE-style tasks for fine-tuning a model pretrained on the
built-in corpus (``task=lm`` or ``task=mlm`` with ``task.path`` null), built at run time from the
source of standard-library modules the corpus leaves out (:mod:`ablate.data.pysource`), so nothing
is downloaded and no example was read in pretraining. The suite is one task of each kind GLUE has,
each one masked-LM pretraining helps at CPU scale (tests/test_downstream.py): py_module (one
sentence), py_continues (a pair), py_tokens (tags). py_docstring, a second pair task, is kept for
larger models: at this scale pretraining shows no gain on it.

py_module (single-sentence classification, metric accuracy)
    A function's code → the package of its module, one of :data:`MODULE_GROUPS` (6 classes:
    asyncio, email, http, multiprocessing, unittest, xml). Each split is balanced: every class
    keeps as many functions as the split's smallest class (the first of a fixed permutation).
py_docstring (sentence-pair classification, metric accuracy)
    (a docstring, its function's code without it). ``label: package`` (default): → the package, as
    py_module, balanced the same way; the docstring's words add to the code's. ``label: match``:
    → 1 when the docstring is that function's, else 0; every function gives two examples, its
    docstring with its own code (1) and with the code of the next function of a fixed cycle through
    its split (0), so neither text alone tells the label, only the pair does. A docstring that
    several functions share is read once (the first), so it is in one split only.
py_continues (sentence-pair classification, metric accuracy)
    (code before a cut, code after a cut) → 1 when the second continues the first, else 0: BERT's
    next-sentence prediction, inside a function. Each function is cut once (a fixed point in its middle
    half); it gives two examples, its own two sides (1) and its first side with the second side of the
    next function of a fixed cycle through its split (0), so neither side alone tells the label. Each
    side is the ``(length - 3) // 2`` characters next to the cut, so the cut survives truncation.
py_tokens (token tagging, metric token accuracy)
    A function's code → the class ``tokenize`` gives each token (:data:`TOKEN_LABELS`: keyword,
    name, operator, number, string, comment). The first piece of each token is labelled; its
    other pieces, whitespace, CLS, SEP and padding are ``-100`` (BERT's convention).

Splits, the same for every run seed: test is a fixed fifth of the functions (by a checksum of
their code: :attr:`Function.held_out`); validation is ``n_val`` examples' worth of the other
functions, at most a tenth (:func:`ablate.data.base.carve_validation`, by task); train is the rest,
capped at ``n_train`` examples (the first of a fixed permutation; null: all). A task builds its
examples within a split, so no function is in two splits.

Encoding: ``TextCodec.of(task.tokenizer)`` (``bytes``, or a ``tokenizer.json``: the pretraining's),
its specials appended, so ``vocab_size`` and ``pad_id`` are the codec's. Layout as ``task=classify``
(encoder: ``CLS a SEP [b SEP] PAD...``, the label at the CLS; causal: ``a [SEP b] CLS PAD...``, the
label at the CLS), pairs truncated longest-first; a tagged code is the single segment.
"""

from __future__ import annotations

import zlib
from typing import Any, Sequence

import numpy as np
import torch

from .base import EVAL_SEED, IGNORE, N_VAL, _is_int, carve_validation, make_generator
from .files import FileTask
from .formats import _ClassRows, _TagRows, codec_layout
from .pysource import MODULE_GROUPS, TOKEN_LABELS, Function, first_pieces, functions, token_spans
from .vocab import TextCodec, task_tokenizer_problems

#: what every task of the suite needs besides its specials: a CLS and a piece of text (and a SEP)
MIN_SEQ_LEN = 4
#: the classes of py_module and of py_docstring's ``label: package``
GROUPS: tuple[str, ...] = tuple(MODULE_GROUPS)
#: py_docstring's labels: the function's package, or whether the docstring is the function's
LABELS: tuple[str, ...] = ("package", "match")


def balance(task: "SourceTask", functions: list[Function], part: str) -> list[Function]:
    """``functions``, as many of each package as the smallest package has: the first of a fixed order."""
    by_group = {g: [f for f in functions if f.group == g] for g in MODULE_GROUPS}
    k = min(len(members) for members in by_group.values())
    return [f for g, members in by_group.items() for f in task._permuted(members, f"{part}/{g}")[:k]]


class SourceTask(FileTask):
    """What the three tasks share: the codec, the splits of the functions, the caps."""

    #: examples made of one function
    per_function = 1
    #: whether each split keeps as many functions of each package as its smallest package has
    balanced = False

    def __init__(self, seq_len: int = 128, eval_lengths: Sequence[int] = (), batch_size: int = 32,
                 causal: bool = False, n_val: int = N_VAL, tokenizer: str = "bytes", n_train: int | None = None):
        super().__init__(seq_len, eval_lengths, batch_size, causal, n_val)
        problems = task_tokenizer_problems(tokenizer)
        if problems:
            raise ValueError("; ".join(problems))
        self.codec = TextCodec.of(str(tokenizer), specials=True)
        self.vocab_size, self.pad_id = self.codec.vocab_size, self.codec.pad_id
        self.n_train = None if n_train is None else int(n_train)

    # ---- examples -----------------------------------------------------------------------
    def pool(self) -> list[Function]:
        """The functions this task reads."""
        return list(functions())

    def _permuted(self, items: list, what: str) -> list:
        """``items`` in a fixed order of this task's own (no run seed)."""
        order = torch.randperm(len(items), generator=make_generator(EVAL_SEED, self.name, what))
        return [items[i] for i in order.tolist()]

    def _carve_functions(self, functions: list[Function], n_val: int, key: str) -> tuple[list, list]:
        """``functions`` split into (train, validation) by ``carve_validation`` under ``key``."""
        train, val = carve_validation(key, len(functions), n_val)
        return [functions[i] for i in train.tolist()], [functions[i] for i in val.tolist()]

    def split_functions(self) -> dict[str, list[Function]]:
        """``{"train", "validation", "dev"}`` (dev: the test split): this task's functions, split.
        Balanced: validation is carved from each package alike."""
        pool = self.pool()
        rest, test = [f for f in pool if not f.held_out], [f for f in pool if f.held_out]
        n_val = max(1, self.n_val // self.per_function)
        if self.balanced:
            rest, test = balance(self, rest, "train"), balance(self, test, "dev")
            per_group = max(1, n_val // len(GROUPS))
            parts = [self._carve_functions([f for f in rest if f.group == g], per_group, f"{self.name}/{g}")
                     for g in GROUPS]
            train, val = [f for t, _ in parts for f in t], [f for _, v in parts for f in v]
        else:
            train, val = self._carve_functions(rest, n_val, self.name)
        if self.n_train is not None:
            train = self._permuted(train, "n_train")[:max(1, self.n_train // self.per_function)]
        return {"train": train, "validation": val, "dev": test}

    def examples(self, split: str, functions: list[Function]) -> list:
        raise NotImplementedError

    def _setup(self) -> None:
        self._examples = {split: self.examples(split, fs) for split, fs in self.split_functions().items()}

    # ---- checks -------------------------------------------------------------------------
    @classmethod
    def problems(cls, cfg: dict, context: Any = None) -> list[str]:
        out = super().problems(cfg, context)
        extra = cfg.get("eval_lengths") or []
        lengths = [cfg.get("seq_len")] + (list(extra) if isinstance(extra, (list, tuple)) else [])
        if all(_is_int(x) and x > 0 for x in lengths) and min(lengths) < MIN_SEQ_LEN:
            out.append(f"task.seq_len={cfg.get('seq_len')} is too short for {cls.name}: the specials alone "
                       f"take up to 3 positions; use at least {MIN_SEQ_LEN}")
        n_train = cfg.get("n_train")
        if n_train is not None and not (_is_int(n_train) and n_train > 0):
            out.append(f"task.n_train must be a positive integer (at most that many training examples) "
                       f"or null (all), got {n_train!r}")
        return out + task_tokenizer_problems(cfg.get("tokenizer", "bytes"))


class _Classification(SourceTask):
    """Examples ``(segments, label)`` encoded as ``task=classify``'s rows."""

    metric = "accuracy"

    def segments(self, example: Any, length: int) -> Sequence[str]:
        """The texts of ``example`` at ``length`` positions (by default the example's own)."""
        return example

    def _encode(self, split: str, length: int) -> _ClassRows:
        rows = self._examples[split]
        tokens = np.full((len(rows), length), self.pad_id, dtype=np.int64)
        pos = np.zeros(len(rows), dtype=np.int64)
        labels = np.array([label for _, label in rows], dtype=np.int64)
        for i, (example, _) in enumerate(rows):
            texts = self.segments(example, length)
            ids = codec_layout(self.codec, [self.codec.encode(s) for s in texts], length, self.causal)
            tokens[i, :len(ids)] = ids
            pos[i] = len(ids) - 1 if self.causal else 0
        return _ClassRows(torch.from_numpy(tokens), torch.from_numpy(pos), torch.from_numpy(labels))


class PyModule(_Classification):
    """Which package a standard-library function's code comes from (6 classes, balanced)."""

    name = "py_module"
    n_classes = len(MODULE_GROUPS)
    balanced = True

    def examples(self, split: str, functions: list[Function]) -> list:
        return [((f.code,), GROUPS.index(f.group)) for f in functions]


class PyDocstring(_Classification):
    """A docstring and a function's code: the function's package (``label: package``), or whether
    the docstring is that function's (``label: match``)."""

    name = "py_docstring"

    def __init__(self, seq_len: int = 128, eval_lengths: Sequence[int] = (), batch_size: int = 32,
                 causal: bool = False, n_val: int = N_VAL, tokenizer: str = "bytes", n_train: int | None = None,
                 label: str = "package"):
        super().__init__(seq_len, eval_lengths, batch_size, causal, n_val, tokenizer, n_train)
        problems = self._label_problems(label)
        if problems:
            raise ValueError("; ".join(problems))
        self.label = label
        self.n_classes = len(MODULE_GROUPS) if label == "package" else 2
        self.per_function = 1 if label == "package" else 2

    def pool(self) -> list[Function]:
        """The functions with a docstring, the first of each docstring (methods that override
        another often repeat its docstring: it would otherwise be in two splits)."""
        first = {}
        for f in functions():
            if f.docstring:
                first.setdefault(f.docstring, f)
        return list(first.values())

    @property
    def balanced(self) -> bool:
        return self.label == "package"

    def examples(self, split: str, functions: list[Function]) -> list:
        if self.label == "package":
            return [((f.docstring, f.code), GROUPS.index(f.group)) for f in functions]
        cycle = self._permuted(functions, f"pairs/{split}")
        out = []
        for i, f in enumerate(cycle):
            other = cycle[(i + 1) % len(cycle)]
            out += [((f.docstring, f.code), 1), ((f.docstring, other.code), 0)]
        return out

    @staticmethod
    def _label_problems(label: Any) -> list[str]:
        if label in LABELS:
            return []
        return [f"task.label={label!r} is not a py_docstring label; valid: {', '.join(LABELS)}"]

    @classmethod
    def problems(cls, cfg: dict, context: Any = None) -> list[str]:
        return super().problems(cfg, context) + cls._label_problems(cfg.get("label", "package"))


class PyContinues(_Classification):
    """Whether the code after a cut continues the code before it (BERT's next-sentence prediction)."""

    name = "py_continues"
    n_classes = 2
    per_function = 2

    def _cut(self, f: Function) -> int:
        """Where ``f``'s code is cut: a fixed point of its middle half."""
        quarter = len(f.code) // 4
        return quarter + zlib.crc32(f"{self.name}/{f.code}".encode("utf-8")) % (len(f.code) - 2 * quarter + 1)

    def examples(self, split: str, functions: list[Function]) -> list:
        cycle = self._permuted(functions, f"pairs/{split}")
        halves = [(f.code[:cut], f.code[cut:]) for f in cycle for cut in [self._cut(f)]]
        out = []
        for i, (before, after) in enumerate(halves):
            other = halves[(i + 1) % len(halves)][1]
            out += [((before, after), 1), ((before, other), 0)]
        return out

    def segments(self, example: tuple[str, str], length: int) -> tuple[str, str]:
        before, after = example
        width = max(1, (length - 3) // 2)
        return before[-width:], after[:width]


class PyTokens(SourceTask):
    """The class Python's ``tokenize`` gives each token of a function's code (6 labels)."""

    name = "py_tokens"
    n_classes = len(TOKEN_LABELS)

    def examples(self, split: str, functions: list[Function]) -> list:
        return [f.code for f in functions]

    def tagged(self, code: str, length: int) -> tuple[list[int], list[int]]:
        """The ids of ``code`` in the layout at ``length`` and the label of each position."""
        ids, offsets = self.codec.encode_with_offsets(code, length - (1 if self.causal else 2))
        labels = first_pieces(offsets, token_spans(code, offsets[-1][1] if offsets else 0), IGNORE)
        laid = codec_layout(self.codec, [ids], length, self.causal)
        lead = 0 if self.causal else 1
        return laid, [IGNORE] * lead + labels + [IGNORE] * (len(laid) - lead - len(labels))

    def _encode(self, split: str, length: int) -> _TagRows:
        rows = self._examples[split]
        tokens = np.full((len(rows), length), self.pad_id, dtype=np.int64)
        targets = np.full((len(rows), length), IGNORE, dtype=np.int64)
        for i, code in enumerate(rows):
            ids, labels = self.tagged(code, length)
            tokens[i, :len(ids)], targets[i, :len(labels)] = ids, labels
        return _TagRows(torch.from_numpy(tokens), torch.from_numpy(targets))
