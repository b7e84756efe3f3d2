"""What only a GPU can show, in one run and one table (called by scripts/gpu_check.sh).

Sections (each row: ok / failed / skipped, with its figures):

  options     every option of every config group (and each norm placement) trains a few steps
              through the real job path (ablate.run.run_job) under trainer=gpu (bf16-mixed)
  memory      the CUDA allocator's peak of the size=l runs below (ablate's record, plain loop)
  flex        alibi / t5_bias / kerple, causal and not: the FlexAttention path equals the
              materialised-mask path (logits and every gradient, fp32), and its step time and
              allocator peak against the mask path (bf16, long sequences)
  compile     model.compile=true against eager: step time, compile time, loss after the same
              steps; and a compiled model whose alibi bias goes through FlexAttention
  ddp         trainer=ddp on 2 GPUs through the `ablate` CLI (skipped with fewer)
  throughput  model.size=l: tokens/s and MFU of a plain PyTorch loop and of ablate (Lightning)

``--dry-run`` runs what can run on a CPU (trainer=cpu, tiny sizes, a couple of steps) and prints
the same table; rows that need CUDA say so. Nothing is downloaded: the corpus is the built-in one,
classify/tagging/glue read the repository's test fixtures, wandb is offline.

    scripts/gpu_check.sh                       # on a GPU machine, < 8 min on one H200
    scripts/gpu_check.sh --dry-run             # anywhere, about a minute
    scripts/gpu_check.sh --out DIR --budget-s 420 --only flex,compile

Why one file over ~450 lines: a device session is short and runs this script whole; its six
sections share one checker (each row isolated), one plan of sizes and one table, and each section
is a function a reader finds by its name above.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ablate.heap import imports_untraced

with imports_untraced():  # torch and Lightning, as in every ablate process (ablate.heap)
    import torch
    from omegaconf import OmegaConf

    from ablate.compose import compose
    from ablate.config import CONFIG_GROUPS
    from ablate.lit import masked_loss
    from ablate.optim import make_optimizer
    from ablate.measure import peak_flops, synchronize
    from ablate.model import SIZES, build_model
    from ablate.model.patterns import FlexScores, flex_available
    from ablate.paths import CONF_DIR
    from ablate.job import Job
    from ablate.run import run_job
    from ablate.train import build, quiet_lightning


REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
SECTIONS = ("options", "memory", "flex", "compile", "ddp", "throughput")
#: the groups whose every option runs: not the trainer (the plan's), experiments (sweeps) nor callbacks (logging)
GROUPS = tuple(g for g in CONFIG_GROUPS if g not in ("trainer", "experiment", "callbacks"))
#: what some options need to run: the other half of DeepNet, local data for task=glue (the file-based
#: tasks, classify, tagging and each glue_<name>, read the fixture directory of their name: ``needs``)
NEEDS = {
    ("norm", "deepnorm"): ["init=deepnet"],
    ("init", "deepnet"): ["norm=deepnorm"],
    ("task", "glue"): [f"task.path={FIXTURES / 'glue_sst2'}", "task.name=sst2"],
}


def needs(group: str, name: str) -> list[str]:
    """The overrides option ``group=name`` needs to run here."""
    if group == "task" and (FIXTURES / name).is_dir():
        return [f"task.path={FIXTURES / name}"]
    return NEEDS.get((group, name), [])
BIAS_POSITIONS = ("alibi", "t5_bias", "kerple")


@dataclass
class Row:
    section: str
    check: str
    status: str = "skipped"   # ok | failed | skipped
    figures: str = ""
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Plan:
    """Sizes of every section: the GPU run's, or the dry run's tiny ones."""

    dry: bool
    device: str
    trainer: str
    # options
    option_shape: list[str]
    option_steps: int
    # flex: model shape, equivalence batch, speed batch
    flex_shape: tuple[int, int, int]
    flex_eq: tuple[int, int]
    flex_speed: tuple[int, int]
    # compile and throughput
    compile_shape: list[str]
    size: str
    seq_len: int
    batch_size: int
    warmup: int
    timed: int


#: the dry run's compiled model: the tiny config's model and batches (ablate.compose.TINY), whose kernels a
#: compile on this machine (the test suite's, through the CLI) has left in inductor's on-disk cache: the
#: compile's first step then takes a second or two, not twenty
DRY_COMPILE = ["model.d_model=16", "model.n_heads=2", "model.n_layers=1", "task.seq_len=64", "task.batch_size=8"]


def make_plan(dry: bool) -> Plan:
    if dry:
        return Plan(dry=True, device="cpu", trainer="cpu",
                    option_shape=["model.d_model=16", "model.n_heads=2", "model.n_layers=1", "task.batch_size=4"],
                    option_steps=2, flex_shape=(32, 4, 1), flex_eq=(2, 32), flex_speed=(0, 0),
                    compile_shape=DRY_COMPILE, size="xs", seq_len=32, batch_size=4, warmup=1, timed=2)
    return Plan(dry=False, device="cuda", trainer="gpu",
                option_shape=["model.d_model=64", "model.n_heads=4", "model.n_layers=2", "task.batch_size=16"],
                option_steps=4, flex_shape=(512, 8, 2), flex_eq=(2, 256), flex_speed=(8, 2048),
                compile_shape=["model.size=m"], size="l", seq_len=1024, batch_size=16, warmup=5, timed=20)


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.start, self.seconds = time.perf_counter(), seconds

    def left(self) -> float:
        return self.seconds - (time.perf_counter() - self.start)


class Checker:
    """Runs the rows, each isolated (an exception fails its row only), output to a log file."""

    def __init__(self, plan: Plan, out: Path, deadline: Deadline, only: set[str]) -> None:
        self.plan, self.out, self.deadline, self.only = plan, out, deadline, only
        self.rows: list[Row] = []
        self.log = open(out / "gpu_check.log", "w")
        self.console = sys.stdout

    def say(self, text: str) -> None:
        print(text, file=self.console, flush=True)

    def row(self, section: str, check: str, fn: Callable[[], tuple[str, str, dict]] | None,
            skip: str | None = None) -> Row:
        row = Row(section, check)
        self.rows.append(row)
        if section not in self.only:
            row.figures = "not selected (--only)"
        elif skip:
            row.figures = skip
        elif self.deadline.left() <= 0:
            row.figures = "time budget spent (--budget-s)"
        else:
            started = time.perf_counter()
            try:
                with contextlib.redirect_stdout(self.log), contextlib.redirect_stderr(self.log):
                    row.status, row.figures, row.data = fn()
            except Exception as error:  # noqa: BLE001 - a failed check is a row, not the end
                row.status = "failed"
                row.figures = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:160]
                print(traceback.format_exc(), file=self.log, flush=True)
            row.data["seconds"] = round(time.perf_counter() - started, 2)
        self.say(f"[{row.section}] {row.check}: {row.status}  {row.figures}")
        return row


# ------------------------------------------------------------------------------------ helpers

def fresh_compile() -> None:
    """Forget what earlier rows compiled: each row's models compile on their own, and the rows
    together do not run into dynamo's recompile limit (past it, FlexAttention would silently run
    unfused)."""
    torch._dynamo.reset()


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


@functools.cache
def default_option(group: str) -> str:
    """The option of ``group`` that config.yaml's defaults list chooses (read once: each option's row asks)."""
    defaults = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "config.yaml").defaults)
    return next(entry[group] for entry in defaults if isinstance(entry, dict) and group in entry)


@functools.cache
def few_held_out(task: str) -> tuple[str, ...]:
    """Dry run: 4 validation and test windows of ``task`` (the keys it has), not smoke's 64: the
    evaluation's plumbing runs, in a few batches."""
    node = OmegaConf.load(CONF_DIR / "task" / f"{task}.yaml")
    return tuple(f"task.{key}=4" for key in ("n_val", "n_test") if key in node)


