"""What every table layout provides: ``TableLayout``, the one interface the formats, the figures,
``report.html``, wandb and ``load`` ask a table through.

A layout is a table class: the flat ``SweepTable`` (``table``: one row per variant), the scale
ladder's ``LadderTable`` (``ladder``: per rung the loss and the compute multiplier) and a
pretrain-then-fine-tune sweep's ``FinetuneTable`` (``finetune_table``: the pretraining columns, one
per downstream task and their average). Each answers the members below from its own module; nothing
downstream asks which layout a table is. Another layout is another class with these members, and
``build_table`` choosing it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Protocol, runtime_checkable

from ablate.results import atomic_file

if TYPE_CHECKING:
    from ablate.report.records import LoadedSweep
    from ablate.report.table_columns import Column, Field


@dataclass(frozen=True)
class RunPlace:
    """Where a table summarises one run: the row (its key and label) and, when the layout puts
    part of the variant in columns (a ladder's rung, a pivot's value), that column ("" otherwise)."""

    key: str
    label: str
    column: str = ""


class Figure(NamedTuple):
    """One figure of a layout: its key (``png`` for the main one; wandb's key is ``image_key(key)``),
    its file name, what draws it to a path (returning the path, or None when the records hold
    nothing to draw; one at a time, so that a figure that fails costs only itself), and what it
    shows (``report.html``'s caption under it)."""

    key: str
    file: str
    draw: Callable[[Path], Path | None]
    caption: str


def save_png(fig: Any, path: str | Path) -> Path:
    """A layout's matplotlib figure written to ``path`` as a PNG (atomically, 120 dpi). The canvas is
    fitted to what is drawn, so a title wider than the panels (a one-panel figure, a smoke test's long
    title) is drawn whole, not cut at both sides."""
    path = Path(path)
    with atomic_file(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight")
    return path


@runtime_checkable
class TableLayout(Protocol):
    layout: str                    # "flat" | "ladder" | "finetune": wandb's config and summary say which
    shows_speed: bool              # a speed column (its rows' speed_ratio, speed_doubt), which an interleaved
                                   # re-timing can supply (measure.retime: ablate.callbacks)
    rows: list[Any]                # each with key, label, is_baseline, status, counts
    baseline: str                  # the baseline's label
    baseline_key: str
    experiment: str | None
    smoke: dict[str, list[int]] | None
    wandb_group: str | None
    wandb_project: str | None
    n_records: int
    sweep: LoadedSweep | None      # what it was built from (``build_table``)

    @property
    def pivoted(self) -> bool: ...

    def caption(self) -> str:
        """Every note of the table, "; "-joined: what its numbers are and how they were computed."""

    def columns(self) -> list[Column]:
        """The human columns (terminal, markdown, LaTeX, report.html), the variant first."""

    def csv_fields(self) -> list[Field]:
        """The CSV's and the wandb.Table's columns as ``(name, getter(table, row))``."""

    def latex_summary(self) -> str:
        """The LaTeX caption's sentence after the title: what is compared, over how many seeds."""

    def latex_note(self, all_columns: bool = False) -> str:
        """The note under the LaTeX table."""

    def figures(self) -> list[Figure]:
        """The layout's figures, its main one (key ``png``) first."""

    def image_key(self, name: str) -> str:
        """The wandb key of the figure whose key is ``name``."""

    def wandb_config(self) -> dict[str, Any]:
        """What the table run's config adds to what every table has (rows, baseline, ...)."""

    def wandb_summary(self) -> dict[str, Any]:
        """What the table run's summary adds to what every table has."""

    def statistics_terms(self) -> list[tuple[str, str]]:
        """report.html's "How to read the numbers": (term, what it is), beyond the caption."""

    def run_place(self, variant: dict[str, str]) -> RunPlace:
        """The row (and column) a run of ``variant`` (its overrides of the swept keys) is summarised in."""
