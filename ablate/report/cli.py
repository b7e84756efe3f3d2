"""``ablate-table``: the paper-style table of a (finished or partly finished) sweep directory.

    ablate-table SWEEP_DIR                        # terminal table
    ablate-table SWEEP_DIR -f latex --save        # LaTeX on stdout; table.{md,tex,csv,png} written
    ablate-table SWEEP_DIR --all-columns          # terminal: unfolded; -f latex: every column, table*
    ablate-table SWEEP_DIR --bench --save         # speed from an interleaved benchmark (ablate-bench)
    ablate-table SWEEP_DIR --columns task         # one accuracy column per task, plus avg
    ablate-table SWEEP_DIR --columns avg,speed,memory  # a fine-tune sweep: these columns only
    ablate-table SWEEP_DIR --rows a,b --test welch  # these rows in this order; Welch's test
    ablate-table SWEEP_DIR --ladder off           # a size sweep as the flat table, not a scale ladder
    ablate-table SWEEP_DIR --html                 # report.html: table, figures, runs; opens offline
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ablate.report.formats import FORMATS, print_terminal, render
from ablate.console import describe_error
from ablate.report.publish import publish
from ablate.report.ladder import LADDER_MODES
from ablate.report.records import BENCH_FILE, load_sweep, save_bench
from ablate.report.stats import TESTS
from ablate.report.webpage import REPORT_FILE
from ablate.report.table import build_table


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ablate-table", description="Paper-style table of a (finished or partly "
                                "finished) ablation sweep, built from its result.json records.")
    p.add_argument("path", help="sweep directory (searched recursively for result.json)")
    p.add_argument("--format", "-f", choices=FORMATS, default="terminal", help="output format (default: terminal)")
    p.add_argument("--all-columns", action="store_true", help="every column: the terminal table unfolded "
                   "(by default it folds to the terminal's width), the LaTeX one in a table* (by default the "
                   "paper columns: variant, accuracy, delta [CI], speed, params; a table* when wider than a column)")
    p.add_argument("--baseline", "-b", help="baseline variant: override string (qkv_sharing=independent), "
                   "label, or value (independent); default: the experiment's baseline, else the first variant")
    p.add_argument("--test", choices=TESTS, default="paired",
                   help="significance test vs the baseline: paired (paired t-test over seeds, the default: "
                   "seed s gives every variant the same data) or welch (unpaired); either is "
                   "Holm-Bonferroni-corrected across the table's comparisons")
    p.add_argument("--columns", metavar="KEY", help="pivot a swept key (e.g. task) into columns: one accuracy "
                   "column per value, plus avg; default: the experiment's columns ('none': no pivot). A fine-tune sweep's table "
                   "(finetune.tasks): the columns shown, by name (e.g. avg,speed,memory)")
    p.add_argument("--rows", metavar="A,B,C", help="the rows shown, in this order (variant keys, labels or "
                   "values, comma-separated); default: the experiment's rows, else all")
    p.add_argument("--ladder", choices=LADDER_MODES, default="auto",
                   help="a sweep with a size key swept (model.size, model.d_model, model.n_layers, model.n_heads) "
                   "is a scale ladder: rows = variants, per rung the loss and the compute multiplier vs the "
                   "baseline, then the trend with scale (auto, the default); 'off': the flat table; "
                   "'on': a ladder or an error")
    p.add_argument("--save", action="store_true", help="write table.{md,tex,csv,png} (and curves.png, lr.png "
                   "when the records support them; a ladder: scaling.png, not table.png) into the sweep directory")
    p.add_argument("--html", action="store_true", help=f"write {REPORT_FILE} into the sweep directory: one "
                   "self-contained page (the table sortable, every figure, each run's status, error and "
                   "directory, the statistics explained) that any browser opens offline")
    p.add_argument("--wandb", action=argparse.BooleanOptionalAction, default=None,
                   help="log the table, its figures and files to the sweep's wandb group, as a run of job_type 'table' "
                   "(default: on when the sweep's runs were logged to wandb)")
    p.add_argument("--bench", action="store_true", help="time all variants interleaved in this process "
                   "(ablate-bench) and use that as the speed source")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    path = Path(args.path)
    if not path.is_dir():
        print(f"ablate-table: {path} is not a directory", file=sys.stderr)
        return 2
    try:
        sweep = load_sweep(path)  # read once: the table, the page, the figures and wandb use it
    except ValueError as err:  # several sweeps under one directory (ablate.sweep.SeveralSweeps)
        print(f"ablate-table: {err}", file=sys.stderr)
        return 2
    records = sweep.records
    if not records:
        print(f"ablate-table: no result.json under {path}", file=sys.stderr)
        return 2
    bench = None
    if args.bench:
        from ablate.bench import bench_sweep

        try:
            bench = bench_sweep(records)
        except Exception as err:  # noqa: BLE001 - report, do not dump a traceback
            print(f"ablate-table: --bench failed: {type(err).__name__}: {err}", file=sys.stderr)
            return 1
    try:
        table = build_table(sweep, baseline=args.baseline, bench=bench, test=args.test, columns=args.columns,
                            rows=args.rows, ladder=args.ladder)
    except ValueError as err:
        print(f"ablate-table: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # noqa: BLE001 - one line, not a traceback
        print(f"ablate-table: the table of {path} could not be built: {describe_error(err)}", file=sys.stderr)
        return 1

    if args.format == "terminal":
        print_terminal(table, all_columns=args.all_columns, path=args.path)
    else:
        sys.stdout.write(render(table, args.format, all_columns=args.all_columns))

    wandb = bool(args.wandb or (args.wandb is None and table.wandb_group))
    if not (args.save or args.html or wandb):
        return 0
    done = publish(table, records, path, save=args.save, html=args.html, wandb=wandb)
    if args.save and args.bench and bench is not None and "markdown" in done.written:
        try:  # keep the figures the saved table was built from
            done.written["bench"] = save_bench(path, bench)
        except OSError as err:
            done.problems.append(f"{BENCH_FILE} ({describe_error(err)})")
    if done.problems:  # one line: what could not be written, and what was
        wrote = f"; wrote {', '.join(str(p) for p in done.written.values())}" if done.written else ""
        print(f"ablate-table: cannot write into {path}: {'; '.join(done.problems)}{wrote}", file=sys.stderr)
        return 2 if args.save and not done.written.get("markdown") else 1
    if done.written:
        print("wrote " + ", ".join(str(p) for p in done.written.values()), file=sys.stderr)
    if done.wandb_dir:
        print(f"wandb: table run in {done.wandb_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
