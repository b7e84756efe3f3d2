"""The vocabulary a pretraining and its downstream tasks share: a tokenizer plus special tokens.

Pretrain-then-fine-tune needs one vocabulary from the first step: the downstream tasks encode
their text with the pretraining tokenizer, and the special tokens they need (CLS, SEP, PAD) and
masked-LM's MASK must exist in the pretrained embedding. So the specials are appended after the
tokenizer's own vocabulary, in the order of :data:`SPECIALS`, and only when masked LM or a
fine-tune stage asks for them (a plain causal LM keeps its vocabulary and parameter count):

    bytes:           ids 0-255 the UTF-8 bytes, then PAD 256, CLS 257, SEP 258, MASK 259
    bpe / json:      ids 0..V-1 the tokenizer's, then PAD V, CLS V+1, SEP V+2, MASK V+3

PAD, CLS and SEP keep the ids of ``task=classify``'s byte vocabulary (256, 257, 258).
A :class:`TextCodec` is plain data (picklable, comparable): ``fingerprint`` names the vocabulary,
so a fine-tune can refuse a downstream task whose vocabulary is not the pretraining one.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

#: appended after the tokenizer's vocabulary, in this order
SPECIALS: tuple[str, ...] = ("[PAD]", "[CLS]", "[SEP]", "[MASK]")


@dataclass(frozen=True)
class TextCodec:
    """A tokenizer (``"bytes"``, or the path of a Hugging Face ``tokenizer.json``: a trained
    BPE's is its token cache entry's) and whether :data:`SPECIALS` follow its ``base_vocab`` ids."""

    tokenizer: str = "bytes"
    base_vocab: int = 256
    specials: bool = True

    @classmethod
    def of(cls, tokenizer: str = "bytes", specials: bool = True) -> "TextCodec":
        """The codec of ``tokenizer`` (bytes or a tokenizer.json path), its size read from the file."""
        if tokenizer == "bytes":
            return cls("bytes", 256, specials)
        from .encoders import tokenizer_vocab_size

        path = str(Path(tokenizer).expanduser())
        return cls(path, tokenizer_vocab_size(path), specials)

    @property
    def vocab_size(self) -> int:
        return self.base_vocab + (len(SPECIALS) if self.specials else 0)

    def special_id(self, name: str) -> int:
        if not self.specials:
            raise ValueError(f"this vocabulary ({self.describe()}) has no special tokens")
        return self.base_vocab + SPECIALS.index(name)

    @property
    def pad_id(self) -> int:
        return self.special_id("[PAD]")

    @property
    def cls_id(self) -> int:
        return self.special_id("[CLS]")

    @property
    def sep_id(self) -> int:
        return self.special_id("[SEP]")

    @property
    def mask_id(self) -> int:
        return self.special_id("[MASK]")

    @cached_property
    def _tokenizer(self) -> Any:
        from .encoders import load_tokenizer

        return load_tokenizer(self.tokenizer)

    def encode(self, text: str) -> list[int]:
        """The ids of ``text`` (no specials added)."""
        if self.tokenizer == "bytes":
            return list(text.encode("utf-8"))
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def encode_with_offsets(self, text: str, limit: int | None = None) -> tuple[list[int], list[tuple[int, int]]]:
        """The ids of ``text`` (as :meth:`encode`), the first ``limit`` of them (None: all), and each
        one's character span ``(start, end)`` in ``text`` (a byte's: the character it belongs to), so a
        tagging task can label the first piece of each word."""
        if self.tokenizer == "bytes":
            text = text if limit is None else text[:limit]  # a character is at least one byte
            if text.isascii():
                ids, offsets = list(text.encode("ascii")), [(i, i + 1) for i in range(len(text))]
            else:
                ids, offsets = [], []
                for i, ch in enumerate(text):
                    b = ch.encode("utf-8")
                    ids += b
                    offsets += [(i, i + 1)] * len(b)
        else:
            encoding = self._tokenizer.encode(text, add_special_tokens=False)
            ids, offsets = list(encoding.ids), [tuple(o) for o in encoding.offsets]
        return ids[:limit], offsets[:limit]

    @cached_property
    def fingerprint(self) -> str:
        """Names the vocabulary: the tokenizer's content (not its path), its size, the specials."""
        if self.tokenizer == "bytes":
            what = "bytes"
        else:
            what = "json:" + hashlib.sha256(Path(self.tokenizer).read_bytes()).hexdigest()[:16]
        return f"{what}/{self.base_vocab}{'+specials' if self.specials else ''}"

    def describe(self) -> str:
        name = "bytes" if self.tokenizer == "bytes" else f"tokenizer {self.tokenizer}"
        extra = f" + {len(SPECIALS)} specials" if self.specials else ""
        return f"{name} ({self.base_vocab} ids{extra})"

    def __getstate__(self) -> dict:  # the loaded tokenizer is not pickled; it reloads on use
        return {k: getattr(self, k) for k in ("tokenizer", "base_vocab", "specials")}

    def __setstate__(self, state: dict) -> None:
        for k, v in state.items():
            object.__setattr__(self, k, v)


def task_tokenizer_problems(tokenizer: Any) -> list[str]:
    """Why ``tokenizer`` cannot be a downstream task's ``task.tokenizer`` (``bytes``, or the path of a
    tokenizer.json: the pretraining's), one line naming the valid values; empty when it can."""
    from .tokens import tokenizer_problem

    valid = "valid: bytes, or the path of a tokenizer.json (the pretraining's)"
    if tokenizer == "bytes":
        return []
    if tokenizer == "bpe":
        return [f"task.tokenizer='bpe' would train a new BPE, whose ids no pretrained model knows; {valid}"]
    if not (isinstance(tokenizer, str) and tokenizer and Path(tokenizer).expanduser().is_file()):
        return [f"task.tokenizer={tokenizer!r} is not a tokenizer file; {valid}"]
    problem = tokenizer_problem(tokenizer)  # a file that does not load
    return [problem] if problem else []
