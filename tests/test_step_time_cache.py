"""The per-user cache of step times (``ablate.step_times``) is advisory: a malformed one never stops
``--plan``, a sweep's start or its end. Each bad entry is left out with one note naming the cache
file and the entry; the good ones still give their estimates; ``remember`` writes the good ones
back. In process: test_planner's planner, ``preview`` and ``start_line`` as ``--plan`` and a
sweep's first line call them."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Callable

import pytest
from test_plan_estimate import SWEEP
from test_planner import planner

from ablate import preview as preview_module
from ablate.preview import preview, render, start_line
from ablate.step_times import cache_path, recall, remember

FIRST = "qkv_sharing=independent"   # the variant whose entry is made bad
SECOND = "qkv_sharing=qk_shared"    # the variant whose entry stays good
UNRELATED = "0123456789abcdef0123"  # another setting's key


@pytest.fixture(scope="module")
def good_cache(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real cache of SWEEP's two variants, their steps timed as ``--plan`` times them."""
    where = tmp_path_factory.mktemp("cache")
    before, cap = os.environ.get("ABLATE_CACHE_DIR"), preview_module.TIMING_CAP_S
    os.environ["ABLATE_CACHE_DIR"], preview_module.TIMING_CAP_S = str(where), 0.0  # the fewest steps timed
    try:
        p = planner(SWEEP)
        preview(p, p.plan(), where / "sweep")
        cache = json.loads(cache_path().read_text())
    finally:
        preview_module.TIMING_CAP_S = cap
        if before is None:
            os.environ.pop("ABLATE_CACHE_DIR")
        else:
            os.environ["ABLATE_CACHE_DIR"] = before
    assert len(cache) == 2
    return cache


def _first_key(p, plan) -> str:
    """The cache key of FIRST's step times (where ``--plan`` looks them up)."""
    from ablate.preview import _job_share
    from ablate.step_times import device_name, step_time_key

    cfg = p.compose(plan.jobs[0])
    threads, parallel = _job_share(p.config, len(plan.jobs))
    return step_time_key(cfg, threads, parallel, device_name(cfg))


def _nan(cache: dict, first: str) -> str:
    cache[first]["samples"][0]["step_s"] = math.nan
    return json.dumps(cache)  # NaN, as Python's json writes and reads it


def _entry(value: Any) -> Callable[[dict, str], str]:
    def corrupt(cache: dict, first: str) -> str:
        cache[first] = value
        return json.dumps(cache)
    return corrupt


def _yesterday(cache: dict, first: str) -> str:
    cache[UNRELATED] = {"samples": [dict(cache[first]["samples"][0], id="x")], "at": "yesterday"}
    return json.dumps(cache)


ENTRY_FORMS = {"NaN step time": _nan, "a string": _entry("fast"), "a list": _entry([0.1, 0.2]),
               "no samples": _entry({"at": 1.0}), "at yesterday": _yesterday}
FILE_FORMS = {"not JSON": lambda cache, first: "{not json", "a JSON list": lambda cache, first: "[1, 2]"}


@pytest.mark.parametrize("form", list(ENTRY_FORMS))
def test_a_bad_entry_is_named_once_and_left_out(form: str, good_cache: dict, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    p = planner(SWEEP)
    plan = p.plan()
    first = _first_key(p, plan)
    path = cache_path()
    path.parent.mkdir(exist_ok=True)  # (validating the plan may have made it)
    path.write_text(ENTRY_FORMS[form](json.loads(json.dumps(good_cache)), first))
    bad = UNRELATED if form == "at yesterday" else first

    shown = preview(p, plan, tmp_path / "sweep", time_steps=False)  # --plan
    text = render(shown)
    line = start_line(p, plan, tmp_path / "sweep")                   # a sweep's first line
    notes = [n for n in capsys.readouterr().err.splitlines() if "step-time cache" in n]
    assert len(notes) == 1 and str(path) in notes[0] and repr(bad) in notes[0], notes
    assert shown.estimates[SECOND].source == "timed earlier"  # the good entry still counts
    if bad == first:
        assert FIRST not in shown.estimates and "for an estimate: ablate --plan" in line
    else:
        assert shown.estimated and "about" in line
    assert "nan" not in text.lower()

    remember({"fresh": [{"step_s": 0.5, "source": "timed"}], "broken": [{"step_s": math.nan, "source": "timed"}]})
    kept = json.loads(path.read_text())  # the good entries and the new one; the bad one and the NaN left out
    assert set(kept) == {k for k in good_cache if k != bad} | {"fresh"}
    assert recall("fresh")[0]["step_s"] == 0.5 and recall(bad) == []
    assert capsys.readouterr().err.count("step-time cache") == 0  # named once per process, not per read


@pytest.mark.parametrize("form", list(FILE_FORMS))
def test_a_file_that_is_no_cache_is_ignored_and_kept_aside(form: str, good_cache: dict, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    p = planner(SWEEP)
    plan = p.plan()
    path = cache_path()
    path.parent.mkdir(exist_ok=True)  # (validating the plan may have made it)
    path.write_text(FILE_FORMS[form](good_cache, ""))
    original = path.read_text()

    shown = preview(p, plan, tmp_path / "sweep", time_steps=False)
    assert shown.estimates == {} and "for an estimate" in start_line(p, plan, tmp_path / "sweep")
    notes = [n for n in capsys.readouterr().err.splitlines() if "step-time cache" in n]
    assert len(notes) == 1 and str(path) in notes[0] and "ignoring it" in notes[0], notes

    remember({"fresh": [{"step_s": 0.5, "source": "timed"}]})
    assert set(json.loads(path.read_text())) == {"fresh"}
    assert path.with_name("step_times.json.unreadable").read_text() == original  # nothing written is lost


def test_a_sweeps_end_keeps_its_step_times_beside_a_bad_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a sweep's end does with its records' step times (``remember(record_samples(...))``)."""
    from ablate.step_times import record_samples
    from ablate.record import JobEntry, Metrics, Record

    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    path = cache_path()
    path.parent.mkdir(exist_ok=True)  # (validating the plan may have made it)
    path.write_text(json.dumps({UNRELATED: {"samples": [{"step_s": 0.1}], "at": "yesterday"}}))
    record = Record(status="ok", config={"model": {"d_model": 16}}, job=JobEntry(dir="a", started_at=1.0),
                    metrics=Metrics(step_time_s={"median": 0.02}, steps=10, wall_time_s=3.0))
    samples = record_samples([record])
    remember(samples)
    (key,) = samples
    assert set(json.loads(path.read_text())) == {key} and recall(key)[0]["step_s"] == 0.02
