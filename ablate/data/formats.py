"""The file formats of the tasks on local files (``ablate.data.files``: ``task=classify``,
``task=tagging``; GLUE's files too): a data file's text, GLUE's TSV layout, the tagging file's
lines, each error naming the file and the line; and classification rows encoded as byte tokens
(the layouts: ``ablate.data.files``'s docstring).
"""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from .base import IGNORE, Batch

if TYPE_CHECKING:
    from .vocab import TextCodec

# ---------------------------------------------------------------------------------------------
# byte tokens for classification
PAD, CLS, SEP = 256, 257, 258
BYTE_VOCAB = 259

#: text column sets searched in a TSV header, in order
TEXT_COLUMNS: tuple[tuple[str, ...], ...] = (
    ("sentence1", "sentence2"), ("question1", "question2"), ("question", "sentence"),
    ("premise", "hypothesis"), ("#1 String", "#2 String"), ("sentence",),
)
#: label column names searched in a TSV header, in order
LABEL_COLUMNS: tuple[str, ...] = ("label", "gold_label", "is_duplicate", "Quality", "score")

Row = tuple[tuple[str, ...], str, int]  # (text segments, label, line number)


def _csv_limit() -> None:
    try:
        csv.field_size_limit(sys.maxsize)
    except OverflowError:  # pragma: no cover - 32-bit C long
        csv.field_size_limit(2**31 - 1)


def read_text(path: str | Path) -> str:
    """A data file's text: UTF-8, a leading byte-order mark dropped (as spreadsheet exports write
    it); bytes that are not UTF-8 are an error naming the file and the line."""
    path = Path(path)
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[:error.start].count(b"\n") + 1
        raise ValueError(f"{path}, line {line}: not valid UTF-8 (byte 0x{data[error.start]:02x}); "
                         "save the file as UTF-8") from None


