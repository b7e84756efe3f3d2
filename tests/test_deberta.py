"""DeBERTa's relative-position buckets against DeBERTa-v2's definition (He et al. 2021).

The reference below is written from the formula of ``make_log_bucket_position(relative_pos,
bucket_size, max_position)`` and the clamp of the gather that uses it in DeBERTa-v2's released
code (``clamp(bucket + bucket_size, 0, 2·bucket_size - 1)``), with relative_pos = query - key as
``build_relative_position`` builds it. ablate's ``buckets`` is bucket_size and ``max_distance`` is
max_position.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ablate.model.positions import DeBERTa


def v2_bucket(rel: int, bucket_size: int, max_position: int) -> int:
    """DeBERTa-v2's log bucket of one relative position, in float64 arithmetic."""
    mid = bucket_size // 2
    if abs(rel) <= mid:
        return rel
    log_pos = mid + math.ceil(math.log(abs(rel) / mid) / math.log((max_position - 1) / mid) * (mid - 1))
    return log_pos if rel > 0 else -log_pos


def v2_index(rel: int, bucket_size: int, max_position: int) -> int:
    """The row of the 2·bucket_size relative embeddings that DeBERTa-v2 gathers for ``rel``."""
    return min(max(v2_bucket(rel, bucket_size, max_position) + bucket_size, 0), 2 * bucket_size - 1)


def v2_indices(q_len: int, k_len: int, bucket_size: int, max_position: int) -> np.ndarray:
    """(q_len, k_len) rows for the last q_len of k_len positions attending to all k_len."""
    table = {r: v2_index(r, bucket_size, max_position) for r in range(-(k_len - 1), k_len)}
    rel = np.arange(k_len - q_len, k_len)[:, None] - np.arange(k_len)[None, :]
    return np.vectorize(table.__getitem__)(rel)


SETTINGS = [(32, 128),   # ablate's defaults (conf/pos_enc/deberta.yaml)
            (256, 512),  # DeBERTa-v2/v3's position_buckets and max_relative_positions
            (8, 128), (2, 128), (4, 5), (33, 100)]


@pytest.mark.parametrize("causal", [True, False], ids=["decoder", "encoder"])
@pytest.mark.parametrize("buckets,max_distance", SETTINGS)
def test_deberta_buckets_are_debertav2s_for_every_pair(causal, buckets, max_distance):
    pos = DeBERTa(8, 2, causal, 512, buckets=buckets, max_distance=max_distance)
    for q_len, k_len in [(1, 1), (2, 2), (17, 17), (64, 64), (255, 255), (256, 256), (512, 512), (1, 300), (7, 512)]:
        got = pos.delta(q_len, k_len, torch.device("cpu")).numpy()
        expected = v2_indices(q_len, k_len, buckets, max_distance)
        wrong = np.argwhere(got != expected)
        assert not len(wrong), (f"buckets={buckets} max_distance={max_distance} {q_len}x{k_len}: "
                                f"{len(wrong)} pairs differ, first (i, j)={tuple(wrong[0])}: "
                                f"{got[tuple(wrong[0])]} vs DeBERTa-v2's {expected[tuple(wrong[0])]}")


def test_deberta_default_buckets_by_hand():
    """mid = 16: 16 + ceil(15·ln(d/16)/ln(127/16)); 17 -> 17, 64 -> 27, 127 -> 31."""
    delta = DeBERTa(8, 2, False, 512).delta(256, 256, torch.device("cpu")) - 32  # signed buckets
    row = delta[255]  # query 255: distances 255 - j
    assert [row[255 - d].item() for d in (0, 1, 16, 17, 64, 127, 128, 255)] == [0, 1, 16, 17, 27, 31, 31, 31]
    col = delta[:, 255]  # key 255: distances i - 255 <= 0
    assert [col[255 - d].item() for d in (1, 16, 17, 64, 127, 128, 255)] == [-1, -16, -17, -27, -31, -32, -32]


@pytest.mark.parametrize("buckets,max_distance", [(32, 128), (256, 512), (8, 128), (4, 5)])
def test_deberta_buckets_are_odd_up_to_max_distance_and_clamped_beyond(buckets, max_distance):
    """As in DeBERTa-v2: b(-d) = -b(d) within ±(buckets - 1) while d < max_distance; beyond it the
    gather's clamp keeps keys before the query at +(buckets - 1) and puts keys after it at -buckets."""
    T = 2 * max_distance + 1
    delta = DeBERTa(8, 2, False, T, buckets=buckets, max_distance=max_distance).delta(T, T, torch.device("cpu"))
    mid = T // 2
    b = {d: delta[mid, mid - d].item() - buckets for d in range(-mid, mid + 1)}  # b(i - j) for query mid
    for d in range(max_distance):
        assert b[-d] == -b[d] and abs(b[d]) <= buckets - 1
    assert b[max_distance - 1] == buckets - 1 and b[1 - max_distance] == 1 - buckets
    assert all(b[d] == buckets - 1 and b[-d] == -buckets for d in range(max_distance, mid + 1))
    assert all(b[d] <= b[d + 1] for d in range(-mid, mid))  # monotone in i - j


def test_deberta_refuses_buckets_its_log_cannot_place():
    with pytest.raises(ValueError, match="buckets >= 2"):
        DeBERTa(8, 2, False, 16, buckets=1)
    with pytest.raises(ValueError, match="max_distance"):
        DeBERTa(8, 2, False, 16, buckets=32, max_distance=17)
