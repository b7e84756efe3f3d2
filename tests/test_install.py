"""As a user would: `pip install .` (not editable) into a fresh venv, then the example package.

One throwaway venv per module, outside the repo. It reuses the main venv's torch, Lightning,
Hydra, wandb, pip and setuptools through a ``.pth`` line naming the main venv's site-packages:
such a line is appended to ``sys.path``, but the ``.pth`` files of that directory (among them
the editable-install finder of ``ablate``) are not processed, so the venv imports its own,
non-editable copy of ``ablate``. Both packages are installed from a copy of the working tree
(a fresh clone, as far as pip can tell), so the build leaves no ``build/`` or ``*.egg-info``
behind in the repo. Every command then runs through the venv's own console scripts, from an
empty directory.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conftest import REPO, cli_env, records, wandb_run_info, wandb_summary

from ablate.compose import tiny_overrides

pytestmark = pytest.mark.slow  # pip install into a fresh venv, then its console scripts

MAIN_PYTHON = REPO / ".venv" / "bin" / "python"
EXAMPLE_CONF_REL = Path("examples") / "my_lab" / "conf"
EXPERIMENT = "sigmoid_count"
# the default trainer (trainer=debug where a test says so; the example's sweep: 8 steps)
TINY = tiny_overrides("task.n_test=64", "trainer.enable_progress_bar=false", without=["trainer"])
COPY_IGNORE = shutil.ignore_patterns(".venv", ".git", "__pycache__", "*.egg-info", "build", ".pytest_cache",
                                     "outputs", "multirun", "wandb")


@dataclass
class Installed:
    venv: Path
    bin: Path
    src: Path  # the copy of the working tree both packages were installed from
    site_packages: Path

    @property
    def example_conf(self) -> Path:
        return self.src / EXAMPLE_CONF_REL

    def run(self, script: str, args: list[str], cwd: Path, *, env: dict[str, str] | None = None,
            timeout: float = 240) -> subprocess.CompletedProcess:
        """One of the venv's console scripts, as a user runs it."""
        return subprocess.run([str(self.bin / script), *args], cwd=cwd, env=env or user_env(), text=True,
                              capture_output=True, timeout=timeout)


def user_env(**extra: str) -> dict[str, str]:
    """``cli_env()`` without a PYTHONPATH that could put the repo's own ``ablate`` first."""
    env = cli_env(**extra)
    if "PYTHONPATH" not in extra:
        env.pop("PYTHONPATH", None)
    return env


