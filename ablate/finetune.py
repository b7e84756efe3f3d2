"""Pretrain, then fine-tune (``finetune.tasks``): the fine-tune stage's jobs, and a pretrained body
loaded into a fine-tune's model.

A sweep with ``finetune.tasks=[a,b]`` pretrains its jobs (the definition: every variant x seed, as
any sweep), then fine-tunes each pretraining job on every task x fine-tune seed
(:func:`finetune_jobs`; the planner lays the stage out and validates it, the sweeper launches it
after the pretraining, ``--plan`` lists it). A fine-tune job is its pretraining job's overrides with
the task and the training length replaced::

    <pretraining overrides but task, task.*, optim.lr, optim.warmup_steps, trainer.max_steps>
    task=<name> task.causal=<the pretrained model's> <the stage's task overrides>
    trainer.max_steps=<finetune.steps> optim.lr=<finetune.lr> optim.warmup_steps=<a tenth of the steps>
    (the task's finetune.per_task.<name>.steps and .lr where set)
    finetune.from_job='<the pretraining job's directory>' finetune.seed=<k>

so its variant is its pretraining's (the table groups by it) and its ``seed`` is the pretraining's
(pairing by seed pairs pretrained checkpoints; a seed's fine-tune seeds are averaged). Its data
order and head come from :func:`run_seed` (the seed and the fine-tune seed together).

At its end a pretraining job writes :data:`PRETRAINED` in its directory (:func:`save_pretrained`:
the model's weights, its vocabulary and position table size, its attention): plain weights, kept
whatever ``checkpoint.keep`` says, since fine-tunes, later ones too, start from it. A fine-tune job
loads it (:func:`load_pretrained`), builds its model at the pretraining's vocabulary and positions,
copies every weight but the head (token embeddings with the special rows, positions, blocks, final
norm) and trains a new head for its task; ``finetune.mode=probe`` freezes the body (a linear probe).

Every family fine-tunes, from the pretraining its objective allows (``PRETRAINING_TASKS``): an encoder
after masked LM, a decoder after causal LM or span corruption, a prefix LM or an encoder–decoder after
span corruption (T5's objective). The last two read a downstream task's whole row, the encoder–decoder
as BART does (Lewis et al. 2020, §3.1: the row into both stacks, the head on the decoder's states;
``ablate.model.seq2seq``), and their fine-tunes take the causal task layout (the label at the row's
last token, which the decoder reads after the whole row).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from ablate.jobdir import job_dir_name
from ablate.sweep import FineTune, job_value, override_key

#: the weights a pretraining job leaves for its fine-tunes, in its job directory
PRETRAINED = "pretrained.pt"
#: what a fine-tune job sets itself (the pretraining's values of these keys are dropped)
REPLACED_KEYS = ("optim.lr", "optim.warmup_steps", "trainer.max_steps", "finetune.from_job", "finetune.seed")
#: a fine-tune's pretraining job before it is known (``--plan`` of a tuned sweep: its rate is chosen later)
AFTER_TUNING = "<after tuning>"
#: the pretraining tasks each family (``model.arch``, resolved) may fine-tune after: the objectives it
#: trains on (docs/seq2seq.md) that share their vocabulary with the downstream tasks
PRETRAINING_TASKS = {"decoder": ("lm", "span_corruption"), "encoder": ("mlm",),
                     "prefix_lm": ("span_corruption",), "encoder_decoder": ("span_corruption",)}


def stage(cfg: Any) -> str | None:
    """``pretrain`` or ``finetune`` for a job of a sweep with a fine-tune stage; None otherwise."""
    node = cfg.get("finetune") or {}
    if node.get("from_job"):
        return "finetune"
    return "pretrain" if node.get("tasks") else None


def run_seed(seed: int, finetune_seed: int) -> int:
    """A fine-tune's seed for its data order and head: the pretraining seed for fine-tune seed 0,
    another one per further fine-tune seed (within the seeds Lightning accepts)."""
    return (int(seed) + 1_000_003 * int(finetune_seed)) % 2**32


def _replaced(key: str) -> bool:
    return key == "task" or key.startswith("task.") or key in REPLACED_KEYS


def finetune_jobs(finetune: FineTune, pretraining: Iterable[list[str]]) -> list[list[str]]:
    """Every fine-tune job of ``pretraining`` (its jobs, as launched), per pretraining job, task, rate
    (``finetune.tune_lr``'s grid, else the task's one rate) and fine-tune seed (see the module's docstring)."""
    from ablate.model.seq2seq import SEQ2SEQ_ARCHS

    jobs = []
    for job in pretraining:
        kept = [o for o in job if not _replaced(override_key(o))]
        causal = job_value(job, "model.causal") or ("true" if finetune.causal else "false")
        if job_value(job, "model.arch") in SEQ2SEQ_ARCHS:
            causal = "true"  # their decoder side is causal whatever model.causal says: the label at the row's end
        pending = any(o.split("=", 1)[-1].startswith("<") for o in job)  # --plan: a rate not chosen yet
        name = AFTER_TUNING if pending else job_dir_name(job)
        for task in finetune.tasks:
            steps = finetune.steps_of(task)
            warmup = max(1, round(steps / 10))  # BERT's fine-tunes warm up over a tenth of their steps
            for lr in finetune.lrs_of(task):
                for seed in finetune.seeds:
                    jobs.append(kept + [f"task={task}", f"task.causal={causal}", *finetune.task_overrides.get(task, []),
                                        f"trainer.max_steps={steps}", f"optim.lr={lr!r}",
                                        f"optim.warmup_steps={warmup}", f"finetune.from_job='{name}'",
                                        f"finetune.seed={seed}"])
    return jobs


def pretraining_dir(cfg: Any, sweep_dir: str | Path | None) -> Path:
    """A fine-tune job's pretraining job directory: ``finetune.from_job`` in its sweep directory."""
    return Path(str(sweep_dir or ".")) / str(cfg.finetune.from_job)


def from_job(job: Iterable[str]) -> str | None:
    """The pretraining job directory a fine-tune job's overrides name (None: not a fine-tune job)."""
    value = job_value(job, "finetune.from_job")
    return None if value is None else value.strip("'\"")


# ---------------------------------------------------------------------------------------------
# What a pretraining leaves, and what a fine-tune loads
# ---------------------------------------------------------------------------------------------

class PretrainedError(ValueError):
    """Pretrained weights that cannot be used: missing, unreadable, or not this model's."""


@dataclass
class Pretrained:
    """A pretraining's weights as a fine-tune loads them (:data:`PRETRAINED`)."""

    state: dict[str, Any]      # the model's state dict (head included; a fine-tune leaves it out)
    vocab_size: int            # rows of the token embedding: the tokenizer's ids, then the specials
    max_len: int               # the position module's length (a learned table's size)
    causal: bool
    codec: dict[str, Any] | None  # ablate.data.vocab.TextCodec's fields (None: a pretraining without one)
    path: Path
    sha256: str


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def save_pretrained(job_dir: str | Path, model: Any, codec: Any) -> tuple[Path, str]:
    """Write ``job_dir/pretrained.pt`` (atomically: a torn file is never taken for weights) and return
    its path and SHA-256."""
    import torch

    path = Path(job_dir) / PRETRAINED
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    tmp = path.with_name(path.name + ".tmp")
    torch.save({"model": state, "vocab_size": int(model.tok_emb.num_embeddings), "max_len": int(model.pos.max_len),
                "causal": bool(model.causal), "codec": codec.__getstate__() if codec is not None else None}, tmp)
    os.replace(tmp, path)
    return path, file_sha256(path)


def load_pretrained(path: str | Path, sha256: str | None = None) -> Pretrained:
    """The weights in ``path``; raises :class:`PretrainedError` naming why they cannot be used (missing,
    unreadable, or not the file ``sha256`` says the pretraining wrote)."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise PretrainedError(f"{path} is missing")
    digest = file_sha256(path)
    if sha256 is not None and digest != sha256:
        raise PretrainedError(f"{path} is not the file its pretraining wrote (SHA-256 {digest[:12]}, "
                              f"recorded {sha256[:12]})")
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
        return Pretrained(state=dict(saved["model"]), vocab_size=int(saved["vocab_size"]),
                          max_len=int(saved["max_len"]), causal=bool(saved["causal"]), codec=saved.get("codec"),
                          path=path, sha256=digest)
    except Exception as error:  # noqa: BLE001 - a torn or foreign file: say so, do not guess
        raise PretrainedError(f"{path} cannot be read ({type(error).__name__}: {error})") from error


def pretrained_problem(job_dir: str | Path, sha256: str | None) -> str | None:
    """Why a finished pretraining's weights cannot be fine-tuned from (None when they can)."""
    try:
        load_pretrained(Path(job_dir) / PRETRAINED, sha256)
    except PretrainedError as error:
        return str(error)
    return None


def length_bound(cfg: Any) -> bool:
    """Whether the pretrained model's positions stop at the length it was built for (a learned table
    sized by the task's length: its state has a shape that follows ``max_len``); relative and fixed
    encodings (rope, alibi, sinusoidal ...) run at any length."""
    import torch

    from ablate.model.transformer import ModelSettings, option

    pos_cls, settings = option(cfg, "pos_enc")
    settings.pop("max_len", None)  # learned.yaml's follows task.seq_len: probe the class at two lengths
    model = ModelSettings.from_node(cfg["model"])
    with torch.device("meta"):
        shapes = [{k: tuple(v.shape) for k, v in pos_cls(d_model=model.d_model, n_heads=model.n_heads,
                                                          causal=model.causal, max_len=n, **settings).state_dict().items()}
                  for n in (8, 16)]
    return shapes[0] != shapes[1]


def finetune_model(cfg: Any, pretrained: Pretrained, data: Any) -> Any:
    """The fine-tune's model: built from ``cfg`` at the pretraining's vocabulary and positions, a head
    for ``data``'s task, every other weight copied from ``pretrained``; under ``finetune.mode=probe``
    only the head trains. Raises :class:`PretrainedError` when the weights do not fit."""
    from omegaconf import OmegaConf

    from ablate.model.transformer import build_model

    if data.vocab_size > pretrained.vocab_size:
        raise PretrainedError(f"task={cfg.task.name} has {data.vocab_size} token ids, more than the pretrained "
                              f"embedding's {pretrained.vocab_size}")
    bound = length_bound(cfg)
    if bound and data.max_len > pretrained.max_len:
        raise PretrainedError(f"task={cfg.task.name} runs at length {data.max_len}, beyond the pretrained "
                              f"position table's {pretrained.max_len}")
    if bound and "max_len" in cfg.pos_enc:  # the table's size is the pretraining's, not this task's length
        cfg = cfg.copy()
        OmegaConf.update(cfg, "pos_enc.max_len", pretrained.max_len, merge=False)
    model = build_model(cfg, pretrained.vocab_size, data.n_classes, pretrained.max_len if bound else data.max_len,
                        data.pad_id)
    load_body(model, pretrained, probe=(cfg.finetune.mode == "probe"))
    return model


def load_body(model: Any, pretrained: Pretrained, probe: bool = False) -> None:
    """Copy every pretrained weight but the head into ``model`` (in place); ``probe``: freeze them."""
    body = {k: v for k, v in pretrained.state.items() if not k.startswith("head.")}
    try:
        missing, unexpected = model.load_state_dict(body, strict=False)
    except RuntimeError as error:  # a shape that differs
        raise PretrainedError(f"{pretrained.path} does not fit this model: {str(error).splitlines()[-1].strip()}") \
            from error
    wrong = [k for k in missing if not k.startswith("head.")] + list(unexpected)
    if wrong:
        raise PretrainedError(f"{pretrained.path} does not fit this model: {', '.join(wrong[:4])}"
                              f"{' ...' if len(wrong) > 4 else ''} differ")
    if probe:
        for name, parameter in model.named_parameters():
            parameter.requires_grad_(name.startswith("head."))


# ---------------------------------------------------------------------------------------------
# What the planner checks before anything trains
# ---------------------------------------------------------------------------------------------

def pretraining_codec(cfg: Any) -> Any:
    """The vocabulary a pretraining job's task shares with its fine-tunes (``TextCodec``); raises
    ValueError, one line, for a task that has none (not a language model, or a pre-tokenized ``.bin``)."""
    from ablate.data import build_task
    from ablate.model.seq2seq import resolved_arch

    task = build_task(cfg.task)
    if not callable(getattr(task, "codec", None)):
        arch = resolved_arch(cfg.model.get("arch", "auto"), cfg.model.get("causal"))
        valid = " or ".join(f"task={name}" for name in PRETRAINING_TASKS[arch])
        raise ValueError(f"finetune.tasks fine-tunes a pretrained language model, but the pretraining task is "
                         f"task={cfg.task.get('name')}, which has no vocabulary to share with downstream tasks; "
                         f"pretrain model.arch={arch} with {valid}")
    return task.codec()


def downstream_codec(task: Any) -> Any:
    """The vocabulary a downstream task encodes its text with (``TextCodec``), None when it has its own."""
    from ablate.data.vocab import TextCodec

    codec = getattr(task, "codec", None)
    return codec if isinstance(codec, TextCodec) else None


def task_length(task: Any) -> int:
    """The longest length a task node runs at (``task.seq_len`` and ``task.eval_lengths``)."""
    lengths = [task.get("seq_len"), *(task.get("eval_lengths") or [])]
    return max(int(x) for x in lengths if x)


def downstream_problems(pretraining: Any, codec: Any, finetune: Any) -> tuple[list[str], list[str]]:
    """``(problems, notes)`` of fine-tuning the model of the composed pretraining config ``pretraining``
    (vocabulary ``codec``) with the composed fine-tune config ``finetune``: its task's vocabulary must
    be the pretraining's, and its length within the pretrained positions unless they extrapolate (then a
    note says so)."""
    from ablate.data import build_task

    name = finetune.task.get("name")
    try:
        task = build_task(finetune.task)
    except ValueError:  # the job's own validation names the task's problems
        return [], []
    own = downstream_codec(task)
    if own is None:
        return [f"task={name} has a vocabulary of its own ({task.vocab_size} ids), not the pretraining's "
                f"{codec.describe()}: a fine-tune needs a task that encodes its text with the pretraining "
                "tokenizer (e.g. classify, glue, py_module, py_continues, py_tokens)"], []
    if own.fingerprint != codec.fingerprint:
        fix = ("leave task.tokenizer to the fine-tune stage (it sets the pretraining's)" if "tokenizer" in finetune.task
               else f"task={name} has no task.tokenizer to set: pretrain with task.tokenizer={own.tokenizer}, or "
                    "fine-tune on a task that takes the pretraining's tokenizer (py_module, py_continues, py_tokens)")
        return [f"task={name} encodes its text with {own.describe()}, but the pretraining vocabulary is "
                f"{codec.describe()}; {fix}"], []
    pos = pretraining.pos_enc.get("name")
    pre_len = int(pretraining.pos_enc.get("max_len") or task_length(pretraining.task))
    down_len = task_length(finetune.task)
    if down_len <= pre_len:
        return [], []
    if length_bound(pretraining):
        return [f"task={name} runs at length {down_len}, but the pretrained pos_enc={pos} has a table of "
                f"{pre_len} positions and cannot extrapolate; set finetune.seq_len<={pre_len}, or pretrain at "
                f"task.seq_len>={down_len}"], []
    return [], [f"fine-tunes on task={name} run at length {down_len}, beyond the pretraining's {pre_len}: "
                f"pos_enc={pos} has no position table, so it runs at any length (extrapolating)"]
