"""Everything that runs inside Lightning: the LightningModule, which trains whatever model it is
given on ``(tokens, targets)`` batches, and the callbacks of a fit (checkpoints, the progress bar;
the step clock ``SpeedMeter`` and the pace check are ``ablate.meters``', the learning curve and the
callbacks that watch it ``ablate.curve``'s).

It knows nothing of variants or tasks: every task labels the positions it scores and marks the
rest ``-100`` (see docs/internals.md), so one masked cross-entropy and one accuracy serve all.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ablate.stops import Preempted  # a stop during set-up, before Lightning loads, raises it too
from ablate.optim import make_optimizer, warmup_cosine

IGNORE = -100


class Diverged(RuntimeError):
    """The training loss became non-finite; the run stops at once."""

    def __init__(self, step: int, loss: float) -> None:
        super().__init__(f"non-finite loss ({loss}) at step {step}")
        self.step = step


def masked_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """Cross-entropy over the labelled positions; float targets are a regression's (GLUE's STS-B):
    the mean squared error of the first output there."""
    if targets.is_floating_point():
        labelled = targets != IGNORE
        return F.mse_loss(logits[..., 0][labelled], targets[labelled])
    return F.cross_entropy(logits.flatten(0, -2), targets.flatten(), ignore_index=IGNORE)


def pearson(x: Tensor, y: Tensor) -> float:
    """Pearson's correlation of two vectors (0 where either is constant)."""
    x, y = x.double() - x.double().mean(), y.double() - y.double().mean()
    den = ((x * x).sum() * (y * y).sum()).sqrt()
    return float((x * y).sum() / den) if den > 0 else 0.0


def _ranks(x: Tensor) -> Tensor:
    """Ranks from 0, ties given their mean rank (as Spearman's correlation ranks them)."""
    ranks = torch.empty(len(x), dtype=torch.float64)
    ranks[x.argsort()] = torch.arange(len(x), dtype=torch.float64)
    _, tie, counts = torch.unique(x, return_inverse=True, return_counts=True)
    return torch.zeros(len(counts), dtype=torch.float64).index_add_(0, tie, ranks)[tie] / counts[tie]


def spearman(x: Tensor, y: Tensor) -> float:
    """Spearman's rank correlation: Pearson's of the ranks."""
    return pearson(_ranks(x), _ranks(y))


def pearson_spearman(predicted: Tensor, true: Tensor) -> dict[str, float]:
    """GLUE's STS-B score, the mean of Pearson's and Spearman's correlation, with each."""
    p, s = pearson(predicted, true), spearman(predicted, true)
    return {"accuracy": (p + s) / 2, "pearson": p, "spearman": s}


def matthews_corr(confusion: Tensor) -> float:
    """Matthews correlation from a (true, predicted) confusion matrix, multi-class form
    (Gorodkin 2004): (c·s − Σ_k p_k t_k) / sqrt((s² − Σ_k p_k²)(s² − Σ_k t_k²)). GLUE's CoLA metric."""
    conf = confusion.double()
    t, p, c, s = conf.sum(1), conf.sum(0), conf.trace(), conf.sum()
    den = ((s * s - (p * p).sum()) * (s * s - (t * t).sum())).sqrt()
    return float((c * s - (p * t).sum()) / den) if den > 0 else 0.0


def binary_f1(confusion: Tensor) -> float:
    """F1 of class 1 (GLUE's MRPC and QQP metric): 2·TP / (2·TP + FP + FN)."""
    tp, fp, fn = confusion[1, 1].item(), confusion[0, 1].item(), confusion[1, 0].item()
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0


def f1_accuracy(confusion: Tensor) -> float:
    """The mean of :func:`binary_f1` and accuracy: how GLUE's leaderboard scores MRPC and QQP."""
    accuracy = confusion.trace().item() / confusion.sum().item() if confusion.sum() else 0.0
    return (binary_f1(confusion) + accuracy) / 2