def _purelib(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def _pip_install(python: Path, project: Path) -> None:
    out = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                          "--disable-pip-version-check", str(project)],
                         capture_output=True, text=True, env=user_env(), timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("install")
    src = root / "src"
    shutil.copytree(REPO, src, symlinks=True, ignore=COPY_IGNORE)
    venv = root / "venv"
    # --without-pip: pip and setuptools come from the main venv through the .pth below (ensurepip
    # would put an older setuptools first on the path)
    subprocess.run([str(MAIN_PYTHON), "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site_packages = _purelib(python)
    (site_packages / "_ablate_main_venv.pth").write_text(f"{_purelib(MAIN_PYTHON)}\n")
    _pip_install(python, src)
    _pip_install(python, src / "examples" / "my_lab")
    return Installed(venv=venv, bin=venv / "bin", src=src, site_packages=site_packages)


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    """An empty working directory, outside the repo."""
    path = tmp_path / "work"
    path.mkdir()
    return path


def assert_nothing_trained(where: Path) -> None:
    assert not list(where.rglob("result.json")), "no record may be written for an invalid config"
    assert not list(where.rglob("offline-run-*")), "no wandb run may be created for an invalid config"


# ---------------------------------------------------------------------------------------------

def test_installed_ablate_runs_from_an_empty_directory(installed: Installed, cwd: Path) -> None:
    where = subprocess.run([str(installed.bin / "python"), "-c", "import ablate; print(ablate.__file__)"],
                           cwd=cwd, env=user_env(), capture_output=True, text=True, check=True)
    location = Path(where.stdout.strip()).resolve()
    assert location.is_relative_to(installed.site_packages.resolve()), location
    assert not location.is_relative_to(REPO), "the venv must import its installed copy, not the repo"

    out = installed.run("ablate", ["trainer=debug", "logger=none", *TINY], cwd)
    assert out.returncode == 0, out.stderr[-3000:]
    (record,) = records(cwd / "outputs")
    assert record["status"] == "ok"
    assert record["metrics"]["steps"] == 6


# What Hydra 1.4 does with the ``hydra.plugins`` entry point (load it, nothing else imported), then
# what Hydra 1.3 does (scan the hydra_plugins namespace package), in one fresh process.
PLUGIN_PROBE = """
import importlib.metadata as md, json
found = [e for e in md.entry_points(group="hydra.plugins") if e.name == "ablate_sweeper"]
loaded = found[0].load() if found else None
from hydra.core.config_store import ConfigStore
registered = "ablate.yaml" in ConfigStore.instance().repo.get("hydra", {}).get("sweeper", {})
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
import ablate
print(json.dumps({"entry_points": [e.value for e in found], "registered": registered,
                  "loaded": loaded and f"{loaded.__module__}.{loaded.__qualname__}",
                  "scanned": [f"{c.__module__}.{c.__qualname__}" for c in Plugins.instance().discover(Sweeper)],
                  "ablate": ablate.__file__}))
"""
SWEEPER = "hydra_plugins.ablate_sweeper.ablate_sweeper.AblateSweeper"


@pytest.mark.parametrize("install", ["editable", "non-editable"])
def test_hydra_finds_the_sweeper_by_entry_point_and_by_namespace(install: str, cwd: Path, request) -> None:
    """The editable install is the repo's own venv (scripts/setup.sh: ``pip install -e``), the other
    ``installed``; both asked from an empty directory, as Hydra would in a user's project."""
    python = MAIN_PYTHON if install == "editable" else request.getfixturevalue("installed").bin / "python"
    out = subprocess.run([str(python), "-c", PLUGIN_PROBE], cwd=cwd, env=user_env(), capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout)
    assert Path(found["ablate"]).resolve().is_relative_to(REPO) == (install == "editable"), found["ablate"]
    assert found["entry_points"] == [SWEEPER.rsplit(".", 1)[0] + ":AblateSweeper"], \
        "one hydra.plugins entry point, naming the sweeper class (pyproject.toml; reinstall after changing it)"
    assert found["loaded"] == SWEEPER
    assert found["registered"], "loading the entry point alone must register hydra/sweeper=ablate's config"
    assert SWEEPER in found["scanned"], "Hydra 1.3's scan of the hydra_plugins namespace must find it too"


def _sections(listing: str) -> dict[str, dict[str, str]]:
    """``ablate --list`` output -> {group: {option: its line}}."""
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in listing.splitlines():
        header = re.fullmatch(r"(\w+):\s*", line)
        if header:
            current = sections.setdefault(header.group(1), {})
        elif current is not None and line.startswith(" ") and line.strip():
            current[line.split()[0]] = line
    return sections


def test_list_shows_every_builtin_option_and_the_users_own(installed: Installed, cwd: Path) -> None:
    builtin_conf = REPO / "ablate" / "conf"
    groups = sorted(p.name for p in builtin_conf.iterdir() if p.is_dir())
    assert {"qkv_sharing", "pos_enc", "norm", "ffn", "init", "task"} <= set(groups)

    out = installed.run("ablate", ["--list"], cwd)
    assert out.returncode == 0, out.stderr[-2000:]
    listed = _sections(out.stdout)
    for group in groups:
        for yaml in sorted((builtin_conf / group).glob("*.yaml")):
            assert yaml.stem in listed.get(group, {}), f"{group}={yaml.stem} missing from ablate --list"
            target = OmegaConf.load(yaml).get("_target_")
            if target:
                assert target in listed[group][yaml.stem], (group, yaml.stem, listed[group][yaml.stem])
    assert "sigmoid" not in listed["qkv_sharing"]

    out = installed.run("ablate", ["--list", "--config-dir", str(installed.example_conf)], cwd)
    assert out.returncode == 0, out.stderr[-2000:]
    listed = _sections(out.stdout)
    assert "my_lab.attention.SigmoidAttention" in listed["qkv_sharing"]["sigmoid"]
    assert "my_lab.tasks.RunningCount" in listed["task"]["count"]
    assert EXPERIMENT in listed["experiment"]
    assert "independent" in listed["qkv_sharing"], "the user's options come on top of the built-in ones"


def _experiment_labels(installed: Installed) -> dict[str, str]:
    node = OmegaConf.load(installed.example_conf / "experiment" / f"{EXPERIMENT}.yaml")
    return dict(node.experiment.labels)


def _run_example(installed: Installed, cwd: Path, extra: list[str]) -> tuple[Path, list[dict]]:
    sweep = cwd / "sweep"
    out = installed.run("ablate", ["-m", "--config-dir", str(installed.example_conf), f"experiment={EXPERIMENT}",
                                   "seed=0,1", "trainer.max_steps=8", *TINY, *extra, f"hydra.sweep.dir={sweep}"],
                        cwd, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    recs = records(sweep)
    assert len(recs) == 4 and {r["status"] for r in recs} == {"ok"}, [(r["overrides"], r["status"]) for r in recs]
    assert sorted((r["choices"]["qkv_sharing"], r["config"]["seed"]) for r in recs) == [
        ("independent", 0), ("independent", 1), ("sigmoid", 0), ("sigmoid", 1)]
    assert {r["choices"]["task"] for r in recs} == {"count"}

    for name in ("table.md", "table.csv", "report.html"):  # report.html: written at the end of every sweep
        assert (sweep / name).exists(), name
    labels = _experiment_labels(installed)
    assert set(labels) == {"qkv_sharing=independent", "qkv_sharing=sigmoid"}
    with open(sweep / "table.csv", newline="") as f:
        rows = {row["variant"]: row for row in csv.DictReader(f)}
    assert set(rows) == set(labels.values()), "one row per variant, under its label"
    for row in rows.values():
        assert row["n"] == "2" and 0 <= float(row["accuracy_mean"]) <= 1
    return sweep, recs


def test_example_experiment_with_wandb_under_the_joblib_launcher(installed: Installed, cwd: Path) -> None:
    """One sweep for two things a user of the example does: its jobs run in joblib's worker processes
    (which import the user's package), and each logs its wandb run (one sweep, not one per launcher
    and one per logger: the launcher's workers are what wandb runs in under joblib)."""
    _, recs = _run_example(installed, cwd, ["logger=wandb", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2"])
    assert {r["job"]["launcher"] for r in recs} == {"joblib"}
    for r in recs:
        info = wandb_run_info(r["wandb"]["dir"])
        assert info["job_type"] == "train"  # the run's role; the variant is config.variant
        summary = wandb_summary(r["wandb"]["dir"])
        assert summary["config"]["variant"] == f"qkv_sharing={r['choices']['qkv_sharing']}"
        assert summary["summary"]["status"] == "ok"
        assert 0 <= summary["summary"]["accuracy"] <= 1


def test_users_class_with_a_wrong_signature_stops_the_sweep_before_training(installed: Installed,
                                                                             cwd: Path, tmp_path: Path) -> None:
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "bad_attn.py").write_text(
        "import torch\n\n\n"
        "class Bad(torch.nn.Module):\n"
        "    def __init__(self, dim):\n"
        "        super().__init__()\n"
        "        self.dim = dim\n")
    conf = tmp_path / "conf"
    (conf / "qkv_sharing").mkdir(parents=True)
    (conf / "qkv_sharing" / "bad.yaml").write_text("_target_: bad_attn.Bad\nname: bad\n")

    sweep = cwd / "sweep"
    out = installed.run("ablate", ["-m", "--config-dir", str(conf), "qkv_sharing=independent,bad", "trainer=debug",
                                   *TINY, f"hydra.sweep.dir={sweep}"],
                        cwd, env=user_env(PYTHONPATH=str(modules)))
    assert out.returncode == 2, (out.returncode, out.stderr[-3000:])
    assert "bad_attn.Bad" in out.stderr, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    assert_nothing_trained(cwd)
    assert_nothing_trained(tmp_path)