def read_glue_tsv(path: str | Path, text_columns: Sequence[str] | None = None,
                  label_column: str | None = None) -> list[Row]:
    """Read a TSV file in GLUE's layout: rows of ``((text, [text2]), label, line_number)``."""
    path = Path(path)
    _csv_limit()
    with io.StringIO(read_text(path), newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        try:
            header = next(reader)
        except StopIteration:
            raise ValueError(f"{path}: empty file") from None
        rows: list[Row] = []
        cols = [h.strip() for h in header]
        if text_columns is None and label_column is None and len(cols) == 4 and \
                cols[1] in ("0", "1") and not any(c in cols for c in ("sentence", "label")):
            # CoLA: source, label, original label, sentence; no header
            text_idx, label_idx = [3], 1
            rows.append(((cols[3],), cols[1], 1))
        else:
            if text_columns is not None:
                text_columns = [text_columns] if isinstance(text_columns, str) else list(text_columns)
                missing = [c for c in text_columns if c not in cols]
                if missing or not 1 <= len(text_columns) <= 2:
                    raise ValueError(f"{path}: task.text_columns={text_columns} (one or two names) "
                                     f"not all in the header {cols}")
                found = tuple(text_columns)
            else:
                found = next((ts for ts in TEXT_COLUMNS if all(t in cols for t in ts)), None)
                if found is None:
                    raise ValueError(f"{path}: no text column in the header {cols}; expected "
                                     "'sentence', or a pair such as 'sentence1'/'sentence2' or "
                                     "'question'/'sentence' (or set task.text_columns)")
            if label_column is not None:
                if label_column not in cols:
                    raise ValueError(f"{path}: task.label_column={label_column!r} not in the "
                                     f"header {cols}")
                lab = label_column
            else:
                lab = next((c for c in LABEL_COLUMNS if c in cols), None)
                if lab is None:
                    raise ValueError(f"{path}: no label column in the header {cols}; expected "
                                     f"one of {list(LABEL_COLUMNS)} (or set task.label_column)")
            text_idx, label_idx = [cols.index(c) for c in found], cols.index(lab)
        need = len(cols)  # every row has the header's fields (CoLA: 4), no more, no fewer
        for row in reader:
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            line = reader.line_num
            if len(row) < need:
                raise ValueError(f"{path}, line {line}: {len(row)} tab-separated fields, "
                                 f"expected {need} (the header's)")
            if len(row) > need:
                raise ValueError(f"{path}, line {line}: {len(row)} tab-separated fields but the header "
                                 f"has {need}: a text holding a tab? GLUE's TSV layout has no quoting, so "
                                 "remove tabs inside texts")
            label = row[label_idx].strip()
            if not label:
                raise ValueError(f"{path}, line {line}: empty label")
            rows.append((tuple(row[i] for i in text_idx), label, line))
    if not rows:
        raise ValueError(f"{path}: no examples")
    return rows


def sorted_labels(labels) -> list[str]:
    """Distinct labels in sorted order (numeric order when all are integers)."""
    uniq = set(labels)
    try:
        return sorted(uniq, key=int)
    except ValueError:
        return sorted(uniq)


def _byte_layout(segs: Sequence[bytes], length: int, causal: bool) -> list[bytes | int]:
    n_special = len(segs) if causal else len(segs) + 1
    budget = max(length - n_special, 0)
    if len(segs) == 1:
        segs = [segs[0][:budget]]
    else:
        a, b = len(segs[0]), len(segs[1])
        if a + b > budget:  # longest-first truncation
            half = budget // 2
            if a <= half:
                b = budget - a
            elif b <= budget - half:
                a = budget - b
            else:
                a, b = half, budget - half
        segs = [segs[0][:a], segs[1][:b]]
    if causal:
        parts: list[bytes | int] = [segs[0]]
        if len(segs) == 2:
            parts += [SEP, segs[1]]
        return parts + [CLS]
    parts = [CLS, segs[0], SEP]
    if len(segs) == 2:
        parts += [segs[1], SEP]
    return parts


class _ClassRows:
    """Encoded classification rows: tokens (N, T) int16, label position and label id."""

    def __init__(self, tokens: torch.Tensor, pos: torch.Tensor, labels: torch.Tensor):
        self.tokens, self.pos, self.labels = tokens, pos, labels

    def __len__(self) -> int:
        return len(self.tokens)

    def batch(self, idx) -> Batch:
        x = self.tokens[idx].long()
        y = torch.full(x.shape, IGNORE, dtype=self.labels.dtype)  # float labels: a regression
        y[torch.arange(len(x)), self.pos[idx]] = self.labels[idx]
        return x, y


class _TagRows:
    def __init__(self, tokens: torch.Tensor, targets: torch.Tensor):
        self.tokens, self.targets = tokens, targets

    def __len__(self) -> int:
        return len(self.tokens)

    def batch(self, idx) -> Batch:
        return self.tokens[idx].long(), self.targets[idx].long()


def label_values(rows: Sequence[Row], label_ids: dict[str, int] | None, where: str = "") -> np.ndarray:
    """The rows' label ids (int64), or with ``label_ids`` None their labels as numbers (float32: a
    regression's targets, GLUE's STS-B)."""
    if label_ids is None:
        values = np.zeros(len(rows), dtype=np.float32)
        for i, (_, label, line) in enumerate(rows):
            try:
                values[i] = float(label)
            except ValueError:
                raise ValueError(f"{where}, line {line}: label {label!r} is not a number "
                                 "(a regression task's labels are scores)") from None
        return values
    ids = np.zeros(len(rows), dtype=np.int64)
    for i, (_, label, line) in enumerate(rows):
        if label not in label_ids:
            raise ValueError(f"{where}, line {line}: label {label!r} does not occur in the "
                             f"training file (known labels: {list(label_ids)})")
        ids[i] = label_ids[label]
    return ids


def encode_classification(rows: Sequence[Row], label_ids: dict[str, int] | None, length: int,
                          causal: bool, where: str = "", codec: "TextCodec | None" = None) -> _ClassRows:
    """Encode rows to tokens of ``length`` (see the module docstring for the layout): byte tokens with
    PAD/CLS/SEP 256/257/258, or with ``codec`` its tokenizer's ids and its specials. ``label_ids``
    None: the labels are numbers (a regression)."""
    labels = label_values(rows, label_ids, where)
    if codec is not None:
        return _encode_with_codec(rows, labels, length, causal, codec)
    n = len(rows)
    tokens = np.full((n, length), PAD, dtype=np.int16)
    pos = np.zeros(n, dtype=np.int64)
    for i, (segs, _, _) in enumerate(rows):
        o = 0
        for p in _byte_layout([s.encode("utf-8") for s in segs], length, causal):
            if isinstance(p, int):
                tokens[i, o] = p
                o += 1
            elif p:
                tokens[i, o:o + len(p)] = np.frombuffer(p, dtype=np.uint8)
                o += len(p)
        pos[i] = o - 1 if causal else 0
    return _ClassRows(torch.from_numpy(tokens), torch.from_numpy(pos), torch.from_numpy(labels))


def codec_layout(codec: "TextCodec", segments: Sequence[Sequence[int]], length: int, causal: bool) -> list[int]:
    """The ids of one example of already encoded ``segments``: the classification layout and
    truncation (:func:`_byte_layout`), with ``codec``'s ids for CLS and SEP (no padding)."""
    special = {CLS: codec.cls_id, SEP: codec.sep_id}
    out: list[int] = []
    for part in _byte_layout(segments, length, causal):
        out += [special[part]] if isinstance(part, int) else list(part)
    return out


def _encode_with_codec(rows: Sequence[Row], labels: np.ndarray, length: int, causal: bool,
                       codec: "TextCodec") -> _ClassRows:
    """:func:`encode_classification` through a tokenizer: the same layout and truncation, in its ids."""
    n = len(rows)
    tokens = np.full((n, length), codec.pad_id, dtype=np.int16 if codec.vocab_size < 2**15 else np.int32)
    pos = np.zeros(n, dtype=np.int64)
    for i, (segs, _, _) in enumerate(rows):
        ids = codec_layout(codec, [codec.encode(s) for s in segs], length, causal)
        tokens[i, :len(ids)] = ids
        pos[i] = len(ids) - 1 if causal else 0
    return _ClassRows(torch.from_numpy(tokens), torch.from_numpy(pos), torch.from_numpy(labels))


# ---------------------------------------------------------------------------------------------
# tagging

def read_tagging_file(path: str | Path) -> list[tuple[list[str], list[str], int]]:
    """Rows ``(input_tokens, target_tokens, line_number)`` of a tagging file."""
    path = Path(path)
    rows = []
    with io.StringIO(read_text(path)) as f:
        for line_no, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            if "\t" not in line:
                raise ValueError(f"{path}, line {line_no}: no tab; expected input tokens, a tab, "
                                 "then the target tokens")
            left, right = line.split("\t", 1)
            xs, ys = left.split(), right.split()
            if len(xs) != len(ys):
                raise ValueError(f"{path}, line {line_no}: {len(xs)} input tokens but {len(ys)} "
                                 "target tokens; each input token needs exactly one target")
            if not xs:
                raise ValueError(f"{path}, line {line_no}: no tokens")
            rows.append((xs, ys, line_no))
    if not rows:
        raise ValueError(f"{path}: no examples")
    return rows
