"""Tokenized corpora of any size for ``task=lm``: tokenizers, and memory-mapped token files.

A corpus (a text file, a directory of ``*.txt`` files, or the built-in corpus; see
:mod:`ablate.data.text`) is encoded once into a flat file of token ids, read through
``numpy.memmap``: training and held-out windows touch only the pages they read, so a job's memory
does not grow with the corpus. The file follows nanoGPT's ``.bin`` convention (raw ids, no
header): ``uint16`` when the vocabulary fits in 16 bits, else ``uint32`` (``uint8`` for bytes).

Tokenizers (``task.tokenizer``):

* ``bytes``: the UTF-8 bytes, vocabulary 256. A single text file *is* its own token file (mapped
  as it is); a directory or the built-in corpus is concatenated into the cache once.
* ``bpe``: byte-level BPE (Sennrich et al., 2016, "Neural Machine Translation of Rare Words with
  Subword Units"; over bytes as in GPT-2, Radford et al., 2019) trained locally with Hugging Face
  ``tokenizers`` on the first ``task.bpe_sample_mb`` MB of the training part of the text (at most
  its first 80%, so no validation or test text is ever seen), with ``task.vocab_size`` tokens
  (default :data:`DEFAULT_BPE_VOCAB`). Its pre-tokenizer (:data:`PRE_TOKENIZER_PATTERN`) is
  GPT-2's regex over ASCII classes, every non-ASCII character counting as a letter and digits
  grouped by at most three (as GPT-4's ``cl100k``): a closed set of word shapes that this module
  also splits with NumPy, so the corpus is encoded one distinct word at a time
  (:class:`WordEncoder`) at tens of MB/s, with ids equal to ``tokenizers``' own ``encode``.
* a path to a saved Hugging Face ``tokenizer.json``: encoded with ``tokenizers`` itself
  (``encode_batch_fast`` over pieces of about 1 MiB cut after a newline), unless its
  pre-tokenizer is this module's, when :class:`WordEncoder` is used.

A pre-tokenized ``.bin`` (``task.path=x.bin``) is used as it is; see :func:`bin_tokens`.

Cache (``task.cache_dir``, else ``$ABLATE_CACHE_DIR``, else ``~/.cache/ablate/tokens``)::

    <cache>/<label>-<key>/tokens.bin       the ids: training part, then test part
    <cache>/<label>-<key>/tokens.json      what they are (see :class:`Tokens`), a .bin sidecar
    <cache>/<label>-<key>/tokenizer.json   the trained tokenizer (bpe)
    <cache>/<label>-<key>.lock             taken (fcntl.flock) while the entry is built

``label`` is ``bytes``, ``bpe<vocab>`` or ``json``; ``key`` hashes the corpus content (SHA-256 of
its bytes, streamed: equal text in another place or with another mtime is the same entry), the
tokenizer (its settings and the ``tokenizers`` version, or the SHA-256 of a ``tokenizer.json``)
and, for ``bpe`` and ``tokenizer.json``, the byte where the test part starts. An entry is built
in a temporary directory beside it and renamed into place, under the lock: parallel jobs of a
sweep wait for the first and then map its files; an entry, once there, never changes.

Why one module over ~450 lines: the tokenizers and the token-file cache are one pipeline (train,
encode, cache, map) whose pieces share the cache's keys and the pre-tokenizer; split, each half
would reach into the other's internals.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator, Sequence

import numpy as np

log = logging.getLogger(__name__)

#: the named tokenizers; any other value must be a path to a ``tokenizer.json``
TOKENIZERS: tuple[str, ...] = ("bytes", "bpe")
TOKENIZER_CHOICES = "'bytes', 'bpe' or a path to a saved tokenizer.json"
DEFAULT_BPE_VOCAB = 4096
DEFAULT_SAMPLE_MB = 8.0
#: environment variable naming the cache directory (``task.cache_dir`` wins over it)
CACHE_ENV = "ABLATE_CACHE_DIR"
DEFAULT_CACHE_DIR = "~/.cache/ablate/tokens"
#: version of the cache entries' layout and of the encoders: part of every key
FORMAT = 1
#: bytes read at a time while hashing, copying and encoding
BLOCK = 1 << 20
#: the most distinct words :class:`WordEncoder` remembers before starting over (bounds memory)
MAX_WORDS = 1 << 18
#: share of the training part the BPE sample may reach (validation is carved from its end)
SAMPLE_SHARE = 0.8

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

#: encodings (tokenizer runs over a corpus) made by this process; tests read it
ENCODED: list[str] = []


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


# ---------------------------------------------------------------------------- settings
def is_tokenizer_file(value: str) -> bool:
    return value not in TOKENIZERS


def tokenizer_problem(value: Any) -> str | None:
    """Why ``value`` is not a valid ``task.tokenizer``, or None. Reads a tokenizer.json's header."""
    if not isinstance(value, str) or not value:
        return f"task.tokenizer must be {TOKENIZER_CHOICES}, got {value!r}"
    if value in TOKENIZERS:
        return None
    p = Path(value).expanduser()
    if not p.is_file():
        return (f"task.tokenizer={value!r} is not a tokenizer: valid values are {TOKENIZER_CHOICES}"
                + ("" if value.endswith(".json") else " (a file that exists)"))
    try:
        load_tokenizer(p)
    except Exception as error:  # noqa: BLE001 - any failure to load is the user's file
        return f"task.tokenizer={value!r} is not a Hugging Face tokenizer.json ({error})"
    return None