def text_scores(pairs: Sequence[tuple[str, str]]) -> dict[str, float]:
    """Corpus BLEU (Papineni et al. 2002) and chrF (Popović 2015) of (decoded, reference) texts, as
    sacrebleu computes them with its defaults (0–100)."""
    import sacrebleu

    hypotheses, references = [h for h, _ in pairs], [[r for _, r in pairs]]
    return {"bleu": float(sacrebleu.corpus_bleu(hypotheses, references).score),
            "chrf": float(sacrebleu.corpus_chrf(hypotheses, references).score)}


#: headline metrics computed from the confusion matrix; every other metric is plain accuracy
CONFUSION_METRICS = {"matthews_corr": matthews_corr, "f1": binary_f1, "f1_accuracy": f1_accuracy}
#: the confusion metrics whose record keeps F1 too (``Score.f1``)
F1_METRICS = ("f1", "f1_accuracy")


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, batch: tuple[Tensor, Tensor],
               clip: float | None = None) -> Tensor:
    """One optimizer step as the Trainer takes it (loss, backward, gradient clipping, step), in plain
    PyTorch: what the benchmarks time against, and outside Lightning."""
    tokens, targets = batch
    optimizer.zero_grad(set_to_none=True)
    loss = masked_loss(model(tokens), targets)
    loss.backward()
    if clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    return loss


