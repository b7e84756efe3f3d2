"""The words a table prints with its numbers: the caption and its notes.

``CaptionText`` is mixed into ``SweepTable`` (``table``), so ``table.caption()`` stays a method of
the table while its sentences live here, apart from the numbers they describe; it reads only the
table's fields and properties (this module imports nothing from ``table``, which imports it).

The caption says what the accuracy column holds (the metric, or each task's), n, the test behind
the marks and the Δ column, where speed and memory come from, and where the records have them the
FLOPs, the early/final losses, the budget matched, a tuned sweep's lr grid and the runs an
EarlyStopping callback ended early (``metrics.early_stopped``: their early loss was read earlier in
training than the others'); then the baseline and that diverged/failed runs are excluded from means. It also says when the records come from a
smoke test (``smoke: true`` in their config) and when jobs ran at once on the same cores (their
``metrics.concurrent_jobs``), since the speeds of such runs come from runs competing for the CPU.
A sweep whose seeds ran in rounds (``seed=auto``) has verdicts instead of marks: its caption names
the method (group-sequential repeated CIs, the spending function, Holm across the comparisons), the
mde, α and the rounds (``rounds_note``).
"""

from __future__ import annotations

from ablate.report.stats import TEST_NAMES

#: the Lan–DeMets spending functions of ``ablate.sequential``, as the caption names them
SPENDING_NAMES = {"obrien_fleming": "O'Brien–Fleming-type", "pocock": "Pocock-type"}

# The caption's sentence on speed (SweepTable.speed_note), by where the speeds come from.
RECORDS_SPEED_NOTE = "speed: per-run median tokens/s (separate runs), mean over seeds, ratio to baseline"


def bench_speed_note(rounds: int | None) -> str:
    """The sentence on speed when it comes from ``bench.json`` (``rounds``: its rounds, if recorded)."""
    of = f" over {rounds} rounds" if rounds else ""
    return (f"speed: interleaved benchmark (ablate-bench), ratio to baseline: the median{of} of each round's "
            "tokens/s over the baseline's in that round")


def title(t) -> str:
    """A table's title: the experiment's name when it has one; a smoke test says so."""
    name = f"Ablation: {t.experiment}" if t.experiment else "Ablation"
    return f"{name} (smoke test, not a result)" if t.smoke else name


