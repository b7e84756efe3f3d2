"""Tokenizers for ``task=lm`` and the encoders that turn a corpus into token ids.

* ``bpe``: byte-level BPE (Sennrich et al., 2016, "Neural Machine Translation of Rare Words with
  Subword Units"; over bytes as in GPT-2, Radford et al., 2019) trained with Hugging Face
  ``tokenizers`` (:func:`train_bpe`). Its pre-tokenizer (:data:`PRE_TOKENIZER_PATTERN`) is GPT-2's
  regex over ASCII classes, every non-ASCII character counting as a letter and digits grouped by
  at most three (as GPT-4's ``cl100k``): a closed set of word shapes that this module also splits
  with NumPy (:func:`word_starts`), so a corpus is encoded one distinct word at a time
  (:class:`WordEncoder`) at tens of MB/s, with ids equal to ``tokenizers``' own ``encode``.
* any other ``tokenizer.json``: :class:`TokenizerEncoder`, ``tokenizers``' own
  ``encode_batch_fast`` over pieces of about 1 MiB cut where the pre-tokenizer splits anyway
  (:func:`pieces`), unless its pre-tokenizer is this module's (:func:`uses_word_encoder`).

:func:`encode_stream` writes a stream of bytes as ids; :func:`byte_lengths` gives the UTF-8 bytes
each id of a byte-level BPE stands for. The corpus, the cache and the token files are
:mod:`ablate.data.tokens`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator

import numpy as np

#: bytes read at a time while hashing, copying and encoding
BLOCK = 1 << 20
#: the most distinct words :class:`WordEncoder` remembers before starting over (bounds memory)
MAX_WORDS = 1 << 18


# Character classes of the pre-tokenizer. LETTER includes every non-ASCII character (so a UTF-8
# sequence is never split); OTHER is ASCII punctuation and control characters.
_LETTER = r"[^\x00-\x40\x5B-\x60\x7B-\x7F]"
_DIGIT = r"[0-9]"
_OTHER = r"[\x00-\x08\x0E-\x1F!-/:-@\[-`{-\x7F]"
_SPACE = r"[\t-\r ]"
#: the longest word of the pre-tokenizer, in characters: a longer run of one class (minified code,
#: DNA, CJK without spaces) is cut into words of this many characters, because BPE training is
#: quadratic in a word's length (a 1 MB word would not finish) and no token is this long anyway
MAX_WORD_CHARS = 64
_W = f"{{1,{MAX_WORD_CHARS}}}"
#: the ``bpe`` pre-tokenizer: GPT-2's split (a word takes one leading space; a run of spaces keeps
#: its last one for the next word) over the classes above, digits in groups of at most 3, other
#: runs in words of at most MAX_WORD_CHARS characters. The same text is an Oniguruma regex
#: (``tokenizers``) and a Python ``re`` pattern (the fallback).
PRE_TOKENIZER_PATTERN = (rf" ?{_LETTER}{_W}|{_DIGIT}{{1,3}}| ?{_OTHER}{_W}|"
                         rf"{_SPACE}{_W}(?![^\t-\r ])|{_SPACE}{_W}")

_L, _D, _O, _S = 0, 1, 2, 3
_CLASS = np.full(256, _L, np.uint8)  # bytes >= 0x80 are letters
_CLASS[[c for c in range(128) if not chr(c).isalpha()]] = _O
_CLASS[ord("0"):ord("9") + 1] = _D
_CLASS[[9, 10, 11, 12, 13, 32]] = _S


# ---------------------------------------------------------------------------- tokenizers
def pre_tokenizer():
    from tokenizers import Regex, pre_tokenizers

    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRE_TOKENIZER_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def train_bpe(texts: Iterable[str], vocab_size: int):
    """A byte-level BPE ``tokenizers.Tokenizer`` trained on ``texts`` with at most ``vocab_size``
    tokens: the 256 bytes, then merges (fewer when the text has no more pairs to merge)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    return tok


def load_tokenizer(path: str | os.PathLike):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(Path(path).expanduser()))


def tokenizer_vocab_size(path: str | os.PathLike) -> int:
    return int(load_tokenizer(path).get_vocab_size(with_added_tokens=True))


