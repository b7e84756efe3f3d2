"""Tokenized corpora (``task=lm``, ``ablate.data.tokens`` and ``ablate.data.encoders``): BPE
trained locally, the token cache (keyed by content, reused, safe under parallel jobs),
pre-tokenized ``.bin`` files, checks of the settings, and a 200 MB corpus trained through the CLI
in the memory of a 2 MB one."""

from __future__ import annotations

import fcntl
import json
import math
import os
import random
import subprocess
import sys
import time
from itertools import islice
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from conftest import BIN, cli_env, compose_cfg, start_cli

from ablate.components import resolve
from ablate.config import ConfigError, validate
from ablate.data import build_task, check
from ablate.data import encoders as enc
from ablate.data import tokens as tok

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "ablate" / "conf"
CHOICES = "'bytes', 'bpe' or a path to a saved tokenizer.json"


def write_corpus(path: Path, n_bytes: float, seed: int = 0, tail: str = "") -> Path:
    """About ``n_bytes`` of varied text, fast: a block of random lines of pseudo-words, numbers,
    punctuation and some non-ASCII words, repeated with a running line number in front of every
    line (so no two lines are equal), then ``tail``."""
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mi", "ren", "tu", "sha", "vo", "ne", "di", "qua", "ber", "ix", "on",
                 "tel", "ap", "zu", "gor", "fe", "wy", "ml", "é", "ø", "日本"]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(3000)]
    lines = [" ".join(rng.choice(words) if rng.random() > 0.15 else str(rng.randint(0, 99999))
                      for _ in range(rng.randint(4, 18))) + rng.choice(".,;!?") for _ in range(4000)]
    path.parent.mkdir(parents=True, exist_ok=True)
    written = k = 0
    with open(path, "w", encoding="utf-8") as f:
        while written < n_bytes:
            block = "".join(f"{k * len(lines) + j} {line}\n" for j, line in enumerate(lines))
            block = block[: int(n_bytes - written)] if written + len(block.encode()) > n_bytes else block
            f.write(block)
            written += len(block.encode())
            k += 1
        f.write(tail)
    return path


def lm(path: Path | str | None, **settings) -> dict:
    node = OmegaConf.to_container(OmegaConf.load(CONF / "task" / "lm.yaml"))
    node.pop("name")
    return {**node, "path": None if path is None else str(path), "seq_len": 16, "batch_size": 4, **settings}


def built(path, **settings):
    task = build_task(lm(path, **settings))
    task.setup()
    return task


def problems(**settings) -> list[str]:
    return check(*resolve("task", lm(settings.pop("path", None), **settings)))



# ---------------------------------------------------------------------------- the encoder
@pytest.mark.slow  # seconds: trains tokenizers
def test_word_encoder_gives_the_ids_of_tokenizers(tmp_path: Path) -> None:
    """The NumPy word splitter + table give exactly ``tokenizers``' own ids for the whole text,
    for any cut into pieces at safe points, after the table starts over, and on the slow path."""
    text = write_corpus(tmp_path / "c.txt", 300_000).read_text()
    trained = enc.train_bpe([text[i:i + 65536] for i in range(0, len(text), 65536)], 600)
    assert enc.uses_word_encoder(trained) and trained.get_vocab_size() == 600
    rng = random.Random(1)
    alphabet = list("abcXYZ019 \t\n\r\x0b\x0c!?.,'\"-_\x00\x7féü日本語🙂\u00a0\u3000") + \
        ["  ", "\n\n", " 12345 ", "word", " x", "1234567", "a" * 40,
         "a" * 130, "日" * 70, "é" * 65, "!" * 129, " " * 66, "\n" * 64, " " + "b" * 64]  # beyond a word's 64 characters
    odd = "".join(rng.choice(alphabet) for _ in range(6000))
    for sample in (odd, text[:30000]):
        data = sample.encode()
        expected = trained.encode(sample, add_special_tokens=False).ids
        encoder = enc.WordEncoder(trained, np.uint16, max_words=50)  # starts over often
        for size in (7, 100, 5000, 1 << 20):
            parts = list(enc.pieces((data[i:i + size] for i in range(0, len(data), size)), size=size))
            assert b"".join(parts) == data
            assert np.concatenate([encoder.encode(p) for p in parts]).tolist() == expected, size
        assert encoder.encode_exact(data).tolist() == expected
        assert encoder.collisions == 0
        assert trained.decode(expected) == sample


