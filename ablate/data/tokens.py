"""Tokenized corpora of any size for ``task=lm``: the corpus, the token cache, memory-mapped token files.

A corpus (a text file, a directory of ``*.txt`` files, or the built-in corpus; see
:mod:`ablate.data.text`) is encoded once into a flat file of token ids, read through
``numpy.memmap``: training and held-out windows touch only the pages they read, so a job's memory
does not grow with the corpus. The file follows nanoGPT's ``.bin`` convention (raw ids, no
header): ``uint16`` when the vocabulary fits in 16 bits, else ``uint32`` (``uint8`` for bytes).

Tokenizers (``task.tokenizer``; trained and run by :mod:`ablate.data.encoders`):

* ``bytes``: the UTF-8 bytes, vocabulary 256. A single text file *is* its own token file (mapped
  as it is); a directory or the built-in corpus is concatenated into the cache once.
* ``bpe``: byte-level BPE trained locally on the first ``task.bpe_sample_mb`` MB of the training
  part of the text (at most its first 80%, so no validation or test text is ever seen), with
  ``task.vocab_size`` tokens (default :data:`DEFAULT_BPE_VOCAB`), its pre-tokenizer
  :data:`~ablate.data.encoders.PRE_TOKENIZER_PATTERN`; encoded one distinct word at a time
  (:class:`~ablate.data.encoders.WordEncoder`).
* a path to a saved Hugging Face ``tokenizer.json``: encoded with ``tokenizers`` itself
  (:class:`~ablate.data.encoders.TokenizerEncoder`), unless its pre-tokenizer is ``bpe``'s, when
  the word encoder is used.

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
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from .encoders import (BLOCK, PRE_TOKENIZER_PATTERN, TokenizerEncoder, WordEncoder, byte_lengths, encode_stream,
                       load_tokenizer, pieces, train_bpe, uses_word_encoder)

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
#: share of the training part the BPE sample may reach (validation is carved from its end)
SAMPLE_SHARE = 0.8

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
