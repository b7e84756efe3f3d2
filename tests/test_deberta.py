"""DeBERTa's relative-position buckets against DeBERTa-v2's definition (He et al. 2021).

The reference below is ``make_log_bucket_position(relative_pos, bucket_size, max_position)`` of
DeBERTa's released code (microsoft/DeBERTa, ``DeBERTa/deberta/da_utils.py``), transcribed with its
NumPy float64 arithmetic and its order of operations (``np.int`` is ``np.int64`` since NumPy 1.24),
followed by the clamp of the gather that uses it (``clamp(bucket + bucket_size, 0,
2·bucket_size - 1)``), with relative_pos = query - key as ``build_relative_position`` builds it.
ablate's ``buckets`` is bucket_size and ``max_distance`` is max_position.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ablate.model.positions import DeBERTa, deberta_delta


def make_log_bucket_position(relative_pos, bucket_size, max_position):
    """DeBERTa-v2's released function, as released (NumPy, float64)."""
    sign = np.sign(relative_pos)
    mid = bucket_size // 2
    abs_pos = np.where((relative_pos < mid) & (relative_pos > -mid), mid - 1, np.abs(relative_pos))
    with np.errstate(divide="ignore", invalid="ignore"):  # log(0) where mid = 1, in a branch not taken
        log_pos = np.ceil(np.log(abs_pos / mid) / np.log((max_position - 1) / mid) * (mid - 1)) + mid
    bucket_pos = np.where(abs_pos <= mid, relative_pos, log_pos * sign).astype(np.int64)
    return bucket_pos


def v2_indices(q_len: int, k_len: int, bucket_size: int, max_position: int) -> np.ndarray:
    """(q_len, k_len) rows of the 2·bucket_size relative embeddings that DeBERTa-v2 gathers, for the
    last q_len of k_len positions attending to all k_len."""
    rel = np.arange(k_len - q_len, k_len)[:, None] - np.arange(k_len)[None, :]
    return np.clip(make_log_bucket_position(rel, bucket_size, max_position) + bucket_size, 0, 2 * bucket_size - 1)


SETTINGS = [(32, 128),   # ablate's defaults (conf/pos_enc/deberta.yaml)
            (256, 512),  # DeBERTa-v2/v3's position_buckets and max_relative_positions
            (8, 128), (2, 128), (4, 5), (33, 100),
            # where (mid - 1)·ln(..) before the division lands an ulp above an integer at |r| =
            # max_distance - 1 (31.000000000000004 for (64, 256)): one bucket past DeBERTa's there
            (64, 256), (64, 512), (128, 512), (8, 20), (8, 6)]


@pytest.mark.parametrize("buckets,max_distance", SETTINGS)
def test_deberta_buckets_are_debertav2s_up_to_1024(buckets, max_distance):
    """Every i - j with |i - j| <= 1024, against the released function after the gather's clamp."""
    got = deberta_delta(1025, 1025, buckets, max_distance, torch.device("cpu")).numpy()
    expected = v2_indices(1025, 1025, buckets, max_distance)
    wrong = np.argwhere(got != expected)
    assert not len(wrong), (f"buckets={buckets} max_distance={max_distance}: {len(wrong)} pairs differ, "
                            f"first (i, j)={tuple(wrong[0])}: {got[tuple(wrong[0])]} vs DeBERTa-v2's "
                            f"{expected[tuple(wrong[0])]}")


def test_deberta_bucket_at_max_distance_minus_one_is_debertav2s():
    """The issue's case: r = -255 for (64, 256) is bucket -63 in the released code (index 1), not
    -64 (index 0, the row past max_distance)."""
    assert deberta_delta(256, 256, 64, 256, torch.device("cpu"))[0, 255].item() == 1
    assert make_log_bucket_position(np.array([-255, 255]), 64, 256).tolist() == [-63, 63]


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


def test_deberta_buckets_build_under_another_default_device():
    """Built on the CPU whatever the default device (the model is checked on the meta device)."""
    with torch.device("meta"):
        delta = deberta_delta(16, 16, 8, 20, torch.device("meta"))
    assert delta.device.type == "meta" and delta.shape == (16, 16)


def test_deberta_default_buckets_by_hand():
    """mid = 16: 16 + ceil(15·ln(d/16)/ln(127/16)); 17 -> 17, 64 -> 27, 127 -> 31."""
    delta = DeBERTa(8, 2, False, 512).delta(256, 256, torch.device("cpu")) - 32  # signed buckets
    row = delta[255]  # query 255: distances 255 - j
    assert [row[255 - d].item() for d in (0, 1, 16, 17, 64, 127, 128, 255)] == [0, 1, 16, 17, 27, 31, 31, 31]
    col = delta[:, 255]  # key 255: distances i - 255 <= 0
    assert [col[255 - d].item() for d in (1, 16, 17, 64, 127, 128, 255)] == [-1, -16, -17, -27, -31, -32, -32]


@pytest.mark.parametrize("buckets,max_distance", [(32, 128), (256, 512), (8, 128), (4, 5), (64, 256), (64, 512),
                                                  (128, 512), (8, 20), (8, 6)])
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