class CaptionText:
    """The caption and its notes of a ``SweepTable`` (a mixin: ``self`` is the table)."""

    def latex_summary(self) -> str:
        """The LaTeX caption's sentence after the title (``formats.latex_caption``)."""
        ns = sorted({r.n for r in self.flat}) or [0]
        metric = f"{self.metric} on the test split (%)" if len(self.metrics) < 2 else "each task's own metric (%)"
        what = f"Mean ± std over n = {_span(ns)} seeds of {metric}"
        interval = "repeated CI" if self.has_rounds else "95% CI"
        what += (f" per {self.columns_key}; avg: mean over the columns; baseline: {self.baseline}" if self.pivoted
                 else f"; Δ: difference to the baseline ({self.baseline}) in points [{interval}]")
        if self.has_rounds:
            what += (f"; verdict: different, equivalent within ±{self.rounds.mde:g} points or undecided, "
                     "seeds run in rounds")
        return what

    def latex_note(self, all_columns: bool = False) -> str:
        """The note under the LaTeX table: the test behind the marks and the Δ CIs, the correction,
        where speed comes from, the budget and tuning; the whole caption for every column or a pivot."""
        if all_columns or self.pivoted:
            return self.caption()
        parts = [f"SMOKE TEST ({self.smoke_note()}), not a result"] if self.smoke else []
        if len(self.metrics) > 1:
            parts.append(self.metric_note())
        if self.beyond_lengths is not None:
            parts.append("each run's accuracy at its own training length (task.seq_len)")
        if self.extra_lengths:
            trained = f"trained at length {self.train_length}; " if self.train_length else ""
            parts.append(f"{trained}acc@L: accuracy at evaluation length L")
        parts += [self.test_note(), self.speed_note]
        if self.sharing and self.speed_source == "records":
            parts.append(self.sharing_note())
        parts += [note for note in (self.budget_note(), self.tune_note(self.flat), self.transfer_note(),
                                    self.early_stop_note(), self.early_loss_stop_note()) if note]
        parts.append("diverged/failed runs are excluded from means")
        return "; ".join(parts) + "."

    def statistics_terms(self) -> list[tuple[str, str]]:
        """What each statistic of the table is (report.html's "How to read the numbers")."""
        if self.has_rounds:
            return self.rounds_terms()
        paired = self.test == "paired"
        return [
            ("mean ± std", "the mean over a variant's ok runs (one per seed), ± their sample standard deviation "
                           "(n − 1); diverged and failed runs are left out and counted under runs."),
            ("Δ [95% CI]", ("the mean over seeds of the variant's accuracy minus the baseline's at the same seed, "
                            "in points; the interval is that mean ± t(0.975, n − 1) × sd / √n of the paired "
                            "differences." if paired else "the variant's mean accuracy minus the baseline's, in "
                            "points; the interval uses Welch's standard error and Welch–Satterthwaite degrees of "
                            "freedom.")),
            ("* and **", f"the {'paired' if paired else 'Welch'} t-test's two-sided p-value against the baseline, "
                         f"Holm–Bonferroni-corrected across the table's {self.n_comparisons} comparison(s), is "
                         "below 0.05 (*) or 0.01 (**); p_value and p_corrected under all columns hold both."),
            ("speed, memory, FLOPs ratio", "the variant's tokens/s, peak training memory and training FLOPs over "
                                           "the baseline's: speed above 1x is faster, memory above 1x uses more."),
        ]

    def rounds_terms(self) -> list[tuple[str, str]]:
        """What each statistic of a rounds table is (report.html's "How to read the numbers")."""
        r = self.rounds
        return [
            ("mean ± std", "the mean over a variant's ok runs (one per seed), ± their sample standard deviation "
                           "(n − 1); diverged and failed runs are left out and counted under runs."),
            ("verdict", f"different: the repeated CI excludes 0; equivalent: it lies inside ±{r.mde:g} points (the "
                        "smallest effect of interest, stats.mde); undecided: neither after the rounds run so far, "
                        f"so the next round gives it more seeds; undecided at the cap: still neither after the last "
                        f"round ({r.max_seeds} seeds)."),
            ("seeds", "the paired seeds (seeds both the variant and its baseline have) the verdict rests on: a "
                      "comparison stops getting seeds once it is decided."),
            ("Δ [repeated CI]", "the mean over those seeds of the variant's accuracy minus the baseline's at the same "
                                "seed, in points, with its group-sequential repeated confidence interval at the level "
                                "the comparison was finally tested at (α over the comparisons, passed on by Holm's "
                                "step-down as others are decided): valid whichever round it stopped at, and wider "
                                "than the fixed-seed t interval at the same seeds."),
            ("p_value, p_corrected", "empty: a fixed-seed p-value (and its * and ** marks) is not valid when seeds "
                                     "are added until a comparison is decided; the verdict replaces it."),
            ("speed, memory, FLOPs ratio", "the variant's tokens/s, peak training memory and training FLOPs over "
                                           "the baseline's: speed above 1x is faster, memory above 1x uses more."),
        ]

    def rounds_note(self) -> str:
        """The caption's sentences on a rounds table's verdicts: the method, the mde, α and the rounds."""
        r, n = self.rounds, self.n_comparisons
        looks = r.looks()
        where = " in the same column" if self.pivoted else ""
        spending = SPENDING_NAMES.get(r.spending, r.spending)
        return "; ".join([
            f"verdicts: group-sequential repeated confidence intervals of the paired differences over seeds "
            f"({spending} α-spending, Lan–DeMets), Holm across {n} comparison{'s' if n != 1 else ''} "
            f"(α = {r.alpha:g} family-wise, two-sided, accuracy vs the baseline{where})",
            "different: the repeated CI excludes 0",
            f"equivalent: it lies within ±{r.mde:g} points (mde)",
            "undecided: neither yet (at the cap: after the last round)",
            f"rounds: looks at {', '.join(map(str, looks))} seeds, {self.rounds_run} of {len(looks)} run",
            "no p-values or marks: a fixed-seed p-value is not valid when seeds are added until a comparison "
            "is decided",
        ])

    def metric_note(self) -> str:
        """What the accuracy column holds: the metric, or which metric each task (row) uses."""
        if len(self.metrics) < 2:
            return f"{self.metric} on the test split (%)"
        uses = []
        for metric in self.metrics:
            rows = [r for r in self.flat if r.metric == metric]
            tasks = list(dict.fromkeys(t for r in rows for t in r.tasks))
            by_task = tasks and not any(set(r.tasks) & set(tasks) for r in self.flat if r.metric != metric)
            uses.append(f"{metric} for {'task ' if by_task else ''}"
                        + ", ".join(tasks if by_task else [r.label for r in rows]))
        return (f"accuracy: each task's own metric on the test split (%), not comparable across metrics "
                f"({'; '.join(uses)})")

    def test_note(self) -> str:
        """The caption's sentence on the marks and the Δ column (a rounds table: on its verdicts)."""
        if self.has_rounds:
            delta = ("" if self.pivoted else "; Δ: accuracy minus the baseline's in points, mean of the paired "
                     "differences over the seeds a comparison used, [its repeated CI]")
            return self.rounds_note() + delta
        n = self.n_comparisons
        marks = (f"* p<0.05, ** p<0.01: {TEST_NAMES[self.test]}, Holm–Bonferroni-corrected across "
                 f"{n} comparison{'s' if n != 1 else ''} (two-sided, accuracy vs the baseline"
                 + (" in the same column" if self.pivoted else "") + ")")
        if self.pivoted:
            return marks
        how = ("mean of the differences over the seeds both rows have" if self.test == "paired"
               else "difference of the means")
        return f"{marks}; Δ: accuracy minus the baseline's in points, {how}, [95% CI]"

    def budget_note(self) -> str | None:
        """Which training budget the variants shared (``record.budget.match``), if recorded."""
        b = self.budget
        if b is None or not b.match:
            return None
        match = b.match
        if match == "steps":
            steps = sorted(b.steps_all or ([b.steps] if b.steps else []))
            if steps:
                return f"budget: every variant trained for {_span(steps)} steps"
            return "budget: every variant trained for the same number of steps"
        if match == "tokens":
            of = f" ({_count(b.baseline_tokens)} tokens)" if b.baseline_tokens else ""
            return f"budget: training tokens matched to the baseline's{of}"
        if match == "flops":
            flops = b.baseline_train_flops
            of = f": {flops:.2g} per run".replace("e+", "e") if flops else ""
            return f"budget: training FLOPs matched to the baseline's (±1 step){of}"
        if match == "tokens_per_param":
            ratio = b.tokens_per_param
            steps = sorted(b.steps_all or [])
            return (f"budget: {ratio:g} training tokens per parameter of each run's own model" if ratio
                    else "budget: training tokens in proportion to each run's parameters") + \
                (f" ({_span(steps)} steps)" if steps else "")
        return f"budget: {match} matched"

    def early_stop_note(self) -> str | None:
        """The ok runs an EarlyStopping callback ended before their ``max_steps``
        (``metrics.early_stopped``): how many, and at which steps. Their numbers are those of a
        shorter training than the other runs'."""
        stops = self.early_stops
        if not stops:
            return None
        steps = ", ".join("?" if s is None else str(s) for s in stops.steps)
        given = sorted({m for m in stops.max_steps if m is not None})
        of = f" of {_span(given)}" if given else ""
        return (f"{stops.n} run{'s' if stops.n != 1 else ''} stopped early by EarlyStopping "
                f"(at step{'s' if stops.n != 1 else ''} {steps}{of}; counted ok, their numbers are at the step "
                "they stopped)")

    def early_loss_stop_note(self) -> str | None:
        """Where early-stopped runs' early loss was read: at ``eval.early_fraction`` of the steps each
        actually trained, so earlier in training than the other runs' (not comparable with them)."""
        if not self.early_stops or not self.has_losses:
            return None
        at = f"{self.early_fraction * 100:g}%" if self.early_fraction is not None else "eval.early_fraction"
        return (f"the early loss of a run stopped early was read at {at} of the steps it trained, not of "
                "max_steps: earlier in training than the other runs', so not comparable with theirs")

    def tune_note(self, rows: list | None = None) -> str | None:
        """A tuned sweep's sentence: the lr grid and how each variant's lr was chosen; given the
        table's ``rows`` (a flat table's, whose rows carry their lr and a Δ @ default lr column), what
        that column compares and which variants are not tuned yet."""
        t = self.tune
        if not t:
            return None
        grid = ", ".join(_lr_text(lr) for lr in t.lr)
        seeds = t.seeds
        on = f", tuning seed{'s' if len(seeds) != 1 else ''} {', '.join(map(str, seeds))}" if seeds else ""
        per = ("variant" if t.rungs != "smallest" else
               "row on its smallest rung, each larger rung reusing that lr (tune.rungs=smallest, μP)")
        note = (f"lr tuned per {per} on the validation split (grid {grid}; best validation "
                f"{t.metric or 'loss'}{on}); the rows are the runs at each variant's chosen lr")
        if t.default_lr is not None and rows is not None:
            note += f"; Δ @ default lr: the same comparison at the shared default lr {_lr_text(t.default_lr)}"
        missing = [r.label for r in rows or [] if r.lr is None]
        if missing:
            note += f"; not tuned yet (runs at the default lr shown): {', '.join(missing)}"
        return note

    def transfer_note(self) -> str | None:
        """A tuned sweep over model sizes: each group's chosen lr from the smallest size to the largest,
        and how many grid steps it moves (does the lr transfer across width? ``tuned.lr_transfer``)."""
        from ablate.report.tuned import lr_transfer
        from ablate.sweep import SIZE_KEYS

        groups = lr_transfer(self.tune, SIZE_KEYS)
        if not groups:
            return None
        parts = []
        for rest, chosen, spread in groups:
            lrs = " → ".join(f"{_lr_text(lr)} ({size.split('=', 1)[1]})" for size, lr in chosen)
            moved = "the same lr at every size" if spread == 0 else f"moves {spread} grid step{'s' if spread > 1 else ''}"
            parts.append(f"{rest or 'default'}: {lrs}, {moved}")
        return "chosen lr across sizes: " + "; ".join(parts)

    def caption(self) -> str:
        """The notes in the order a reader needs them (a smoke test's warning first), "; "-joined."""
        ns = sorted({r.n for r in self.flat}) or [0]
        n = f"n = {ns[0]}" if len(ns) == 1 else f"n = {ns[0]}–{ns[-1]}"
        baseline = f"baseline: {self.baseline}" + ("" if self.baseline_shown else " (row not shown)")
        parts = [f"{self.metric_note()}, mean ± sample std over seeds ({n} ok runs per variant)"]
        if self.pivoted:
            parts.append(f"columns: {self.columns_key}; avg: mean of the row's per-{self.columns_key} means")
        parts.append(self.test_note())
        if not self.pivoted:
            parts.append(self.speed_note)
            parts.append("memory: peak bytes per training step"
                         + (f" ({self.memory_source})" if self.memory_source else "") + ", ratio to baseline")
            if self.has_flops:
                parts.append("FLOPs: training FLOPs of a run (forward + backward: matmuls and attention "
                             "scores), mean over seeds, ratio to baseline")
            if self.has_losses:
                at = (f"{self.early_fraction * 100:g}% of training" if self.early_fraction is not None
                      else "each run's eval.early_fraction of training")
                parts.append(f"early/final loss: validation loss at {at} (eval.early_fraction; within the run) "
                             "and at its end, mean over seeds")
        for note in (self.budget_note(), self.tune_note(self.flat), self.transfer_note(), self.early_stop_note(),
                     None if self.pivoted else self.early_loss_stop_note()):
            if note:
                parts.append(note)
        parts += [baseline, "diverged/failed runs are counted in status and excluded from means"]
        if self.sharing and self.speed_source == "records" and not self.pivoted:
            parts.insert(parts.index(self.speed_note) + 1, self.sharing_note())
        if self.beyond_lengths is not None:
            parts.insert(1, "each run's accuracy at its own training length (task.seq_len)")
        if self.extra_lengths:
            trained = f"trained at length {self.train_length}; " if self.train_length else ""
            metric = self.metric if len(self.metrics) < 2 else "accuracy"
            parts.insert(1, f"{trained}acc@L: {metric} at evaluation length L")
        if self.smoke:
            parts.insert(0, f"SMOKE TEST ({self.smoke_note()}), not a result")
        return "; ".join(parts) + "."

    def smoke_note(self) -> str:
        """``20 steps, seed 0``: what the smoke test's runs were."""
        if not self.smoke:
            return ""
        steps, seeds = self.smoke.get("steps") or [], self.smoke.get("seeds") or []
        out = []
        if steps:
            out.append(f"{_span(steps)} step{'s' if steps[-1] != 1 else ''}")
        if seeds:
            out.append(f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}")
        return ", ".join(out) or "smoke=true"

    def sharing_note(self) -> str:
        """The caption's sentence on jobs that ran at once on the same cores."""
        s = self.sharing or {}
        threads = s.get("threads") or []
        each = f", {_span(threads)} torch thread{'s' if threads and threads[-1] != 1 else ''} each" if threads else ""
        cores = f" on {s['cores']} cores" if s.get("cores") else ""
        over = (" (more threads than cores)" if threads and s.get("cores")
                and threads[-1] * s["jobs"] > s["cores"] else "")
        return (f"jobs shared the machine: up to {s['jobs']} ran at once{cores}{each}{over}, so the speed "
                "ratios come from runs competing for the CPU (`ablate-table --bench` re-times the "
                "variants interleaved)")