def cache_dir(setting: str | os.PathLike | None = None) -> Path:
    """The token cache: ``setting`` (``task.cache_dir``), else ``$ABLATE_CACHE_DIR``, else
    ``~/.cache/ablate/tokens``."""
    return Path(setting or os.environ.get(CACHE_ENV) or DEFAULT_CACHE_DIR).expanduser()


def token_dtype(vocab_size: int) -> np.dtype:
    """nanoGPT's ``.bin`` convention: uint16 when ids fit in 16 bits, else uint32."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def sidecar(path: str | os.PathLike) -> Path:
    """The JSON beside a ``.bin`` token file: ``x.bin`` -> ``x.json``."""
    return Path(path).expanduser().with_suffix(".json")


def bin_problems(path: str, vocab_size: Any) -> list[str]:
    """Problems of a pre-tokenized ``task.path=x.bin`` (cheap: reads the sidecar only)."""
    p = Path(path).expanduser()
    meta, out = {}, []
    side = sidecar(p)
    if side.is_file():
        try:
            meta = json.loads(side.read_text())
        except ValueError as error:
            return [f"{side}: not JSON ({error})"]
    vocab = vocab_size if vocab_size is not None else meta.get("vocab_size")
    if vocab is None:
        return [f"task.path={path!r} is a token file: set task.vocab_size, or write "
                f"{{\"vocab_size\": N}} into {side.name} beside it"]
    if not (_is_int(vocab) and vocab > 0):
        return [f"task.vocab_size of {path!r} must be a positive integer, got {vocab!r}"]
    dtype = meta.get("dtype", token_dtype(vocab).name)
    if dtype not in ("uint8", "uint16", "uint32"):
        return [f"{side}: dtype must be uint8, uint16 or uint32, got {dtype!r}"]
    size = p.stat().st_size
    if size % np.dtype(dtype).itemsize:
        out.append(f"task.path={path!r} has {size} bytes, not a whole number of {dtype} ids")
    elif size == 0:
        out.append(f"task.path={path!r} is empty: a language model needs tokens to read")
    if vocab > np.iinfo(np.dtype(dtype)).max + 1:
        out.append(f"task.vocab_size={vocab} does not fit the {dtype} ids of {path!r}")
    return out


# ---------------------------------------------------------------------------- the corpus
class Corpus:
    """A text corpus as one byte stream: ``files`` concatenated with a newline between two files.
    Read in blocks, never whole."""

    def __init__(self, files: Sequence[Path]):
        self.files = [Path(f) for f in files]
        self.sizes = [f.stat().st_size for f in self.files]

    @property
    def size(self) -> int:
        return sum(self.sizes) + max(0, len(self.files) - 1)

    def blocks(self, start: int = 0, stop: int | None = None, block: int = BLOCK) -> Iterator[bytes]:
        """The bytes ``[start, stop)`` of the stream, ``block`` bytes at a time (fewer at a file's end)."""
        stop = self.size if stop is None else min(stop, self.size)
        offset = 0
        for i, (f, size) in enumerate(zip(self.files, self.sizes)):
            lo, hi = max(start, offset), min(stop, offset + size)
            if lo < hi:
                with open(f, "rb") as fh:
                    fh.seek(lo - offset)
                    left = hi - lo
                    while left > 0:
                        data = fh.read(min(block, left))
                        if not data:
                            raise ValueError(f"{f} got shorter while it was read")
                        left -= len(data)
                        yield data
            offset += size
            if i < len(self.files) - 1:  # the newline between two files
                if start <= offset < stop:
                    yield b"\n"
                offset += 1
            if offset >= stop:
                return

    def read(self, start: int, stop: int) -> bytes:
        return b"".join(self.blocks(start, stop))

    def sha256(self) -> str:
        h = hashlib.sha256()
        for data in self.blocks():
            h.update(data)
        return h.hexdigest()


def char_boundary(corpus: Corpus, pos: int) -> int:
    """``pos`` moved forward past UTF-8 continuation bytes (so a split never cuts a character)."""
    tail = corpus.read(pos, pos + 4)
    k = 0
    while k < len(tail) and 0x80 <= tail[k] < 0xC0:
        k += 1
    return pos + (k if k < 4 else 0)


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


class TargetBytes:
    """Counts the UTF-8 bytes of the text that rows of token ids stand for (bits per byte divide
    by the bytes of the scored targets). ``lengths``: bytes per id (:func:`byte_lengths`; all ones
    for ``bytes``), exact. Else ``tok``: each row is decoded with ``tok.decode`` and its UTF-8
    bytes counted, exact inside a row but approximate at its ends (a character cut by the window's
    edge decodes as U+FFFD, 3 bytes; a decoder may drop a row's leading space, as a SentencePiece
    ``Metaspace`` does) and wherever a normalizer changed the text before it was encoded."""

    def __init__(self, lengths: np.ndarray | None = None, tok: Any = None):
        self.lengths, self.tok = lengths, tok

    @classmethod
    def of(cls, tokens: Tokens) -> TargetBytes | None:
        """The counter of a token file: ones for ``bytes``; the ``tokenizer.json`` of its cache
        entry otherwise; None when there is none (a ``.bin`` of its own)."""
        if tokens.tokenizer == "bytes":
            return cls(lengths=np.ones(256, np.int64))
        path = Path(tokens.path).parent / "tokenizer.json" if tokens.path else None
        if path is None or not path.is_file():
            return None
        tok = load_tokenizer(path)
        lengths = byte_lengths(tok)
        return cls(lengths=lengths) if lengths is not None else cls(tok=tok)

    def __call__(self, rows: Iterable[np.ndarray]) -> int:
        """The bytes of ``rows`` (1-D arrays of ids; each a run of consecutive tokens)."""
        rows = [np.asarray(r, np.int64) for r in rows]
        if self.lengths is not None:
            return int(sum(self.lengths[r].sum() for r in rows))
        texts = self.tok.decode_batch([r.tolist() for r in rows], skip_special_tokens=False)
        return sum(len(t.encode("utf-8")) for t in texts)


# ---------------------------------------------------------------------------- token files
@dataclass
class Tokens:
    """A token file and what it holds (``tokens.json`` in the cache). ``train_tokens``: where
    the test part starts (ids before it are the training part), or None to split by
    ``val_fraction`` as for bytes. ``bytes_per_token``: UTF-8 bytes per token of the whole test part
    (None when unknown, for a ``.bin`` without it in its sidecar); bits per byte divide by the bytes
    of the scored targets instead (:class:`TargetBytes`)."""

    path: str
    dtype: str
    vocab_size: int
    tokenizer: str
    n_tokens: int
    train_tokens: int | None = None
    bytes_per_token: float | None = None
    test_bytes: int | None = None
    test_tokens: int | None = None
    corpus_sha256: str | None = None
    corpus_bytes: int | None = None
    split_byte: int | None = None
    info: dict = field(default_factory=dict)
    #: whether this call encoded the corpus (False: the file was there, or is the text itself)
    encoded: bool = False
    #: the ids in memory instead of a file (the small built-in corpus under ``bytes``)
    data: np.ndarray | None = field(default=None, repr=False)

    def array(self) -> np.ndarray:
        """The ids, memory-mapped copy-on-write (writable as NumPy and torch want, never written)."""
        if self.data is not None:
            return self.data
        return np.memmap(self.path, dtype=np.dtype(self.dtype), mode="c", shape=(self.n_tokens,))


def bin_tokens(path: str | os.PathLike, vocab_size: int | None) -> Tokens:
    """A pre-tokenized ``.bin`` (raw ids, nanoGPT's layout). Its sidecar ``x.json`` may give
    ``vocab_size`` (else ``task.vocab_size`` must), ``dtype`` (default: uint16 when the
    vocabulary fits, else uint32) and ``bytes_per_token`` (for bits per byte)."""
    p = Path(path).expanduser()
    side = sidecar(p)
    meta = json.loads(side.read_text()) if side.is_file() else {}
    vocab = int(vocab_size if vocab_size is not None else meta["vocab_size"])
    dtype = np.dtype(meta.get("dtype") or token_dtype(vocab))
    bpt = meta.get("bytes_per_token")
    return Tokens(path=str(p), dtype=dtype.name, vocab_size=vocab, tokenizer=str(meta.get("tokenizer", "pre-tokenized")),
                  n_tokens=p.stat().st_size // dtype.itemsize, bytes_per_token=None if bpt is None else float(bpt))


def _entry_key(material: dict) -> str:
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:20]


@contextlib.contextmanager
def _locked(lock: Path, what: str) -> Iterator[None]:
    with open(lock, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another job preparing %s", what)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _load_entry(entry: Path) -> Tokens:
    meta = json.loads((entry / "tokens.json").read_text())
    known = {k: v for k, v in meta.items() if k in Tokens.__dataclass_fields__}
    return Tokens(**{**known, "path": str(entry / "tokens.bin"), "encoded": False})


def plan(corpus: Corpus, tokenizer: str, vocab_size: int, val_fraction: float,
         cache: str | os.PathLike | None = None, sample_mb: float = DEFAULT_SAMPLE_MB) -> tuple[Path, dict]:
    """The cache entry of ``corpus`` under these settings and what its name hashes (reads the
    corpus once, to hash it)."""
    digest, size = corpus.sha256(), corpus.size
    material: dict[str, Any] = {"format": FORMAT, "corpus_sha256": digest, "corpus_bytes": size}
    if tokenizer == "bytes":
        label = "bytes"
        material["tokenizer"] = "bytes"
    else:
        import tokenizers as _tk

        split = char_boundary(corpus, int(round(size * (1 - val_fraction))))
        material.update(split_byte=split, tokenizers=_tk.__version__)
        if tokenizer == "bpe":
            sample = int(min(sample_mb * 1e6, SAMPLE_SHARE * split))
            label = f"bpe{vocab_size}"
            material["tokenizer"] = {"bpe": vocab_size, "sample_bytes": sample, "pattern": PRE_TOKENIZER_PATTERN}
        else:
            label = "json"
            tok_bytes = Path(tokenizer).expanduser().read_bytes()
            material["tokenizer"] = {"json_sha256": hashlib.sha256(tok_bytes).hexdigest()}
    return cache_dir(cache) / f"{label}-{_entry_key(material)}", material


def prepare(corpus: Corpus, tokenizer: str, vocab_size: int, val_fraction: float,
            cache: str | os.PathLike | None = None, sample_mb: float = DEFAULT_SAMPLE_MB,
            describe: str = "the corpus") -> Tokens:
    """The token file of ``corpus`` under ``tokenizer`` (``bytes``, ``bpe`` or a tokenizer.json),
    built once in the cache and shared by every job after (see the module's docstring)."""
    t0 = time.perf_counter()
    entry, material = plan(corpus, tokenizer, vocab_size, val_fraction, cache, sample_mb)
    hash_s = time.perf_counter() - t0
    root, name, split = entry.parent, entry.name, material.get("split_byte")
    if (entry / "tokens.json").is_file():
        log.info("reusing token file %s", entry / "tokens.bin")
        return _load_entry(entry)
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / f"{name}.lock", str(entry)):
        if (entry / "tokens.json").is_file():  # another job built it while this one waited
            log.info("reusing token file %s (built by another job)", entry / "tokens.bin")
            return _load_entry(entry)
        for stale in root.glob(f".tmp-{name}-*"):  # left by a job that died while building
            shutil.rmtree(stale, ignore_errors=True)
        tmp = root / f".tmp-{name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            tokens = _build(corpus, tokenizer, vocab_size, split, material, tmp, describe, entry)
            tokens.info["hash_seconds"] = round(hash_s, 3)
            meta = {k: v for k, v in asdict(tokens).items() if k not in ("path", "encoded", "data")}
            (tmp / "tokens.json").write_text(json.dumps({**meta, "key": material}, indent=1))
            os.rename(tmp, entry)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    tokens.path, tokens.encoded = str(entry / "tokens.bin"), True
    ENCODED.append(tokens.path)
    return tokens


def _sample(corpus: Corpus, n: int) -> Iterator[str]:
    # small pieces: the trainer's memory grows with the size of the strings it is given
    for piece in pieces(corpus.blocks(0, n, block=1 << 16), size=1 << 16):
        yield piece.decode("utf-8", "replace")


def _build(corpus: Corpus, tokenizer: str, vocab_size: int, split: int | None, material: dict,
           tmp: Path, describe: str, entry: Path) -> Tokens:
    size = corpus.size
    out_path = tmp / "tokens.bin"
    info: dict[str, Any] = {}
    if tokenizer == "bytes":
        log.info("copying %s (%.1f MB) into %s", describe, size / 1e6, entry)
        with open(out_path, "wb") as out:
            for data in corpus.blocks():
                out.write(data)
            os.fsync(out.fileno())
        return Tokens(path=str(out_path), dtype="uint8", vocab_size=256, tokenizer="bytes", n_tokens=size,
                      bytes_per_token=1.0, corpus_sha256=material["corpus_sha256"], corpus_bytes=size, info=info)
    assert split is not None
    if tokenizer == "bpe":
        sample = material["tokenizer"]["sample_bytes"]
        t0 = time.perf_counter()
        tok = train_bpe(_sample(corpus, sample), vocab_size)
        info["train_seconds"] = round(time.perf_counter() - t0, 3)
        info["sample_bytes"] = sample
        tok.save(str(tmp / "tokenizer.json"))
        name = "bpe"
        log.info("trained a BPE tokenizer (%d tokens) on the first %.1f MB of %s in %.1f s",
                 tok.get_vocab_size(), sample / 1e6, describe, info["train_seconds"])
    else:
        tok = load_tokenizer(tokenizer)
        shutil.copyfile(Path(tokenizer).expanduser(), tmp / "tokenizer.json")
        name = str(tokenizer)
    dtype = token_dtype(vocab_size)
    fast = uses_word_encoder(tok)
    encoder = WordEncoder(tok, dtype) if fast else TokenizerEncoder(tok, dtype)
    log.info("encoding %s (%.1f MB) with %s into %s", describe, size / 1e6, name, entry)
    t0 = time.perf_counter()
    with open(out_path, "wb") as out:
        n_train = encode_stream(encoder, corpus.blocks(0, split), out)
        n_test = encode_stream(encoder, corpus.blocks(split, size), out)
        os.fsync(out.fileno())
    seconds = time.perf_counter() - t0
    info.update(encode_seconds=round(seconds, 3), encode_mb_per_s=round(size / 1e6 / max(seconds, 1e-9), 2),
                encoder=type(encoder).__name__)
    log.info("encoded %.1f MB into %d tokens in %.1f s (%.1f MB/s)", size / 1e6, n_train + n_test,
             seconds, size / 1e6 / max(seconds, 1e-9))
    test_bytes = size - split
    return Tokens(path=str(out_path), dtype=dtype.name, vocab_size=vocab_size, tokenizer=name,
                  n_tokens=n_train + n_test, train_tokens=n_train,
                  bytes_per_token=test_bytes / n_test if n_test else None, test_bytes=test_bytes,
                  test_tokens=n_test, corpus_sha256=material["corpus_sha256"], corpus_bytes=size,
                  split_byte=split, info=info)
