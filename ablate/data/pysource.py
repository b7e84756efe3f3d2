"""The source the offline downstream suite is built from: the functions of standard-library modules
that the built-in pretraining corpus leaves out, read with ``ast``, and the labels Python's own
``tokenize`` gives their tokens. The tasks over them are :mod:`ablate.data.downstream`.

:data:`MODULE_GROUPS`: six packages of pure-Python modules, present since Python 3.10, none of
them in :data:`ablate.data.text.DEFAULT_CORPUS_MODULES` (so a model pretrained on the corpus has
never read them). A module absent from the running Python is skipped, as the corpus's are; the
files differ slightly between Python versions, so compare runs made with the same interpreter.

A :class:`Function` is a module-level function or a method (of a class, or of a class in a class);
functions nested in functions are left out, since their text is part of their parent's. Its code
is its source from the ``def`` line (decorators left out), dedented, without the lines of its
docstring. Left out too: functions whose body is only a docstring (nothing left to read), whose
docstring shares a line with other code, and any whose code equals an earlier one's.
"""

from __future__ import annotations

import ast
import io
import keyword
import sysconfig
import textwrap
import tokenize
import zlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterator

import numpy as np

#: the held-out modules, by the package they belong to (``py_module``'s classes, in this order)
MODULE_GROUPS: dict[str, tuple[str, ...]] = {
    "asyncio": ("asyncio.base_events", "asyncio.base_subprocess", "asyncio.events", "asyncio.futures",
                "asyncio.locks", "asyncio.proactor_events", "asyncio.queues", "asyncio.runners",
                "asyncio.selector_events", "asyncio.sslproto", "asyncio.streams", "asyncio.subprocess",
                "asyncio.tasks", "asyncio.transports", "asyncio.unix_events"),
    "email": ("email._header_value_parser", "email._parseaddr", "email._policybase", "email.base64mime",
              "email.charset", "email.contentmanager", "email.feedparser", "email.generator", "email.header",
              "email.headerregistry", "email.message", "email.parser", "email.quoprimime", "email.utils"),
    "http": ("http.client", "http.cookiejar", "http.cookies", "http.server", "urllib.parse", "urllib.request",
             "urllib.robotparser"),
    "multiprocessing": ("concurrent.futures._base", "concurrent.futures.process", "concurrent.futures.thread",
                        "multiprocessing.connection", "multiprocessing.context", "multiprocessing.heap",
                        "multiprocessing.managers", "multiprocessing.pool", "multiprocessing.process",
                        "multiprocessing.queues", "multiprocessing.reduction", "multiprocessing.resource_tracker",
                        "multiprocessing.shared_memory", "multiprocessing.synchronize", "multiprocessing.util"),
    "unittest": ("unittest.async_case", "unittest.case", "unittest.loader", "unittest.main", "unittest.mock",
                 "unittest.result", "unittest.runner", "unittest.suite", "unittest.util"),
    "xml": ("xml.dom.expatbuilder", "xml.dom.minidom", "xml.dom.pulldom", "xml.dom.xmlbuilder",
            "xml.etree.ElementPath", "xml.etree.ElementTree", "xml.sax.expatreader", "xml.sax.handler",
            "xml.sax.saxutils", "xml.sax.xmlreader"),
}
#: every held-out module, in the order read
DOWNSTREAM_MODULES: tuple[str, ...] = tuple(m for group in MODULE_GROUPS.values() for m in group)

#: ``py_tokens``'s labels, from ``tokenize``'s token types: NAME split by ``keyword.iskeyword`` (soft
#: keywords such as ``match`` are names), OP, NUMBER, STRING (an f-string whole, as before 3.12),
#: COMMENT. Layout tokens (NEWLINE, NL, INDENT, DEDENT) have no text of their own and no label.
TOKEN_LABELS: tuple[str, ...] = ("keyword", "name", "operator", "number", "string", "comment")
_LABEL = {tokenize.OP: 2, tokenize.NUMBER: 3, tokenize.STRING: 4, tokenize.COMMENT: 5}

#: one function in this many is in the test split (chosen by its code, so by no seed)
TEST_EVERY = 5

Span = tuple[int, int]  # [start, end) character offsets into a text


@dataclass(frozen=True)
class Function:
    group: str      # the package of its module (MODULE_GROUPS)
    module: str
    name: str       # qualified: Class.method
    code: str       # from the def line, dedented, without its docstring
    docstring: str  # its docstring, each run of whitespace one space ("" if none)

    @property
    def held_out(self) -> bool:
        """Whether it is in the test split: a fixed fifth of the functions, chosen by a checksum
        of their code (identical code is never in two splits)."""
        return zlib.crc32(self.code.encode("utf-8")) % TEST_EVERY == 0