class LadderCaptionText(CaptionText):
    """The caption of a ``LadderTable`` (``ladder``): what the loss and CM columns hold, the
    baseline curve and why that fit, the CI method, the marks and the rank agreement."""

    def latex_summary(self) -> str:
        ns = sorted({c.n for r in self.rows for c in r.cells.values()}) or [0]
        return (f"Compute multiplier (CM) at equal loss of each variant vs the baseline ({self.baseline}) "
                f"per model size [95% CI] and its trend with scale; n = {_span(ns)} seeds per cell")

    def latex_note(self, all_columns: bool = False) -> str:
        """The whole caption: it describes every column of a ladder."""
        return self.caption()

    def statistics_terms(self) -> list[tuple[str, str]]:
        return []  # the caption, one note per line, explains every statistic of a ladder

    def caption(self) -> str:
        ladder, curve = self.ladder, self.ladder.curve
        ns = sorted({c.n for r in self.rows for c in r.cells.values()}) or [0]
        parts = [f"loss: final validation loss ({self.loss_source}), mean ± sample std over seeds "
                 f"(n = {_span(ns)} per cell); rungs ({', '.join(self.size_keys)}) ordered by mean training "
                 "FLOPs: " + ", ".join(f"{r} {sci(self.rung_flops[r])}" for r in self.rungs),
                 "CM: compute multiplier at equal loss, C_baseline(L_variant) / C_variant (the compute the "
                 "baseline needs for the variant's loss over the variant's; 2.00x: the variant reaches it "
                 "with half the compute), [95% CI]"]
        if curve is not None:
            parts.append(f"baseline curve: {curve.kind} ({ladder.curve_reason})")
        else:
            parts.append(f"no baseline curve, so no CM: {ladder.curve_reason}")
        parts.append(f"CI: parametric bootstrap over seeds (B = {self.n_boot}; each cell's mean loss drawn from "
                     "Student's t with the seeds' spread pooled over the variants at its rung, the baseline "
                     "curve refitted in each replicate; from 3 rungs the union of the interpolated and the "
                     "power-law curve's intervals; 2 rungs: no CI)")
        parts.append("† extrapolated: the variant's loss lies outside the baseline's measured loss range, "
                     "so its C_baseline is read off the curve beyond the data")
        parts.append("trend: slope of log CM against log training FLOPs over the rungs [95% CI]; "
                     "‡ scale-dependent (the CI excludes 0; a verdict from 4 rungs, none from 3)")
        reasons = list(dict.fromkeys(t.reason for r in self.rows if r.trend is not None and r.trend.reason
                                     for t in [r.trend]))
        if reasons:
            parts.append("trend notes: " + "; ".join(reasons))
        ranks = ladder.ranks
        if ranks.tau is not None:
            acc = ranks.decision_accuracy
            parts.append(f"Kendall's τ smallest vs largest rung = {ranks.tau:+.2f}, decision accuracy = "
                         f"{acc:.2f} (fraction of variant pairs the smallest rung orders as the largest does)")
        else:
            parts.append(f"rank agreement: none ({ranks.reason})")
        for note in (self.budget_note(), self.tune_note(), self.transfer_note(), self.early_stop_note()):
            if note:
                parts.append(note)
        parts.append(f"baseline: {self.baseline}")
        dropped = f"; {self.n_left_out} ok runs without usable training FLOPs or loss left out" if self.n_left_out else ""
        parts.append(f"diverged/failed runs are counted in status and excluded{dropped}")
        if self.smoke:
            parts.insert(0, f"SMOKE TEST ({self.smoke_note()}), not a result")
        return "; ".join(parts) + "."


def sci(value: float) -> str:
    """``1.2e12``: FLOPs, compactly."""
    mantissa, exp = f"{value:.1e}".split("e")
    return f"{mantissa}e{int(exp)}"


def _span(values: list[int]) -> str:
    return str(values[0]) if values[0] == values[-1] else f"{values[0]}–{values[-1]}"


def _count(value: float) -> str:
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= div:
            return f"{value / div:.3g}{unit}"
    return f"{value:.0f}"


def _lr_text(lr: float) -> str:
    return f"{float(lr):g}"