def uses_word_encoder(tok) -> bool:
    """Whether ``tok`` splits text exactly as :class:`WordEncoder` does (a byte-level BPE with this
    module's pre-tokenizer, no normalizer, no added tokens)."""
    spec = json.loads(tok.to_str())
    ours = json.loads(_pre_tokenizer_json())
    return (spec.get("pre_tokenizer") == ours and spec.get("normalizer") is None
            and (spec.get("model") or {}).get("type") == "BPE" and not spec.get("added_tokens"))


def _pre_tokenizer_json() -> str:
    from tokenizers import Tokenizer, models

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer()
    return json.dumps(json.loads(tok.to_str())["pre_tokenizer"])


# ---------------------------------------------------------------------------- encoders
def encode_batch(tok: Any, texts: list[str]) -> list:
    """``tok``'s encodings of ``texts`` (in parallel; without offsets where the version can)."""
    fast = getattr(tok, "encode_batch_fast", None)  # tokenizers >= 0.20
    return (fast or tok.encode_batch)(texts, add_special_tokens=False)


def safe_cut(data: bytes) -> int:
    """The last position ``p`` of ``data`` where the pre-tokenizer splits whatever follows (so
    text encoded in pieces cut there is encoded as a whole would be), or 0 if none: after a newline
    that neither follows nor precedes another space, or between two non-space characters of
    different classes."""
    for lo in (max(0, len(data) - (1 << 16)), 0):
        a = np.frombuffer(data, np.uint8, offset=lo)
        if len(a) < 3:
            continue
        c = _CLASS[a]
        left2, left, right = c[:-2], a[1:-1], c[2:]
        nl = (left == 10) & (left2 != _S) & (right != _S)
        change = (c[1:-1] != _S) & (right != _S) & (c[1:-1] != right)
        hit = np.flatnonzero(nl | change)
        if len(hit):
            return lo + int(hit[-1]) + 2
        if lo == 0:
            break
    return 0


def pieces(blocks: Iterable[bytes], size: int = BLOCK, limit: int = 16 * BLOCK) -> Iterator[bytes]:
    """The stream ``blocks`` re-cut into pieces of about ``size`` bytes at :func:`safe_cut` points
    (or, after ``limit`` bytes without one, at a character boundary: the only place encoding in
    pieces may differ from encoding the whole)."""
    buf = b""
    for data in blocks:
        buf += data
        if len(buf) < size:
            continue
        cut = safe_cut(buf)
        if not cut and len(buf) >= limit:
            cut = len(buf) - 4
            while cut > 0 and 0x80 <= buf[cut] < 0xC0:
                cut -= 1
        if cut:
            yield buf[:cut]
            buf = buf[cut:]
    if buf:
        yield buf


def word_starts(a: np.ndarray) -> np.ndarray:
    """Where the pre-tokenizer's words begin in the bytes ``a`` (:data:`PRE_TOKENIZER_PATTERN`,
    vectorised): class runs, digit runs cut every 3, other runs every MAX_WORD_CHARS characters
    (UTF-8 continuation bytes are not characters), and a run of spaces whose last character is
    ``' '`` before a letter or punctuation gives it to that word (a longer run also keeps all but
    its last character together)."""
    n = len(a)
    if n == 0:
        return np.zeros(0, np.int64)
    c = _CLASS[a]
    st = np.empty(n, bool)
    st[0] = True
    np.not_equal(c[1:], c[:-1], out=st[1:])
    rs = np.flatnonzero(st)  # runs of one class
    rc = c[rs]
    ends = np.empty_like(rs)
    ends[:-1], ends[-1] = rs[1:], n
    digits = np.flatnonzero(rc == _D)
    long_digits = digits[ends[digits] - rs[digits] > 3]
    if len(long_digits):
        ds, dl = rs[long_digits], ends[long_digits] - rs[long_digits]
        k = (dl - 1) // 3  # extra starts in each run
        step = np.arange(int(k.sum())) - np.repeat(np.cumsum(k) - k, k) + 1
        st[np.repeat(ds, k) + 3 * step] = True
    long_runs = np.flatnonzero((rc != _D) & (ends - rs > MAX_WORD_CHARS))
    for r in long_runs:  # rare: one vectorised cut per run longer than a word
        lo, hi = int(rs[r]), int(ends[r])
        chars = lo + np.flatnonzero((a[lo:hi] < 0x80) | (a[lo:hi] >= 0xC0))  # where each character starts
        st[chars[MAX_WORD_CHARS::MAX_WORD_CHARS]] = True
    sp = np.flatnonzero(rc[:-1] == _S)  # runs of spaces with a run after them
    ss, se = rs[sp], rs[sp + 1]
    attach = (a[se - 1] == 0x20) & (rc[sp + 1] != _D)
    st[(se - 1)[attach | (se - ss >= 2)]] = True
    st[se[attach]] = False
    return np.flatnonzero(st)