def mib(n: float | None) -> str:
    return "n/a" if n is None else (f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB")


def rate(tokens_per_s: float) -> str:
    return f"{tokens_per_s:,.0f} tok/s"


def rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |a| (0 for two zero tensors)."""
    scale = a.abs().max().item()
    return (a - b).abs().max().item() / scale if scale else (a - b).abs().max().item()


def precision_context(plan: Plan) -> Any:
    return torch.autocast("cuda", dtype=torch.bfloat16) if plan.device == "cuda" else contextlib.nullcontext()


def timed_steps(model: torch.nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]], plan: Plan,
                warmup: int, timed: int) -> dict[str, Any]:
    """A plain PyTorch training loop (AdamW, clipping, bf16 autocast on CUDA): seconds of each step
    (synchronised), the first step's, the last loss and the allocator peak."""
    optimizer = make_optimizer(model.parameters(), {"lr": 3e-4, "weight_decay": 0.1, "betas": (0.9, 0.95)})
    times, losses = [], []
    if plan.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for i in range(warmup + timed):
        tokens, targets = batches[i % len(batches)]
        synchronize(tokens.device)
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with precision_context(plan):
            loss = masked_loss(model(tokens), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        synchronize(tokens.device)
        times.append(time.perf_counter() - start)
        losses.append(loss.item())
    peak = torch.cuda.max_memory_allocated() if plan.device == "cuda" else None
    tokens_per_step = batches[0][0].numel()
    return {"first_s": times[0], "step_s": statistics.median(times[warmup:]),
            "tokens_per_s": tokens_per_step / statistics.median(times[warmup:]), "loss": losses[-1],
            "losses": losses, "peak_bytes": peak}


def lm_overrides(plan: Plan, shape: list[str], extra: list[str] = ()) -> list[str]:
    return [f"trainer={plan.trainer}", "logger=none", "task=lm", f"task.seq_len={plan.seq_len}",
            f"task.batch_size={plan.batch_size}", *shape, "task.n_val=32", "task.n_test=32",
            "trainer.enable_progress_bar=false", *extra]  # a shape's own length and batch win


def lm_batches(cfg: Any, plan: Plan, n: int) -> tuple[Any, torch.nn.Module, list]:
    data, model, _ = build(cfg)
    loader = iter(data.train_dataloader())
    batches = [tuple(t.to(plan.device) for t in next(loader)) for _ in range(n)]
    return data, model.to(plan.device), batches


# ------------------------------------------------------------------------------------ sections

def check_options(c: Checker) -> None:
    plan = c.plan
    base = ["smoke=true", f"trainer={plan.trainer}", f"trainer.max_steps={plan.option_steps}",
            "measure.warmup_steps=1", "trainer.enable_progress_bar=false", "logger=none", *plan.option_shape]
    if plan.dry:  # as on CUDA, where the allocator's peak replaces the (slower) tensor accounting
        base.append("measure.memory=false")
    cases = [(group, name) for group in GROUPS for name in options(group)]
    cases += [("norm.placement", p) for p in ("pre", "post", "sandwich")]
    for i, (group, name) in enumerate(cases):
        overrides = base + [f"{group}={name}", *needs(group, name)]
        if plan.dry:
            overrides += few_held_out(name if group == "task" else default_option("task"))

        def run(overrides: list[str] = overrides, i: int = i) -> tuple[str, str, dict]:
            fresh_compile()
            cfg = compose(overrides)
            job = Job(c.out / "options" / f"{i:02d}", overrides, {}, None, None,
                      torch_threads=1 if plan.dry else None)
            record = run_job(cfg, job).to_json()  # as its result.json holds it
            m = record["metrics"]
            if record["status"] != "ok":
                return "failed", f"{record['status']}: {record['error']}"[:160], {"record": str(job.dir)}
            figures = f"{rate(m['tokens_per_s'])}, loss {m['loss']:.3f}"
            if m.get("memory_source") == "cuda-allocator":
                figures += f", allocator peak {mib(m['peak_memory_bytes'])}"
            return "ok", figures, {"tokens_per_s": m["tokens_per_s"], "peak_bytes": m.get("peak_memory_bytes")}

        c.row("options", f"{group}={name}", run)


def flex_model(plan: Plan, pos: str, causal: bool) -> torch.nn.Module:
    d, heads, layers = plan.flex_shape
    cfg = compose(["logger=none", f"pos_enc={pos}", f"model.causal={str(causal).lower()}",
                   f"model.d_model={d}", f"model.n_heads={heads}", f"model.n_layers={layers}"])
    torch.manual_seed(0)
    return build_model(cfg, 256, 256, 4096).to(plan.device)


def check_flex(c: Checker) -> None:
    plan = c.plan
    missing = None if flex_available() else f"torch {torch.__version__} has no FlexAttention"
    for pos in BIAS_POSITIONS:
        for causal in (True, False):
            def equal(pos: str = pos, causal: bool = causal) -> tuple[str, str, dict]:
                fresh_compile()
                model = flex_model(plan, pos, causal)
                B, T = plan.flex_eq
                tokens = torch.randint(0, 256, (B, T), device=plan.device)
                results = {}
                for mode in ("off", "on" if plan.dry else "auto"):
                    model.flex = mode
                    assert isinstance(model.mask(tokens)[0], FlexScores) == (mode != "off"), "path not taken"
                    model.zero_grad(set_to_none=True)
                    with torch.set_grad_enabled(not plan.dry):  # torch has no CPU backward for it
                        logits = model(tokens)
                        if not plan.dry:
                            logits.float().pow(2).mean().backward()
                    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
                    results[mode] = (logits.detach(), grads)
                (ref, ref_g), (out, out_g) = results.values()
                out_err = rel_diff(ref, out)
                grad_err = max((rel_diff(ref_g[n], out_g[n]) for n in ref_g), default=0.0)
                ok = out_err < 5e-3 and grad_err < 2e-2 and set(ref_g) == set(out_g)
                grads = "grads n/a (no CPU backward)" if plan.dry else f"grads {grad_err:.1e} ({len(ref_g)} tensors)"
                return ("ok" if ok else "failed"), f"logits {out_err:.1e}, {grads} (max rel. diff, fp32)", \
                    {"logits": out_err, "grads": grad_err}

            name = f"{pos} {'causal' if causal else 'encoder'}"
            c.row("flex", f"{name}: flex = mask path", equal, skip=missing)
    for pos in BIAS_POSITIONS:
        def speed(pos: str = pos) -> tuple[str, str, dict]:
            fresh_compile()
            model = flex_model(plan, pos, True)
            B, T = plan.flex_speed
            batches = [(torch.randint(0, 256, (B, T), device="cuda"),
                        torch.randint(0, 256, (B, T), device="cuda")) for _ in range(2)]
            res = {}
            for mode in ("off", "auto"):
                model.flex = mode
                res[mode] = timed_steps(model, batches, plan, warmup=3, timed=10)
            off, on = res["off"], res["auto"]
            return "ok", (f"T={T}: flex {on['step_s'] * 1e3:.1f} ms, mask {off['step_s'] * 1e3:.1f} ms "
                          f"({off['step_s'] / on['step_s']:.2f}x); peak {mib(on['peak_bytes'])} vs "
                          f"{mib(off['peak_bytes'])}"), {"flex": on, "mask": off}

        skip = missing or ("needs CUDA" if plan.dry else None)
        c.row("flex", f"{pos} causal: step time flex vs mask (bf16)", speed, skip=skip)


def check_compile(c: Checker) -> None:
    plan = c.plan
    shape = plan.compile_shape

    def eager_vs_compiled() -> tuple[str, str, dict]:
        fresh_compile()
        res = {}
        for compiled in (False, True):
            cfg = compose(lm_overrides(plan, shape, [f"model.compile={str(compiled).lower()}"]))
            _, model, batches = lm_batches(cfg, plan, 4)
            res[compiled] = timed_steps(model, batches, plan, plan.warmup, plan.timed)
        eager, comp = res[False], res[True]
        diff = abs(eager["loss"] - comp["loss"]) / abs(eager["loss"])
        tol = 2e-2 if plan.device == "cuda" else 1e-3  # bf16 on CUDA
        return ("ok" if diff < tol else "failed"), (
            f"eager {rate(eager['tokens_per_s'])}, compiled {rate(comp['tokens_per_s'])} "
            f"({comp['tokens_per_s'] / eager['tokens_per_s']:.2f}x); first step {comp['first_s']:.0f} s; "
            f"loss rel. diff {diff:.1e} after {plan.warmup + plan.timed} steps"), {"eager": eager, "compiled": comp}

    c.row("compile", f"{' '.join(shape)}: eager vs model.compile=true", eager_vs_compiled)

    def compiled_flex() -> tuple[str, str, dict]:
        fresh_compile()
        res = {}
        for compiled in (False, True):
            cfg = compose(lm_overrides(plan, ["model.size=xs"], ["pos_enc=alibi", f"model.compile={str(compiled).lower()}"]))
            _, model, batches = lm_batches(cfg, plan, 4)
            assert isinstance(model.mask(batches[0][0])[0], FlexScores), "the flex path is not taken"
            res[compiled] = timed_steps(model, batches, plan, 3, 10)
        eager, comp = res[False], res[True]
        diff = abs(eager["loss"] - comp["loss"]) / abs(eager["loss"])
        return ("ok" if diff < 2e-2 else "failed"), (
            f"eager+flex {rate(eager['tokens_per_s'])}, compiled+flex {rate(comp['tokens_per_s'])}; "
            f"loss rel. diff {diff:.1e}"), {"eager": eager, "compiled": comp}

    c.row("compile", "model.size=xs pos_enc=alibi: compiled, bias through FlexAttention", compiled_flex,
          skip="needs CUDA (FlexAttention has no CPU backward)" if plan.dry else None)


def check_ddp(c: Checker) -> None:
    plan = c.plan
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0

    def ddp() -> tuple[str, str, dict]:
        run_dir = c.out / "ddp"
        args = [str(Path(sys.executable).parent / "ablate"), "trainer=ddp", "trainer.devices=2", "logger=none",
                "model.size=s", "task.seq_len=256", "task.batch_size=16", "trainer.max_steps=30",
                "measure.warmup_steps=5", "task.n_val=32", "task.n_test=32", "trainer.enable_progress_bar=false",
                f"hydra.run.dir={run_dir}"]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=max(30, min(180, c.deadline.left())),
                              cwd=c.out)
        print(proc.stdout, proc.stderr, file=c.log, flush=True)
        record = json.loads((run_dir / "result.json").read_text())
        m = record["metrics"]
        if record["status"] != "ok":
            return "failed", f"{record['status']}: {record['error']}"[:160], {}
        return "ok", (f"world size 2: {rate(m['tokens_per_s'])} per rank, {m['tokens']:,} tokens, "
                      f"MFU {pct(m.get('mfu'))}"), {"metrics": m}

    skip = "needs CUDA" if plan.dry else (f"needs 2 GPUs, {gpus} visible" if gpus < 2 else None)
    c.row("ddp", "trainer=ddp trainer.devices=2 (model.size=s)", ddp, skip=skip)


def check_throughput(c: Checker, memory: dict[str, Row]) -> None:
    plan = c.plan
    size, steps = plan.size, plan.warmup + plan.timed
    results: dict[str, Any] = {}

    def plain() -> tuple[str, str, dict]:
        cfg = compose(lm_overrides(plan, [f"model.size={size}"]))
        data, model, batches = lm_batches(cfg, plan, 8)
        fpt = float(model.flops_per_token(data.seq_len, data.batch_size))
        r = timed_steps(model, batches, plan, plan.warmup, plan.timed)
        peak = device_peak(plan, cfg)
        mfu = r["tokens_per_s"] * fpt / peak if peak else None
        results["plain"] = {**r, "mfu": mfu, "params": model.num_params(), "flops_per_token": fpt}
        del model, batches
        return "ok", (f"{model_line(results['plain'])}: {rate(r['tokens_per_s'])}, MFU {pct(mfu)}"), results["plain"]

    def ablate() -> tuple[str, str, dict]:
        overrides = lm_overrides(plan, [f"model.size={size}"], [f"trainer.max_steps={steps}", f"measure.warmup_steps={plan.warmup}"])
        cfg = compose(overrides)
        job = Job(c.out / "throughput", overrides, {}, None, None, torch_threads=1 if plan.dry else None)
        record = run_job(cfg, job).to_json()  # as its result.json holds it
        m = record["metrics"]
        if record["status"] != "ok":
            return "failed", f"{record['status']}: {record['error']}"[:160], {}
        results["ablate"] = m
        ratio = ""
        if "plain" in results:
            ratio = f" ({m['tokens_per_s'] / results['plain']['tokens_per_s']:.2f} of plain)"
        return "ok", f"{rate(m['tokens_per_s'])}, MFU {pct(m.get('mfu'))}{ratio}", {"metrics": m}

    c.row("throughput", f"model.size={size} T={plan.seq_len} B={plan.batch_size}: plain PyTorch loop", plain)
    c.row("throughput", f"model.size={size} T={plan.seq_len} B={plan.batch_size}: ablate (Lightning)", ablate)

    def peak_of(key: str) -> Callable[[], tuple[str, str, dict]]:
        def fn() -> tuple[str, str, dict]:
            if key not in results:
                return "skipped", "its throughput row did not run", {}
            value = results[key].get("peak_bytes") if key == "plain" else results[key].get("peak_memory_bytes")
            return "ok", f"{mib(value)} ({'torch.cuda.max_memory_allocated' if key == 'plain' else 'ablate record'})", \
                {"peak_bytes": value}
        return fn

    skip = "needs CUDA (CPU runs record tensor accounting instead)" if plan.dry else None
    memory["plain"] = c.row("memory", f"allocator peak, model.size={size} training: plain loop", peak_of("plain"),
                            skip=skip)
    memory["ablate"] = c.row("memory", f"allocator peak, model.size={size} training: ablate", peak_of("ablate"),
                             skip=skip)


def device_peak(plan: Plan, cfg: Any) -> float | None:
    if plan.device != "cuda":
        return None
    return peak_flops(torch.cuda.get_device_name(), "bf16-mixed", cfg.measure.get("peak_flops"))


def model_line(r: dict[str, Any]) -> str:
    return f"{r['params'] / 1e6:.1f}M params, {r['flops_per_token'] / 1e6:.0f} MFLOP/token"


def pct(x: float | None) -> str:
    if x is None:
        return "n/a (CPU)" if not torch.cuda.is_available() else "n/a (no peak FLOP/s known: measure.peak_flops)"
    return f"{x:.1%}"


# ------------------------------------------------------------------------------------ table

def table(rows: list[Row], header: str, seconds: float) -> str:
    widths = [max(len(r.section) for r in rows), max(len(r.check) for r in rows), 7]
    widths = [max(w, len(h)) for w, h in zip(widths, ("section", "check", "status"))]
    line = lambda a, b, s, f: f"{a:<{widths[0]}}  {b:<{widths[1]}}  {s:<{widths[2]}}  {f}".rstrip()  # noqa: E731
    out = [header, line("section", "check", "status", "figures"),
           line("-" * widths[0], "-" * widths[1], "-" * widths[2], "-" * 7)]
    order = {s: i for i, s in enumerate(SECTIONS)}
    for r in sorted(rows, key=lambda r: order[r.section]):  # stable: rows keep their order within a section
        out.append(line(r.section, r.check, r.status, r.figures))
    counts = {s: sum(r.status == s for r in rows) for s in ("ok", "failed", "skipped")}
    out.append(f"{counts['ok']} ok, {counts['failed']} failed, {counts['skipped']} skipped; {seconds:.0f} s")
    return "\n".join(out)


def environment(plan: Plan) -> str:
    if plan.device == "cuda":
        gpus = torch.cuda.device_count()
        device = f"{torch.cuda.get_device_name()} x{gpus}, CUDA {torch.version.cuda}, bf16-mixed"
    else:
        device = f"CPU ({os.cpu_count()} cores), 32-true"
    return (f"GPU check{' (DRY RUN: CPU, tiny sizes)' if plan.dry else ''}: {device}; torch {torch.__version__}; "
            f"FlexAttention {'yes' if flex_available() else 'no'}; sizes {', '.join(SIZES)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny sizes: the parts a CPU can run")
    parser.add_argument("--out", type=Path, default=None, help="where records, the log and table go (default: a new temp dir)")
    parser.add_argument("--budget-s", type=float, default=420.0,
                        help="start no row after this many seconds (default 420: the whole run stays under 8 min)")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections of {','.join(SECTIONS)}")
    args = parser.parse_args(argv)

    only = set(args.only.split(","))
    if only - set(SECTIONS):
        parser.error(f"--only: unknown section(s) {', '.join(sorted(only - set(SECTIONS)))}; valid: {', '.join(SECTIONS)}")
    if not args.dry_run and not torch.cuda.is_available():
        parser.error("no CUDA device visible; run with --dry-run for the CPU-safe parts")
    for key in ("WANDB_MODE", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):  # never download or upload
        os.environ[key] = "offline" if key == "WANDB_MODE" else "1"
    out = args.out or Path(tempfile.mkdtemp(prefix="ablate-gpu-check-"))
    out.mkdir(parents=True, exist_ok=True)
    plan = make_plan(args.dry_run)
    if plan.dry:
        torch.set_num_threads(1)  # tiny models: one thread is fastest, and fair to a shared machine
    quiet_lightning()
    checker = Checker(plan, out, Deadline(args.budget_s), only)
    checker.say(environment(plan))
    checker.say(f"records and log: {out}")

    memory: dict[str, Row] = {}
    check_throughput(checker, memory)  # first: the headline figure should not wait for the budget
    check_flex(checker)
    check_compile(checker)
    check_ddp(checker)
    check_options(checker)
    seconds = time.perf_counter() - checker.deadline.start
    text = table(checker.rows, environment(plan), seconds)
    (out / "gpu_check.txt").write_text(text + "\n")
    (out / "gpu_check.json").write_text(json.dumps([r.__dict__ for r in checker.rows], indent=1, default=str))
    checker.say("\n" + text)
    return 1 if any(r.status == "failed" for r in checker.rows) else 0


if __name__ == "__main__":
    sys.exit(main())
