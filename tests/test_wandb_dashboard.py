"""wandb's settings, wandb when the world misbehaves, and every figure of a table: `logger.entity`,
`tags`, `notes` checked like the other settings; one run id per job whatever became of its earlier
attempts; a wandb host that refuses, or accepts connections and never answers; the table run's
figures and artifact when the table was not saved. Real wandb (offline files read back with
`wandb leet`), real local servers, the real CLI. (A whole sweep's runs: tests/test_table_run.py.)"""

from __future__ import annotations

import contextlib
import http.server
import json
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest
from conftest import cli_env, compose_cfg, records, run_cli, start_cli, wandb_summary
from test_report_layout import tuned_sweep
from test_table_run import artifacts, of_type, wandb_log

from ablate.config import config_problems
from ablate.report import build_table, load_records, log_to_wandb
from ablate.tracking import host_answers, wandb_mode


def test_logger_entity_tags_and_notes_are_settings_checked_like_the_others() -> None:
    good = compose_cfg(["logger.entity=my-team", "logger.tags=[a,b]", "logger.notes=why"])
    assert not [p for p in config_problems(good) if p.startswith("logger")]
    assert (good.logger.entity, list(good.logger.tags), good.logger.notes) == ("my-team", ["a", "b"], "why")
    long_tag = "x" * 65
    problems = config_problems(compose_cfg([f"logger.tags=[{long_tag}]", "logger.entity=[1]"]))
    assert f"logger.tags: '{long_tag}' must be 1 to 64 characters (wandb's limit)" in problems
    assert "logger.entity=[1] must be a string or null" in problems


def test_an_invalid_wandb_mode_is_refused_before_training(monkeypatch: pytest.MonkeyPatch) -> None:
    """WANDB_MODE is read back from the environment: a value wandb does not know is named with the
    valid ones by validation (exit 2 before any training), not warned about and run."""
    monkeypatch.setenv("WANDB_MODE", "ofline")
    problems = config_problems(compose_cfg([]))
    assert any("WANDB_MODE='ofline'" in p and "online, offline, disabled" in p for p in problems), problems
    assert not [p for p in config_problems(compose_cfg(["logger=csv"])) if "WANDB_MODE" in p]  # wandb unused
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert not [p for p in config_problems(compose_cfg([])) if "WANDB_MODE" in p]


@contextlib.contextmanager
def silent_host() -> Iterator[int]:
    """A local TCP server that accepts every connection and never answers; yields its port."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):  # the server closed
            while True:
                held.append(server.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()
        for connection in held:
            connection.close()


@contextlib.contextmanager
def answering_host() -> Iterator[int]:
    """A local HTTP server that answers every request with 404; yields its port."""
    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_error(404)

        def log_message(self, *args) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_only_a_host_that_answers_http_gets_online_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    with answering_host() as port:  # any answer counts, a 404 too
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{port}")
        assert wandb_mode() == "online"
    with contextlib.closing(socket.create_server(("127.0.0.1", 0))) as closed:
        port = closed.getsockname()[1]
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{port}")  # refused
    with pytest.warns(UserWarning, match="did not answer.*logging offline"):
        assert wandb_mode() == "offline"
    with silent_host() as port:  # accepts, never answers
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{port}")
        started = time.monotonic()
        assert not host_answers(timeout_s=0.5)
        assert time.monotonic() - started < 2


@pytest.mark.slow  # the CLI, twice
def test_a_job_rerun_after_a_kill_keeps_its_wandb_run_and_a_silent_host_costs_seconds(tmp_path: Path,
                                                                                      tiny: list[str]) -> None:
    args = [*tiny, "hydra.run.dir=run"]
    wandb_dir = tmp_path / "run" / "wandb"
    with silent_host() as port:
        env = cli_env(WANDB_MODE="online", WANDB_API_KEY="x" * 40, WANDB_BASE_URL=f"http://127.0.0.1:{port}")
        # the first attempt dies during start-up without a record (SIGKILL: no handler runs), its run begun
        first = start_cli(args, tmp_path, env=env)
        deadline = time.monotonic() + 60  # ~90 s, then a crash, before ablate fell back on a silent host
        while not list(wandb_dir.glob("offline-run-*")) and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        assert list(wandb_dir.glob("offline-run-*")), "the first attempt never started its (offline) run"
        assert not (tmp_path / "run" / "result.json").exists()

        again = run_cli(args, tmp_path, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"wandb host http://127.0.0.1:{port} did not answer" in again.stderr and "logging offline" in again.stderr
    (record,) = records(tmp_path / "run")
    assert record["status"] == "ok" and "offline-run-" in record["wandb"]["dir"]
    assert record["metrics"]["time_s"]["wandb_init"] < 15  # the probe gives up after 3 s
    # one job, one run: both attempts logged under the id the job directory keeps
    ids = {d.name.rsplit("-", 1)[-1] for d in wandb_dir.glob("*run-*") if d.is_dir() and not d.is_symlink()}
    assert ids == {record["wandb"]["id"]}
    assert (wandb_dir / "run_id").read_text().strip() == record["wandb"]["id"]
    # one folder to sync: the first attempt's (nothing to carry over: the rerun started afresh) moved aside
    assert len(list(wandb_dir.glob("offline-run-*"))) == 1
    assert len(list((wandb_dir / "earlier-attempts").glob("offline-run-*"))) == 1
    assert wandb_summary(record["wandb"]["dir"])["summary"]["status"] == "ok"


@pytest.mark.slow  # wandb's service process
def test_the_table_run_logs_every_figure_and_the_artifact_even_unsaved(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    sweep = tuned_sweep(tmp_path / "sweep")
    for path in sweep.rglob("result.json"):  # learning curves: curves.png
        record = json.loads(path.read_text())
        record["metrics"]["history"] = [{"step": k, "tokens": 100 * k, "flops": 1e6 * k, "loss": 2.0 / k,
                                         "accuracy": 0.5} for k in (1, 2, 4)]
        path.write_text(json.dumps(record))
    table = build_table(load_records(sweep))

    run_dir = log_to_wandb(table, sweep)  # as ablate-table without --save: drawn for wandb alone
    assert run_dir and not (sweep / "table.md").exists() and not (sweep / "lr.png").exists()
    assert not (sweep / "report.html").exists()
    summary = wandb_summary(run_dir)["summary"]
    assert {"ablation_table", "ablation_plot", "learning_curves", "lr_sweep"} <= set(summary)
    assert summary["lr_sweep"]["_type"] == "image-file"
    (table_artifact,) = [a for a in artifacts(wandb_log(run_dir)).values() if a["type"] == "ablation-table"]
    assert set(table_artifact["files"]) >= {"curves.png", "lr.png", "sweep.json", "table.csv", "table.md", "table.png",
                                            "table.tex", "report.html"}


def test_system_metrics_are_for_gpu_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU wandb's system charts are on, on a CPU off (they cost speed there)."""
    import torch

    from ablate.tracking import wants_system_metrics

    assert wants_system_metrics({"accelerator": "gpu"}) and wants_system_metrics({"accelerator": "cuda"})
    assert not wants_system_metrics({"accelerator": "cpu"})
    assert wants_system_metrics({"accelerator": "auto"}) == torch.cuda.is_available()
    assert wants_system_metrics(compose_cfg(["trainer=gpu"]).trainer)
    assert not wants_system_metrics(compose_cfg(["trainer=cpu"]).trainer)