class _Grow:
    """A growable 1-D NumPy array."""

    def __init__(self, dtype: Any):
        self.data, self.n = np.zeros(1024, dtype), 0

    def extend(self, values: np.ndarray) -> None:
        need = self.n + len(values)
        if need > len(self.data):
            new = np.zeros(max(need, 2 * len(self.data)), self.data.dtype)
            new[:self.n] = self.data[:self.n]
            self.data = new
        self.data[self.n:need] = values
        self.n = need

    @property
    def view(self) -> np.ndarray:
        return self.data[:self.n]


class WordEncoder:
    """Encodes text split by :data:`PRE_TOKENIZER_PATTERN` one distinct word at a time.

    The words of a piece are found with NumPy (:func:`word_starts`) and each gets a 128-bit key:
    its bytes themselves when it has at most 15 (with its length; exact), else a 64-bit hash of
    its bytes and its length. Keys are looked up in a table of the words seen so far; the
    ``tokenizers`` model encodes each new word once and the piece's ids are gathered from the
    table. Exact: a hashed word is compared byte for byte with the table's word of the same key
    (a collision sends the piece through :meth:`encode_exact`). The table holds at most
    ``max_words`` words (:data:`MAX_WORDS`; then it starts over), so memory stays bounded.
    """

    _MULT = np.uint64(0x9E3779B97F4A7C15)
    _MIX = np.uint64(0xD6E8FEB86659FD93)
    _SHORT = 15  # longest word keyed by its bytes
    _LONG = np.uint64(0xFF << 56)  # top byte of a hashed word's second key half
    _SLOT_BITS = 20

    def __init__(self, tokenizer: Any, dtype: Any = np.uint32, max_words: int = MAX_WORDS):
        self.tok, self.dtype, self.max_words = tokenizer, np.dtype(dtype), max_words
        pw = np.full(4096, self._MULT, np.uint64)
        pw[0] = 1
        self._pow = np.cumprod(pw)  # overflow wraps: arithmetic mod 2**64
        self._mask = (np.arange(16)[None, :] < np.arange(17)[:, None]).astype(np.uint8) * np.uint8(255)
        self.collisions = 0
        self._reset()

    def _reset(self) -> None:
        self.n_words = 0
        size = 1 << self._SLOT_BITS
        self.slot_k0, self.slot_k1 = np.zeros(size, np.uint64), np.zeros(size, np.uint64)
        self.slot_row = np.full(size, -1, np.int32)
        self.overflow: dict[tuple[int, int], int] = {}  # words whose slot was taken
        self.text, self.text_off, self.text_len = _Grow(np.uint8), _Grow(np.int64), _Grow(np.int64)
        self.ids, self.ids_off, self.ids_len = _Grow(np.uint32), _Grow(np.int64), _Grow(np.int64)

    def _slots(self, k0: np.ndarray, k1: np.ndarray) -> np.ndarray:
        return ((k0 * self._MULT) ^ (k1 * self._MIX)) >> np.uint64(64 - self._SLOT_BITS)

    def _add(self, words: list[bytes], k0: np.ndarray, k1: np.ndarray) -> np.ndarray:
        """Put new ``words`` (keys ``k0``, ``k1``) into the table; their rows."""
        encs = encode_batch(self.tok, [w.decode("utf-8", "replace") for w in words])
        ids = [e.ids for e in encs]
        lens = np.fromiter(map(len, ids), np.int64, len(ids))
        self.ids_off.extend(self.ids.n + np.cumsum(lens) - lens)
        self.ids_len.extend(lens)
        self.ids.extend(np.fromiter((i for row in ids for i in row), np.uint32, int(lens.sum())))
        lens = np.fromiter(map(len, words), np.int64, len(words))
        self.text_off.extend(self.text.n + np.cumsum(lens) - lens)
        self.text_len.extend(lens)
        self.text.extend(np.frombuffer(b"".join(words), np.uint8))
        rows = np.arange(self.n_words, self.n_words + len(words))
        self.n_words += len(words)
        slots = self._slots(k0, k1)
        _, first = np.unique(slots, return_index=True)
        free = first[self.slot_row[slots[first]] < 0]
        self.slot_k0[slots[free]], self.slot_k1[slots[free]] = k0[free], k1[free]
        self.slot_row[slots[free]] = rows[free]
        placed = np.zeros(len(words), bool)
        placed[free] = True
        for i in np.flatnonzero(~placed).tolist():
            self.overflow[(int(k0[i]), int(k1[i]))] = int(rows[i])
        return rows

    def encode(self, data: bytes) -> np.ndarray:
        """The ids of ``data`` (bytes cut at a :func:`safe_cut` point or the end of the text)."""
        return self.look_up(self.split(data))

    def split(self, data: bytes) -> tuple:
        """The words of ``data`` and their keys: the part of :meth:`encode` that needs no table
        (so another thread may run it for the next piece)."""
        if not data:
            return (data,)
        a = np.frombuffer(data, np.uint8)
        n = len(a)
        starts = word_starts(a)
        lens = np.diff(starts, append=n)
        # keys: the first 16 bytes of each word, masked to its length ...
        padded = np.zeros(n + 16, np.uint8)
        padded[:n] = a
        window = np.lib.stride_tricks.as_strided(padded, shape=(n, 16), strides=(1, 1), writeable=False)
        w = window[starts] & self._mask[np.minimum(lens, 16)]
        k = w.view(np.uint64)
        k0, k1 = k[:, 0].copy(), k[:, 1] | (lens.astype(np.uint64) << np.uint64(56))
        # ... or, for a longer word, a hash of all its bytes
        long_ = np.flatnonzero(lens > self._SHORT)
        if len(long_):
            ls, ll = starts[long_], lens[long_]
            j = np.arange(int(ll.sum())) - np.repeat(np.cumsum(ll) - ll, ll)
            at = np.repeat(ls, ll) + j
            h = np.add.reduceat(a[at].astype(np.uint64) * self._pow[np.minimum(j, len(self._pow) - 1)],
                                np.cumsum(ll) - ll)
            k0[long_] = h
            k1[long_] = self._LONG | ll.astype(np.uint64)
        else:
            ll = j = at = None
        return data, a, starts, lens, k0, k1, long_, ll, j, at

    def look_up(self, parts: tuple) -> np.ndarray:
        """The ids of a piece from its :meth:`split`."""
        if len(parts) == 1:
            return np.zeros(0, self.dtype)
        data, a, starts, lens, k0, k1, long_, ll, j, at = parts
        if self.n_words > self.max_words:
            self._reset()
        slots = self._slots(k0, k1)
        rows = self.slot_row[slots].astype(np.int64)
        rows[(self.slot_k0[slots] != k0) | (self.slot_k1[slots] != k1)] = -1
        missing = np.flatnonzero(rows < 0)
        if len(missing):
            mixed = slots[missing] ^ k0[missing]  # one number per key, to group equal keys
            _, first, inverse = np.unique(mixed, return_index=True, return_inverse=True)
            first_of = missing[first][inverse.reshape(-1)]
            if not (np.array_equal(k0[first_of], k0[missing]) and np.array_equal(k1[first_of], k1[missing])):
                self.collisions += 1
                return self.encode_exact(data)
            distinct = missing[first]
            found = np.array([self.overflow.get(key, -1) for key in zip(k0[distinct].tolist(), k1[distinct].tolist())],
                             np.int64)
            new = np.flatnonzero(found < 0)
            if len(new):
                idx = distinct[new]
                words = [data[s:s + m] for s, m in zip(starts[idx].tolist(), lens[idx].tolist())]
                found[new] = self._add(words, k0[idx], k1[idx])
            rows[missing] = found[inverse.reshape(-1)]
        # a hashed word must be the table's word of its key, byte for byte
        if len(long_):
            lr = rows[long_]
            if not np.array_equal(self.text_len.view[lr], ll) or not np.array_equal(
                    self.text.view[np.repeat(self.text_off.view[lr], ll) + j], a[at]):
                self.collisions += 1
                return self.encode_exact(data)
        lens = self.ids_len.view[rows]
        out_start = np.cumsum(lens) - lens
        pos = np.arange(int(lens.sum())) - np.repeat(out_start - self.ids_off.view[rows], lens)
        return self.ids.view[pos].astype(self.dtype, copy=False)

    def encode_exact(self, data: bytes) -> np.ndarray:
        """Slow and simple: the same ids, splitting with Python's ``re`` and encoding every
        distinct word with ``tokenizers``."""
        import re

        words = re.findall(PRE_TOKENIZER_PATTERN, data.decode("utf-8", "replace"))  # characters, not bytes
        distinct = list(dict.fromkeys(words))
        encs = encode_batch(self.tok, distinct)
        table = {w: e.ids for w, e in zip(distinct, encs)}
        return np.fromiter((i for w in words for i in table[w]), self.dtype)