@pytest.mark.slow  # seconds: trains a tokenizer on 1 MB
@pytest.mark.timeout(120)  # unbounded words made this quadratic: 200 KB took 14 s, 1 MB did not finish
def test_a_1mb_word_trains_and_encodes_as_tokenizers_does() -> None:
    """Text without a space (DNA here; minified code, CJK) is cut into words of MAX_WORD_CHARS."""
    rng = random.Random(2)
    text = "".join(rng.choice("ACGT") for _ in range(1_000_000))
    trained = enc.train_bpe([text[i:i + 65536] for i in range(0, len(text), 65536)], 300)
    assert enc.uses_word_encoder(trained)
    sample = text[:50_000] + "日本語" * 40
    expected = trained.encode(sample, add_special_tokens=False).ids
    encoder = enc.WordEncoder(trained, np.uint16)
    assert encoder.encode(sample.encode()).tolist() == expected
    assert encoder.encode_exact(sample.encode()).tolist() == expected
    assert max(len(trained.decode([i])) for i in set(expected)) <= enc.MAX_WORD_CHARS


# ---------------------------------------------------------------------------- bpe
def test_bpe_trains_on_the_training_part_and_encodes_offline(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # a word that occurs only in the test part must not be learnt as a token
    corpus = write_corpus(tmp_path / "c.txt", 400_000, tail=" zyxwvutsr" * 4000)
    task = built(corpus, tokenizer="bpe", vocab_size=700, cache_dir=str(tmp_path / "cache"), n_test=8)
    t = task.tokens
    assert (task.vocab_size, task.n_classes, t.dtype, t.tokenizer) == (700, 700, "uint16", "bpe")
    assert t.encoded and t.info["encoder"] == "WordEncoder"
    entry = Path(t.path).parent
    assert sorted(p.name for p in entry.iterdir()) == ["tokenizer.json", "tokens.bin", "tokens.json"]
    trained = enc.load_tokenizer(entry / "tokenizer.json")
    assert trained.get_vocab_size() <= 700
    assert trained.token_to_id("Ġzyxwvutsr") is None and trained.token_to_id("zyxwvutsr") is None
    assert t.info["sample_bytes"] <= tok.SAMPLE_SHARE * t.split_byte
    # the file holds the two parts, each encoded as tokenizers encodes it
    raw = corpus.read_bytes()
    ids = np.fromfile(t.path, np.uint16)
    assert len(ids) == t.n_tokens and ids.max() < 700
    assert trained.decode(ids[:t.train_tokens].tolist()).encode() == raw[:t.split_byte]
    test_text = raw[t.split_byte:].decode()
    assert ids[t.train_tokens:].tolist() == trained.encode(test_text, add_special_tokens=False).ids
    # bytes per token of the test split, measured exactly
    assert t.test_bytes == len(raw) - t.split_byte and t.test_tokens == len(ids) - t.train_tokens
    assert task.bytes_per_token == t.test_bytes / t.test_tokens
    # the training part compresses; the test part, made mostly of the unseen word, hardly does
    assert t.split_byte / t.train_tokens > 2.5 and task.bytes_per_token < 1.5
    # windows: next-token targets, held-out windows inside their parts, ids within the vocabulary
    x, y = next(task.train_batches(0))
    assert x.shape == (4, 16) and x.dtype == torch.long and torch.equal(x[:, 1:], y[:, :-1])
    test = task.eval_batches(16)
    assert sum(len(b[0]) for b in test) == 8
    assert trained.decode(test[0][0][0].tolist()) in test_text
    n_val = len(task.val_data)
    assert n_val == 256 * 16 + 1 and torch.equal(task.val_data, torch.from_numpy(ids[t.train_tokens - n_val:t.train_tokens].copy()))
    assert len(task.train_data) == t.train_tokens - n_val
    # the saved tokenizer is a tokenizer of its own: same ids through task.tokenizer=PATH
    again = built(corpus, tokenizer=str(entry / "tokenizer.json"), cache_dir=str(tmp_path / "cache"), n_test=8)
    assert again.vocab_size == trained.get_vocab_size() and again.tokens.encoded
    assert np.array_equal(np.fromfile(again.tokens.path, np.uint16), ids)


def test_a_tokenizer_json_of_another_kind_is_used_as_it_is(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    corpus = write_corpus(tmp_path / "c.txt", 200_000)
    gpt2_like = Tokenizer(models.BPE())
    gpt2_like.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    gpt2_like.decoder = decoders.ByteLevel()
    gpt2_like.train([str(corpus)], trainers.BpeTrainer(vocab_size=400, show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    path = tmp_path / "mine" / "tokenizer.json"
    path.parent.mkdir()
    gpt2_like.save(str(path))
    task = built(corpus, tokenizer=str(path), cache_dir=str(tmp_path / "cache"), n_test=4)
    t = task.tokens
    assert task.vocab_size == gpt2_like.get_vocab_size() and t.info["encoder"] == "TokenizerEncoder"
    ids = np.fromfile(t.path, np.uint16).tolist()
    assert gpt2_like.decode(ids).encode() == corpus.read_bytes()  # byte-level: lossless


# ---------------------------------------------------------------------------- bits per byte
def test_bits_per_byte_divide_by_the_bytes_of_the_scored_targets(tmp_path: Path) -> None:
    """Bits per byte = the scored targets' summed loss in bits over the UTF-8 bytes of those same
    targets (not over the whole test text's bytes per token: the windows cover only part of it)."""
    corpus = write_corpus(tmp_path / "c.txt", 200_000)
    task = built(corpus, tokenizer="bpe", vocab_size=400, cache_dir=str(tmp_path / "cache"), n_test=6,
                 eval_lengths=[32])
    trained = enc.load_tokenizer(Path(task.tokens.path).parent / "tokenizer.json")
    evals = {}
    for length in (16, 32):
        batches = task.eval_batches(length)
        rows = [row.tolist() for _, y in batches for row in y]
        decoded = sum(len(trained.decode(r).encode("utf-8")) for r in rows)  # counted independently
        assert task.target_bytes(batches) == decoded
        evals[str(length)] = {"loss": 1.75, "count": sum(map(len, rows)), "bytes": decoded}
    task.add_bits_per_byte(evals, task.eval_batches)
    for e in evals.values():
        assert e["bytes_per_token"] == e["bytes"] / e["count"]
        assert e["bits_per_byte"] == pytest.approx(1.75 * e["count"] / math.log(2) / e["bytes"], rel=1e-12)
        # the whole test text's bytes per token gives another figure
        whole = 1.75 / math.log(2) / task.tokens.bytes_per_token
        assert abs(e["bits_per_byte"] / whole - 1) > 1e-3
    # a tokenizer.json that is not byte-level: each window's targets decoded, their bytes counted
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    words = Tokenizer(models.BPE(unk_token="?"))
    words.pre_tokenizer, words.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
    words.train([str(corpus)], trainers.BpeTrainer(vocab_size=300, show_progress=False, special_tokens=["?"]))
    assert enc.byte_lengths(words) is None and enc.byte_lengths(trained) is not None
    ids = words.encode("tel kaml 12 ø").ids
    assert tok.TargetBytes(tok=words)([np.array(ids)]) == len("tel kaml 12 ø".encode())


def test_bits_per_byte_of_bytes_are_the_loss_in_bits(tmp_path: Path) -> None:
    task = built(write_corpus(tmp_path / "c.txt", 50_000), n_test=5)
    batches = task.eval_batches(16)
    count = sum(int(y.numel()) for _, y in batches)
    assert task.target_bytes(batches) == count
    evals = {"16": {"loss": 2.0 / 3, "count": count}}
    task.add_bits_per_byte(evals, task.eval_batches)
    assert evals["16"]["bytes_per_token"] == 1.0 and evals["16"]["bits_per_byte"] == (2.0 / 3) / math.log(2)


@pytest.mark.slow  # runs the CLI
def test_a_bpe_run_records_bits_per_byte_over_its_scored_targets(tmp_path: Path, tiny: list[str]) -> None:
    from conftest import records, run_cli

    corpus = write_corpus(tmp_path / "c.txt", 200_000)
    out = run_cli(["task=lm", f"task.path={corpus}", "task.tokenizer=bpe", "task.vocab_size=400",
                   f"task.cache_dir={tmp_path / 'cache'}", *tiny, "pos_enc=rope",
                   "task.seq_len=16", "task.eval_lengths=[32]",
                   "task.n_test=6", "task.n_val=4", "trainer.max_steps=2", "logger=none", "hydra.run.dir=run"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    (record,) = records(tmp_path / "run")
    m = record["metrics"]
    task = built(corpus, tokenizer="bpe", vocab_size=400, cache_dir=str(tmp_path / "cache"), n_test=6)
    for length in ("16", "32"):
        e = m["eval"][length]
        assert e["bytes_per_token"] == task.target_bytes(task.eval_batches(int(length))) / e["count"]
        assert e["bits_per_byte"] == pytest.approx(e["loss"] / math.log(2) / e["bytes_per_token"])
    assert (m["bytes_per_token"], m["bits_per_byte"]) == (m["eval"]["16"]["bytes_per_token"], m["eval"]["16"]["bits_per_byte"])
    assert m["bytes_per_token"] != task.tokens.bytes_per_token  # not the whole test text's


# ---------------------------------------------------------------------------- the cache
def test_the_cache_is_keyed_by_content_and_reused(tmp_path: Path) -> None:
    cache = str(tmp_path / "cache")
    a = write_corpus(tmp_path / "a.txt", 300_000)
    first = built(a, tokenizer="bpe", vocab_size=400, cache_dir=cache).tokens
    assert first.encoded
    made, stat = len(tok.ENCODED), os.stat(first.path)
    # the same text elsewhere, written later: the same entry, not encoded again
    b = tmp_path / "elsewhere" / "b.txt"
    b.parent.mkdir()
    b.write_bytes(a.read_bytes())
    second = built(b, tokenizer="bpe", vocab_size=400, cache_dir=cache).tokens
    assert not second.encoded and second.path == first.path and len(tok.ENCODED) == made
    again = os.stat(first.path)
    assert (again.st_ino, again.st_mtime_ns) == (stat.st_ino, stat.st_mtime_ns)
    assert second.bytes_per_token == first.bytes_per_token and second.train_tokens == first.train_tokens
    # the same size and mtime but other bytes: another entry
    data = bytearray(a.read_bytes())
    data[1000:1003] = b"XYZ"
    a.write_bytes(bytes(data))
    os.utime(a, ns=(stat.st_atime_ns, os.stat(b).st_mtime_ns))
    third = built(a, tokenizer="bpe", vocab_size=400, cache_dir=cache).tokens
    assert third.encoded and third.path != first.path
    # other settings of the tokenizer or the split: other entries; the env var names the cache
    os.environ[tok.CACHE_ENV] = str(tmp_path / "from_env")
    try:
        fourth = built(b, tokenizer="bpe", vocab_size=400, val_fraction=0.2).tokens
    finally:
        del os.environ[tok.CACHE_ENV]
    assert fourth.encoded and Path(fourth.path).parent.parent == tmp_path / "from_env"
    names = sorted(p.name for p in Path(cache).iterdir() if p.is_dir())
    assert len(names) == 2 and all(n.startswith("bpe400-") for n in names)
    # bytes: a directory is concatenated into the cache once, a single file is mapped as it is
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "x.txt").write_text("alpha " * 3000)
    (tmp_path / "dir" / "y.txt").write_text("beta " * 3000)
    d1, d2 = built(tmp_path / "dir", cache_dir=cache).tokens, built(tmp_path / "dir", cache_dir=cache).tokens
    assert d1.encoded and not d2.encoded and Path(d1.path).read_bytes() == b"alpha " * 3000 + b"\n" + b"beta " * 3000
    single = built(b, cache_dir=cache)
    assert single.tokens.path == str(b) and single.bytes_per_token == 1.0


PREPARE = """
import logging, sys
from pathlib import Path
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
from ablate.data import tokens as T
t = T.prepare(T.Corpus([Path(sys.argv[1])]), "bpe", 400, 0.1, sys.argv[2])
print("RESULT", t.encoded, t.path, len(T.ENCODED))
"""


@pytest.mark.slow
def test_two_jobs_preparing_at_once_make_one_file(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "c.txt", 2_000_000)
    cache = tmp_path / "cache"
    entry, _ = tok.plan(tok.Corpus([corpus]), "bpe", 400, 0.1, cache)
    cache.mkdir()
    (cache / f".tmp-{entry.name}-1-dead").mkdir()  # left by a job that was killed while building
    logs = [tmp_path / f"job{i}.err" for i in range(2)]
    with open(cache / f"{entry.name}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # hold the lock until both jobs wait for it
        jobs = [subprocess.Popen([sys.executable, "-c", PREPARE, str(corpus), str(cache)], stdout=subprocess.PIPE,
                                 stderr=open(err, "w"), text=True, cwd=tmp_path) for err in logs]
        deadline = time.time() + 120
        while not all("waiting for another job" in err.read_text() for err in logs):
            assert time.time() < deadline and all(j.poll() is None for j in jobs), [e.read_text() for e in logs]
            time.sleep(0.2)
        fcntl.flock(lock, fcntl.LOCK_UN)
        outs = [j.communicate(timeout=120)[0] for j in jobs]
    results = sorted(line.split()[1:] for out in outs for line in out.splitlines() if line.startswith("RESULT"))
    assert [r[0] for r in results] == ["False", "True"], (outs, [e.read_text() for e in logs])
    assert results[0][1] == results[1][1] == str(entry / "tokens.bin")
    assert [r[2] for r in results] == ["0", "1"]  # one encoding in all
    assert any("built by another job" in e.read_text() for e in logs)
    assert sorted(p.name for p in cache.iterdir()) == [entry.name, f"{entry.name}.lock"]  # no temporary left


# ---------------------------------------------------------------------------- .bin files
def test_a_bin_file_is_read_as_it_is(tmp_path: Path) -> None:
    ids = (np.arange(20_000) * 7919 % 1000).astype(np.uint16)
    path = tmp_path / "train.bin"
    ids.tofile(path)
    assert any("set task.vocab_size" in p for p in problems(path=str(path)))  # no sidecar, no vocab_size
    task = built(path, vocab_size=1000, n_test=10)
    assert (task.vocab_size, task.tokens.dtype, task.bytes_per_token) == (1000, "uint16", None)
    assert torch.equal(task.held_out.long(), torch.from_numpy(ids[18_000:].astype(np.int64)))  # the last tenth
    x, y = task.eval_batches(16)[0]
    assert x.shape == (4, 16) and torch.equal(x[:, 1:], y[:, :-1])
    train = {tuple(r) for b, _ in islice(task.train_batches(0), 20) for r in b.tolist()}
    assert all(0 <= v < 1000 for r in train for v in r)
    # the sidecar gives the vocabulary, the width of the ids and bytes per token
    ids.astype(np.uint32).tofile(path)
    (tmp_path / "train.json").write_text(json.dumps({"vocab_size": 1000, "dtype": "uint32", "bytes_per_token": 3.5}))
    task = built(path, n_test=10)
    assert (task.vocab_size, task.tokens.dtype, task.bytes_per_token) == (1000, "uint32", 3.5)
    evals = {"16": {"loss": 1.0, "count": 40}}  # no tokenizer: bits per byte from the sidecar's figure
    task.add_bits_per_byte(evals, task.eval_batches)
    assert task.target_bytes(task.eval_batches(16)) is None and evals["16"]["bytes_per_token"] == 3.5
    assert torch.equal(task.held_out.long(), torch.from_numpy(ids[18_000:].astype(np.int64)))
    # ids outside the vocabulary are an error, not a crash in the embedding
    with pytest.raises(ValueError, match=r"holds token id 9\d\d, outside task.vocab_size=500"):
        built(path, vocab_size=500, n_test=10).eval_batches(16)
    assert any("already tokenized" in p for p in problems(path=str(path), tokenizer="bpe"))
    # a cache entry's token file is such a file (its tokens.json is the sidecar)
    corpus = write_corpus(tmp_path / "c.txt", 100_000)
    entry = built(corpus, tokenizer="bpe", vocab_size=300, cache_dir=str(tmp_path / "cache")).tokens
    reread = built(entry.path)
    assert (reread.vocab_size, reread.tokens.n_tokens) == (300, entry.n_tokens)


# ---------------------------------------------------------------------------- checks
def test_a_bad_tokenizer_is_refused_naming_the_choices(tmp_path: Path) -> None:
    probs = problems(tokenizer="wordpiece")
    assert len(probs) == 1 and "task.tokenizer='wordpiece'" in probs[0] and CHOICES in probs[0]
    with pytest.raises(ConfigError, match=r"task.tokenizer='wordpiece' is not a tokenizer: valid values are "
                                          r"'bytes', 'bpe' or a path"):
        validate(compose_cfg(["task=lm", "task.tokenizer=wordpiece"]))
    with pytest.raises(ValueError, match="valid values are 'bytes', 'bpe'"):
        build_task(lm(None, tokenizer="wordpiece"))
    not_a_tokenizer = tmp_path / "tokenizer.json"
    not_a_tokenizer.write_text('{"hello": 1}')
    assert "is not a Hugging Face tokenizer.json" in problems(tokenizer=str(not_a_tokenizer))[0]
    assert "needs task.tokenizer=bpe" in problems(vocab_size=1000)[0]
    assert "257 .. 2**32" in problems(tokenizer="bpe", vocab_size=100)[0]
    assert any("task.vocab_size" in p for p in problems(tokenizer="bpe", vocab_size="big"))
    assert any("task.bpe_sample_mb" in p for p in problems(tokenizer="bpe", bpe_sample_mb=0))
    assert problems(tokenizer="bpe", vocab_size=1000, bpe_sample_mb=2) == []
    validate(compose_cfg(["task=lm", "task.tokenizer=bpe", "task.vocab_size=512"]))


# ---------------------------------------------------------------------------- 200 MB through the CLI
def run_measured(args: list[str], cwd: Path) -> dict:
    """Run ``ablate ARGS``; its output, wall time and peak resident memory (of it and its children). From the
    warm interpreter (tests/warm.py), the peak counts the pages the process shares with it, the same in every
    run: what this file compares are the runs' differences."""
    t0 = time.perf_counter()
    if os.environ.get("ABLATE_TESTS_COLD") != "1":
        proc = start_cli(args, cwd)
        out, err = proc.communicate(timeout=540)
        return {"rc": proc.returncode, "out": out + err, "seconds": time.perf_counter() - t0,
                "maxrss_mb": proc.maxrss_kib / 1024}
    out = cwd / f"out-{len(list(cwd.glob('out-*')))}.txt"
    with open(out, "w") as f:
        proc = subprocess.Popen([str(BIN / "ablate"), *args], cwd=cwd, env=cli_env(), stdout=f, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"rc": proc.returncode, "out": out.read_text(), "seconds": time.perf_counter() - t0,
            "maxrss_mb": usage.ru_maxrss / 1024}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_200mb_corpus_trains_in_the_memory_of_a_2mb_one(tmp_path: Path, tiny: list[str]) -> None:
    t0 = time.perf_counter()
    small, big = write_corpus(tmp_path / "small.txt", 2e6), write_corpus(tmp_path / "big.txt", 200e6)
    gen_s = time.perf_counter() - t0
    cache = tmp_path / "cache"

    def args(path: Path, run: str) -> list[str]:
        return ["task=lm", f"task.path={path}", "task.tokenizer=bpe", "task.vocab_size=512", f"task.cache_dir={cache}",
                *tiny, "task.seq_len=32", "task.n_test=16", "task.n_val=16", "logger=none",
                f"hydra.run.dir={tmp_path / run}"]

    runs = {name: run_measured(args(path, name), tmp_path)
            for name, path in (("small", small), ("big", big), ("big_again", big))}
    for name, r in runs.items():
        assert r["rc"] == 0, (name, r["out"][-3000:])
    assert "encoding" in runs["big"]["out"] and "reusing token file" in runs["big_again"]["out"]
    assert "encoding" not in runs["big_again"]["out"] and "trained a BPE" not in runs["big_again"]["out"]
    entries = [json.loads(p.read_text()) for p in cache.glob("*/tokens.json")]
    big_entry = next(e for e in entries if e["corpus_bytes"] == big.stat().st_size)
    info = big_entry["info"]
    figures = {"generate_s": round(gen_s, 1), "hash_s": info["hash_seconds"], "train_tokenizer_s": info["train_seconds"],
               "encode_s": info["encode_seconds"], "encode_mb_per_s": info["encode_mb_per_s"],
               "bytes_per_token": round(big_entry["bytes_per_token"], 3),
               **{f"{k}_{m}": round(r[m], 1) for k, r in runs.items() for m in ("seconds", "maxrss_mb")}}
    print("\n200 MB figures:", json.dumps(figures))
    assert runs["big"]["maxrss_mb"] <= runs["small"]["maxrss_mb"] + 100, figures
    assert runs["big_again"]["maxrss_mb"] <= runs["small"]["maxrss_mb"] + 100, figures
    assert big_entry["n_tokens"] > 20_000_000