@pytest.mark.slow  # wandb's service process
def test_a_run_with_system_metrics_logs_them_and_one_without_does_not(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from ablate.tracking import init_run, run_dir

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB__STATS_SAMPLING_INTERVAL", "0.2")  # wandb's x_stats_sampling_interval

    def stats_logged(on: bool, seconds: float) -> list[dict]:
        run = init_run(name=f"stats-{on}-{seconds}", group="g", job_type="train", config={},
                       dir=tmp_path / f"{on}-{seconds}", system_metrics=on)
        time.sleep(seconds)
        run.log({"x": 1})
        run.finish()
        return of_type(wandb_log(run_dir(run)), "stats")

    # several sampling intervals; on a loaded machine wandb's monitor may take longer to start its
    # first sample, so a run that logged none is tried again, twice as long, before the test says so
    for seconds in (1.5, 3.0, 6.0, 12.0):
        if logged := stats_logged(True, seconds):
            break
    assert logged, f"no system metrics were logged in runs of up to {seconds} s"
    assert not stats_logged(False, seconds)  # as long as the run with them needed


@pytest.mark.slow  # wandb's service process, `wandb leet`
def test_a_resumed_job_keeps_one_offline_folder_with_the_whole_history(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """wandb writes each attempt of a run to a new offline folder and cannot append to an old one
    (wandb_init sets a new start time and avoids an existing folder), and `wandb sync` of two folders
    of one id keeps the last. So a resumed job logs the earlier attempt's history up to its
    checkpoint's step again into its own folder, and moves the earlier folder aside: the one folder
    left holds every step, read back with `wandb leet`."""
    from ablate.tracking import STEP, carry_over_attempts, define_metrics, init_run, job_run_id, run_dir
    from ablate.wandb_history import read_history

    monkeypatch.setenv("WANDB_MODE", "offline")
    job_dir = tmp_path / "job"
    run_id = job_run_id(job_dir)

    def attempt() -> object:
        run = init_run(name="job", group="g", job_type="train", config={"a": 1}, dir=job_dir, run_id=run_id)
        define_metrics(run)
        return run

    first = attempt()
    for step in range(1, 7):  # killed after step 6; its checkpoint is from step 4
        first.log({STEP: step, "val/loss": 10.0 - step})
    first.finish(exit_code=1)
    earlier = run_dir(first)

    second = attempt()
    done = carry_over_attempts(second, job_dir, resumed_step=4)
    for step in range(5, 9):
        second.log({STEP: step, "val/loss": 20.0 - step})  # redone from step 5, other values
    second.finish()

    assert done.rows == 4 and done.moved == [Path(earlier).name] and done.problem is None
    folders = sorted((job_dir / "wandb").glob("offline-run-*"))
    assert [str(f) for f in folders] == [run_dir(second)]  # one folder to sync
    assert (job_dir / "wandb" / "earlier-attempts" / Path(earlier).name).is_dir()  # kept, out of sync's way
    expected = [(1, 9.0), (2, 8.0), (3, 7.0), (4, 6.0), (5, 15.0), (6, 14.0), (7, 13.0), (8, 12.0)]
    deadline = time.monotonic() + 30  # on a loaded machine wandb's service may still be writing the file
    while (rows := [(r[STEP], r["val/loss"]) for r in read_history(folders[0])]) != expected and \
            time.monotonic() < deadline:
        time.sleep(0.2)
    assert rows == expected
    summary = wandb_summary(folders[0])["summary"]  # wandb's own reader agrees: min over both attempts
    assert summary["val/loss"]["min"] == 6.0 and summary["val/loss"]["last"] == 12.0