class TokenizerEncoder:
    """Any ``tokenizers.Tokenizer``, through its own ``encode_batch_fast`` (parallel over the
    newline-cut parts of a piece)."""

    def __init__(self, tokenizer: Any, dtype: Any):
        self.tok, self.dtype = tokenizer, np.dtype(dtype)

    def encode(self, data: bytes) -> np.ndarray:
        parts, lo = [], 0
        step = max(1, len(data) // 8)
        while lo < len(data):
            cut = data.find(b"\n", lo + step)
            hi = len(data) if cut < 0 else cut + 1
            parts.append(data[lo:hi].decode("utf-8", "replace"))
            lo = hi
        encs = encode_batch(self.tok, parts)
        return np.fromiter((i for e in encs for i in e.ids), self.dtype)


def encode_stream(encoder: Any, blocks: Iterable[bytes], out: BinaryIO) -> int:
    """Encode ``blocks`` piece by piece into ``out``; the number of ids written. A
    :class:`WordEncoder` splits the next piece in a second thread while it looks up this one
    (NumPy releases the GIL), holding at most two pieces."""
    n = 0
    if not isinstance(encoder, WordEncoder):
        for piece in pieces(blocks):
            ids = encoder.encode(piece)
            out.write(ids.tobytes())
            n += len(ids)
        return n
    from concurrent.futures import ThreadPoolExecutor

    stream = pieces(blocks)
    with ThreadPoolExecutor(max_workers=1) as pool:
        def ahead():
            piece = next(stream, None)
            return None if piece is None else encoder.split(piece)

        nxt = pool.submit(ahead)
        while True:
            parts = nxt.result()
            if parts is None:
                return n
            nxt = pool.submit(ahead)
            ids = encoder.look_up(parts)
            out.write(ids.tobytes())
            n += len(ids)


# ---------------------------------------------------------------------------- bytes of tokens
def byte_lengths(tok: Any) -> np.ndarray | None:
    """The UTF-8 bytes each id of ``tok`` stands for (an array indexed by id), when ``tok`` is a
    byte-level BPE (its decoder is ``ByteLevel``: every character of a token is one byte, GPT-2's
    byte-to-character map), so the bytes of any run of ids are the sum of their entries, exactly;
    an added token counts the UTF-8 bytes of its text. None for any other tokenizer."""
    spec = json.loads(tok.to_str())
    if (spec.get("model") or {}).get("type") != "BPE" or (spec.get("decoder") or {}).get("type") != "ByteLevel":
        return None
    from tokenizers import pre_tokenizers

    alphabet = set(pre_tokenizers.ByteLevel.alphabet())
    added = {a["content"] for a in spec.get("added_tokens") or []}
    vocab = tok.get_vocab(with_added_tokens=True)
    out = np.zeros(max(vocab.values(), default=-1) + 1, np.int64)
    for text, i in vocab.items():
        whole = text in added or not set(text) <= alphabet
        out[i] = len(text.encode("utf-8")) if whole else len(text)
    return out