def train_steps(model: nn.Module, optimizer: torch.optim.Optimizer, batches: Iterable[tuple[Tensor, Tensor]],
                steps: int, lr: float, clip: float | None = 1.0) -> None:
    """``steps`` of :func:`train_step` on ``batches`` with the run's schedule (warm-up over a tenth of
    the steps, cosine decay to a tenth of ``lr``), outside Lightning: for calibrations that train many
    small models in one process (``scripts/pretraining_gain.py``)."""
    for step, batch in zip(range(steps), batches):
        for group in optimizer.param_groups:
            group["lr"] = lr * warmup_cosine(step, max(1, steps // 10), steps, 0.1)
        train_step(model, optimizer, batch, clip)


class AblateModule(pl.LightningModule):
    def __init__(self, model: nn.Module, optim: Mapping[str, Any], total_steps: int,
                 val_lengths: list[int] | None = None, metric: str = "accuracy", n_classes: int = 0,
                 max_decode: int | None = None, detokenize: Callable[[Sequence[int]], str] | None = None) -> None:
        super().__init__()
        self.model = model
        self.max_decode = max_decode  # a seq2seq task's limit on greedy decoding (None: the row's end)
        self.detokenize = detokenize  # a text seq2seq task's ids -> text: BLEU and chrF of the decodings
        self._texts: dict[int, list[tuple[str, str]]] = {}  # (decoded, reference) per length
        self.optim = dict(optim)
        self.total_steps = total_steps
        self.val_lengths = list(val_lengths or [])
        self.metric, self.n_classes = metric, n_classes
        self._eval_sums: dict[int, Tensor] = {}
        self._confusion: dict[int, Tensor] = {}
        self._scores: dict[int, list[Tensor]] = {}  # a regression's (predicted, true) pairs
        self.eval_split = "test"  # what the next trainer.validate evaluates: names its logged metrics

    def forward(self, tokens: Tensor) -> Tensor:
        return self.model(tokens)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        tokens, targets = batch
        loss = masked_loss(self.model(tokens), targets)
        if not torch.isfinite(loss):
            raise Diverged(self.global_step, loss.item())
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        tokens, targets = batch
        logits = self.model(tokens)
        labelled = targets != IGNORE
        length = self.val_lengths[dataloader_idx] if self.val_lengths else tokens.shape[1]
        if targets.is_floating_point():  # a regression: squared error; the correlations at the end
            predicted, true = logits[..., 0][labelled], targets[labelled]
            loss_sum, correct = F.mse_loss(predicted, true, reduction="sum"), torch.zeros((), device=tokens.device)
            self._scores.setdefault(length, []).append(torch.stack([predicted, true]).detach().float())
        else:
            loss_sum = F.cross_entropy(logits.flatten(0, -2), targets.flatten(), ignore_index=IGNORE, reduction="sum")
            correct = (logits.argmax(-1) == targets)[labelled].sum()
        exact, rows = self._exact_matches(tokens, targets, length) if getattr(self.model, "layout", None) else (0, 0)
        sums = torch.stack([loss_sum.float(), correct.float(), labelled.sum().float(),
                            loss_sum.new_tensor(float(exact)), loss_sum.new_tensor(float(rows))])
        self._eval_sums[length] = self._eval_sums.get(length, 0) + sums.detach()
        if self.metric in CONFUSION_METRICS:
            pairs = targets[labelled] * self.n_classes + logits.argmax(-1)[labelled]
            counts = torch.bincount(pairs, minlength=self.n_classes ** 2).view(self.n_classes, self.n_classes)
            self._confusion[length] = self._confusion.get(length, 0) + counts

    def _exact_matches(self, tokens: Tensor, targets: Tensor, length: int) -> tuple[int, int]:
        """(rows whose greedy decoding is the target, EOS included; rows) of a seq2seq batch; with
        ``detokenize``, each row's decoded and reference text kept for BLEU and chrF."""
        from ablate.model.generate import greedy

        S = self.model.layout.source_len(tokens.shape[1])
        reference = targets[:, S - 1:]
        generated = greedy(self.model, tokens, self.max_decode)
        if generated.shape[1] < reference.shape[1]:  # a decoding limit short of the row: never a match there
            generated = torch.cat([generated, generated.new_full((len(generated), reference.shape[1] - generated.shape[1]),
                                                                 IGNORE)], 1)
        labelled = reference != IGNORE
        scored = labelled.any(1)  # a row without labels (a DDP rank's filler: data.datamodule.rank_share) counts nowhere
        if self.detokenize is not None:
            texts = self._texts.setdefault(length, [])
            for decoded, ref, keep in zip(generated[scored].tolist(), reference[scored].tolist(), labelled[scored].tolist()):
                texts.append((self.detokenize(decoded), self.detokenize([r for r, k in zip(ref, keep) if k])))
        return int((((generated == reference) | ~labelled).all(1) & scored).sum()), int(scored.sum())

    def on_validation_epoch_start(self) -> None:
        self._eval_sums, self._confusion, self._scores, self._texts = {}, {}, {}, {}

    def on_validation_epoch_end(self) -> None:
        for length, sums in self._eval_sums.items():
            if self.trainer.world_size > 1:  # every rank saw a shard of the held-out set
                self._eval_sums[length] = self.all_gather(sums).reshape(-1, 5).sum(0)
                if length in self._confusion:
                    gathered = self.all_gather(self._confusion[length])
                    self._confusion[length] = gathered.reshape(-1, self.n_classes, self.n_classes).sum(0)
                if length in self._scores:
                    self._scores[length] = [self._gather_pairs(torch.cat(self._scores[length], 1))]
                if length in self._texts:  # every rank's decodings, for one corpus score
                    gathered: list[Any] = [None] * self.trainer.world_size
                    torch.distributed.all_gather_object(gathered, self._texts[length])
                    self._texts[length] = [pair for part in gathered for pair in part]
        for length, e in self.eval_results().items():
            self.log_dict({f"{self.eval_split}/loss@{length}": e["loss"],
                           f"{self.eval_split}/accuracy@{length}": e["accuracy"]},
                          add_dataloader_idx=False, sync_dist=False, rank_zero_only=True)

    def _gather_pairs(self, pairs: Tensor) -> Tensor:
        """Every rank's (2, n) pairs, concatenated: padded with NaN to the longest rank's, gathered."""
        sizes = self.all_gather(torch.tensor(pairs.shape[1], device=pairs.device)).reshape(-1)
        padded = torch.full((2, int(sizes.max())), float("nan"), device=pairs.device)
        padded[:, :pairs.shape[1]] = pairs
        gathered = self.all_gather(padded).reshape(-1, 2, padded.shape[1]).permute(1, 0, 2).reshape(2, -1)
        return gathered[:, ~gathered[0].isnan()]

    @torch.no_grad()
    def evaluate(self, batches: Sequence[tuple[Tensor, Tensor]]) -> dict[str, float]:
        """Loss and headline metric over ``batches`` at the training length, in eval mode, without
        logging and without touching the last validation's results (a learning curve's point)."""
        saved, was_training = (self._eval_sums, self._confusion, self._scores, self._texts), self.training
        self._eval_sums, self._confusion, self._scores, self._texts = {}, {}, {}, {}
        self.eval()
        try:
            for tokens, targets in batches:
                self.validation_step((tokens.to(self.device), targets.to(self.device)), 0)
            (result,) = self.eval_results().values()
        finally:
            self._eval_sums, self._confusion, self._scores, self._texts = saved
            self.train(was_training)
        return result

    def eval_results(self) -> dict[str, dict[str, float]]:
        """``{length: {accuracy, loss, count}}`` of the last validation, over every labelled position.
        ``accuracy`` is the task's headline metric: plain accuracy, or for a ``CONFUSION_METRICS``
        metric that metric (plain accuracy is then kept as ``label_accuracy``, and F1 as ``f1`` where the
        metric is built on it); for a seq2seq task the exact match of greedy decoding (the teacher-forced
        token accuracy kept as ``token_accuracy``, and for text corpus ``bleu`` and ``chrf``, 0–100); for
        a regression the mean of Pearson's and Spearman's correlation (each
        kept as ``pearson``, ``spearman``)."""
        out = {}
        for length, sums in self._eval_sums.items():
            loss_sum, correct, count, exact, rows = sums.tolist()
            e = {"accuracy": correct / count, "loss": loss_sum / count, "count": int(count)}
            if rows:  # seq2seq: the greedy decoding's exact match leads; teacher-forced accuracy kept
                e.update(token_accuracy=e["accuracy"], accuracy=exact / rows)
            if length in self._confusion:
                e["label_accuracy"] = e["accuracy"]
                e["accuracy"] = CONFUSION_METRICS[self.metric](self._confusion[length])
                if self.metric in F1_METRICS:
                    e["f1"] = binary_f1(self._confusion[length])
            if length in self._scores:  # a regression: no accuracy, the correlations
                predicted, true = torch.cat(self._scores[length], 1).cpu()
                e.update(pearson_spearman(predicted, true))
            if length in self._texts:
                e.update(text_scores(self._texts[length]))
            out[str(length)] = e
        return out

    def configure_optimizers(self) -> Any:
        optimizer = make_optimizer(self.parameters(), self.optim)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: warmup_cosine(
            step, self.optim["warmup_steps"], self.total_steps, self.optim["min_lr_ratio"]))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class StepProgressBar(pl.callbacks.RichProgressBar):
    """Lightning's progress bar over a run's steps (``max_steps``: ablate trains by steps, so
    Lightning's "Epoch 0/-2" title and the logger's ``v_num`` say nothing), redrawn a few times a
    second instead of after every step: a step's hooks stay cheap (no ``.item()`` of the loss, no
    redraw per step) and the drawing thread does not take a core from training."""

    def __init__(self, refresh_rate: int = 4) -> None:
        super().__init__(refresh_rate=refresh_rate)
        self._next_draw = 0.0

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        now = time.monotonic()
        if now < self._next_draw and batch_idx + 1 < self.total_train_batches:
            return
        self._next_draw = now + 1 / self.refresh_rate
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

    def get_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, Any]:
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        return items

    def _get_train_description(self, current_epoch: int) -> str:  # Lightning's hook for the bar's title
        return f"{'Steps':{len(self.validation_description)}}"


