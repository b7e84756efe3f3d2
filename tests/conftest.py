"""Shared fixtures: run the real `ablate` console scripts in a temporary directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parent.parent


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(WANDB_MODE="offline", WANDB_SILENT="true", PYTHONUNBUFFERED="1", HYDRA_FULL_ERROR="0")
    env.update(extra)
    return env


def run_cli(args: list[str], cwd: Path, *, script: str = "ablate", env: dict[str, str] | None = None,
            timeout: float = 240) -> subprocess.CompletedProcess:
    """Run a console script of this package (as a user would) and capture its output."""
    return subprocess.run([str(BIN / script), *args], cwd=cwd, env=env or cli_env(), text=True,
                          capture_output=True, timeout=timeout)


def records(sweep_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(sweep_dir.rglob("result.json"))]


def wandb_summary(run_dir: str | Path) -> dict:
    """What wandb logged for a run, read back from its offline files with `wandb leet`."""
    out = subprocess.run([str(BIN / "wandb"), "leet", "inspect", "--summary", "--json", str(run_dir)],
                         capture_output=True, text=True, check=True, timeout=60)
    return json.loads(out.stdout)


def wandb_run_info(run_dir: str | Path) -> dict:
    """The run record of a run's .wandb log (name, group, job_type, config), via `wandb leet`."""
    out = subprocess.run([str(BIN / "wandb"), "leet", "inspect", "--json", str(run_dir)],
                         capture_output=True, text=True, check=True, timeout=60)
    return next(json.loads(line)["run"] for line in out.stdout.splitlines() if '"type":"run"' in line)


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models: one intra-op thread is fastest and immune to a busy machine."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def tiny() -> list[str]:
    """Overrides for a tiny, fast model."""
    return ["trainer=debug", "model.d_model=16", "model.n_heads=2", "model.n_layers=1", "task.batch_size=8",
            "measure.warmup_steps=2"]


# ---------------------------------------------------------------------------- the built-in options
import ablate  # noqa: E402
from ablate.components import import_target  # noqa: E402

CONF = Path(ablate.__file__).resolve().parent / "conf"


def builtin_options(group: str) -> list[str]:
    """The built-in options of a config group (the YAML files of ``ablate/conf/<group>``)."""
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def builtin_node(group: str, name: str, **overrides) -> dict:
    """An option's YAML as a plain dict (interpolations dropped), with ``overrides`` on top."""
    from omegaconf import OmegaConf

    node = OmegaConf.to_container(OmegaConf.load(CONF / group / f"{name}.yaml"), resolve=False)
    node = {k: v for k, v in node.items() if not (isinstance(v, str) and v.startswith("${"))}
    return {**node, **overrides}


def builtin_target(group: str, name: str):
    """The class (or function) that implements a built-in option."""
    return import_target(builtin_node(group, name)["_target_"])