def module_file(name: str) -> Path | None:
    """The source file of standard-library module ``name`` (dotted), found without importing it."""
    base = Path(sysconfig.get_paths()["stdlib"], *name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _defs(body: list[ast.stmt], prefix: str = "") -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node
        elif isinstance(node, ast.ClassDef):
            yield from _defs(node.body, f"{prefix}{node.name}.")


def _docstring_lines(node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> range | None:
    """The line numbers of ``node``'s docstring (empty: none), or None when it shares a line with
    other code or is all of the body."""
    if ast.get_docstring(node, clean=False) is None:
        return range(0)
    doc = node.body[0]
    before = lines[doc.lineno - 1].encode("utf-8")[:doc.col_offset]  # ast's columns count UTF-8 bytes
    after = lines[doc.end_lineno - 1].encode("utf-8")[doc.end_col_offset:].strip()
    if len(node.body) == 1 or before.strip() or (after and not after.startswith(b"#")):
        return None
    return range(doc.lineno, doc.end_lineno + 1)


def read_module(group: str, module: str, source: str) -> Iterator[Function]:
    """The functions of ``module``'s ``source`` (see the module docstring for which)."""
    lines = source.splitlines()
    for name, node in _defs(ast.parse(source).body):
        skip = _docstring_lines(node, lines)
        if skip is None:
            continue
        kept = [line for n, line in enumerate(lines[node.lineno - 1:node.end_lineno], node.lineno) if n not in skip]
        doc = " ".join((ast.get_docstring(node) or "").split())
        yield Function(group, module, name, textwrap.dedent("\n".join(kept)), doc)


@lru_cache(maxsize=1)
def functions() -> tuple[Function, ...]:
    """Every function of :data:`MODULE_GROUPS`' modules on this Python, in module order, each code
    once. Read once per process (about a second)."""
    seen: set[str] = set()
    out = []
    for group, modules in MODULE_GROUPS.items():
        for module in modules:
            path = module_file(module)
            if path is None:
                continue
            for f in read_module(group, module, path.read_text(encoding="utf-8")):
                if f.code not in seen:
                    seen.add(f.code)
                    out.append(f)
    return tuple(out)


def token_spans(code: str, limit: int | None = None) -> list[tuple[int, int, int]]:
    """``(start, end, label)`` of each labelled token of ``code`` (character offsets; labels index
    :data:`TOKEN_LABELS`), for the tokens that start before character ``limit`` (None: all)."""
    starts: list[int] = []  # of the lines read so far
    lines = io.StringIO(code + "\n")

    def readline() -> str:
        starts.append(lines.tell())  # a StringIO's position counts characters
        return lines.readline()

    out: list[tuple[int, int, int]] = []
    fstring_start, depth = 0, 0  # 3.12+ splits an f-string into parts: one string here, as before
    try:
        for tok in tokenize.generate_tokens(readline):
            start, end = starts[tok.start[0] - 1] + tok.start[1], starts[tok.end[0] - 1] + tok.end[1]
            if limit is not None and start >= limit and not depth:
                break
            kind = tokenize.tok_name[tok.type]
            if kind in ("FSTRING_START", "TSTRING_START"):
                fstring_start = start if not depth else fstring_start
                depth += 1
            elif kind in ("FSTRING_END", "TSTRING_END"):
                depth -= 1
                if not depth:
                    out.append((fstring_start, end, 4))
            elif depth:
                continue
            elif tok.type == tokenize.NAME:
                out.append((start, end, 0 if keyword.iskeyword(tok.string) else 1))
            elif tok.type in _LABEL:
                out.append((start, end, _LABEL[tok.type]))
    except (tokenize.TokenError, SyntaxError):  # code the tokenizer refuses: the tokens so far
        pass
    return out


def first_pieces(offsets: list[Span], spans: list[tuple[int, int, int]], ignore: int) -> list[int]:
    """The label of each piece (a tokenizer's token, with its character ``offsets``, in order): a
    token's label on the piece its first character is in, ``ignore`` elsewhere (BERT's convention
    for words split into pieces). A piece in which two tokens start takes the first one's label;
    the second then has no piece of its own and goes unlabelled."""
    labels = np.full(len(offsets), ignore, dtype=np.int64)
    if offsets and spans:
        a, b = np.asarray(offsets, dtype=np.int64).T
        s, label = np.asarray([(x[0], x[2]) for x in spans], dtype=np.int64).T
        piece = np.searchsorted(b, s, side="right")  # the first piece that ends after the token starts
        inside = piece < len(b)
        inside[inside] = a[piece[inside]] <= s[inside]  # (not a gap the offsets leave out)
        piece, label = piece[inside], label[inside]
        first = np.unique(piece, return_index=True)[1]  # spans are in order: the first token of a piece
        labels[piece[first]] = label[first]
    return labels.tolist()
