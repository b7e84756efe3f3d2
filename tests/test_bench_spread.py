"""``ablate-bench``'s spread: each variant's ratio to the baseline round by round, from a real
interleaved timing, and the warning when the rounds disagree."""

from __future__ import annotations

from conftest import compose_cfg

from ablate.bench import DISAGREE, round_spread, spread_lines
from ablate.compose import tiny_overrides
from ablate.timing import interleaved

TINY = tiny_overrides("logger=none")


def test_the_per_round_ratios_are_shown_and_disagreeing_rounds_warned(one_thread) -> None:
    configs = {"qkv_sharing=independent": compose_cfg([*TINY, "qkv_sharing=independent"]),
               "qkv_sharing=qk_shared": compose_cfg([*TINY, "qkv_sharing=qk_shared"])}
    result = interleaved(configs, rounds=8, steps_per_round=3, warmup_rounds=1)
    rounds = {key: v["round_tokens_per_s"] for key, v in result["variants"].items()}
    assert all(len(r) == 8 for r in rounds.values())

    spread = round_spread(result, "qkv_sharing=independent")
    assert spread["qkv_sharing=independent"]["median"] == 1.0
    shared = spread["qkv_sharing=qk_shared"]
    ratios = sorted(v / b for v, b in zip(rounds["qkv_sharing=qk_shared"], rounds["qkv_sharing=independent"]))
    assert (shared["min"], shared["max"], shared["rounds"]) == (ratios[0], ratios[-1], 8)
    assert shared["min"] <= shared["q25"] <= shared["median"] <= shared["q75"] <= shared["max"]
    lines = spread_lines(result, "qkv_sharing=independent")
    assert any(line.startswith("qkv_sharing=qk_shared") and "IQR" in line and "min-max" in line for line in lines)
    print(f"\nper-round ratio IQR / median here: {(shared['q75'] - shared['q25']) / shared['median']:.3f}")

    # the same rounds with the baseline's every other round twice as fast (a load that came and went
    # between the variants' turns): the ratios disagree and one line says so
    loaded = {k: v for k, v in result.items() if k != "variants"}
    loaded["variants"] = {key: dict(v) for key, v in result["variants"].items()}
    base = loaded["variants"]["qkv_sharing=independent"]
    base["round_tokens_per_s"] = [t * (2 if i % 2 else 1) for i, t in enumerate(base["round_tokens_per_s"])]
    warned = [line for line in spread_lines(loaded, "qkv_sharing=independent") if line.startswith("warning:")]
    assert len(warned) == 1 and "qkv_sharing=qk_shared" in warned[0] and f"{DISAGREE:.0%}" in warned[0]