class Checkpointer(pl.Callback):
    """Saves the whole training state to ``path`` every ``every_n_steps`` steps (0: never on a
    schedule), at the end of training when ``at_end``, and when :attr:`stop_signal` is set (by a
    signal handler), then raises :class:`Preempted`.

    The state is Lightning's checkpoint (weights, optimizer, LR scheduler, step, the callbacks'
    states: the learning curve and the step times so far) plus the RNG states of torch, NumPy and
    Python; the data stream's position is the step (``ablate.data``'s streams are pure functions of
    the seed, so a resumed job skips that many batches). Written to a temporary file and renamed, so
    a job killed while saving keeps its previous checkpoint."""

    def __init__(self, path: str | Path, every_n_steps: int = 0, at_end: bool = False) -> None:
        self.path, self.every_n_steps, self.at_end = Path(path), int(every_n_steps), at_end
        self.stop_signal: int | None = None
        self.wandb_run_id: str | None = None  # saved along, so that a resumed job continues its run
        self._trainer: pl.Trainer | None = None
        self._stepping = False  # a training step has begun: a stop waits for the step boundary

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._trainer = trainer

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        self._stepping = True

    def request_stop(self, signum: int) -> None:
        """Stop at the next step boundary, after a checkpoint (called from a signal handler); before
        the first step (data preparation, tokenizer training, a task's ``_setup``, Lightning's start)
        at once, raising :class:`Preempted` from the handler: there is nothing to save yet."""
        self.stop_signal = signum
        if not self._stepping:
            raise Preempted(self._trainer.global_step if self._trainer is not None else 0, signum, saved=False)
        # Lightning's own SIGTERM handler runs first (it chains to ours) and flags the trainer, which
        # then leaves at the end of the step it is in with a bare SystemExit: exit code 0, no checkpoint
        # at that step, no interrupted record. One path stops a job: this callback's.
        connector = getattr(self._trainer, "_signal_connector", None)
        if connector is not None:
            connector.received_sigterm = False

    def state_dict(self) -> dict[str, Any]:
        import random

        import numpy as np

        name, keys, pos, has_gauss, gauss = np.random.get_state()  # plain types: Lightning loads weights_only
        return {"torch": torch.get_rng_state(), "numpy": [name, torch.from_numpy(keys.astype(np.int64)), int(pos),
                                                          int(has_gauss), float(gauss)],
                "python": random.getstate(), "wandb_run_id": self.wandb_run_id}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        import random

        import numpy as np

        torch.set_rng_state(state["torch"])
        name, keys, pos, has_gauss, gauss = state["numpy"]
        np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
        random.setstate(state["python"])

    def save(self, trainer: pl.Trainer) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        trainer.save_checkpoint(tmp)
        if trainer.is_global_zero:
            os.replace(tmp, self.path)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        step = trainer.global_step
        if self.stop_signal is not None:
            self.save(trainer)
            raise Preempted(step, self.stop_signal)
        if self.every_n_steps and step % self.every_n_steps == 0 and step < (trainer.max_steps or 0):
            self.save(trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.at_end:  # the trained weights, kept (checkpoint.keep=true)
            self.save(trainer)


def checkpoint_state(path: str | Path) -> dict[str, Any] | None:
    """``{"step", "wandb_run_id"}`` of a checkpoint :class:`Checkpointer` saved (None if unreadable)."""
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except Exception:  # noqa: BLE001 - a torn or foreign file: start the job afresh
        return None
    own = next((v for k, v in (ckpt.get("callbacks") or {}).items() if "Checkpointer" in str(k)), {})
    return {"step": int(ckpt["global_step"]), "wandb_run_id": own.get("wandb_run_id")}
