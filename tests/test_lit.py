"""The Lightning module's metrics."""

from __future__ import annotations

import pytest
import torch

from ablate.lit import binary_f1, matthews_corr
from ablate.optim import warmup_cosine


def test_glue_headline_metrics_by_hand():
    # rows: true class, columns: predicted class.  TP=30, FN=10, FP=5, TN=55
    conf = torch.tensor([[55, 5], [10, 30]])
    assert binary_f1(conf) == pytest.approx(2 * 30 / (2 * 30 + 5 + 10))
    # binary MCC: (TP·TN − FP·FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN))
    mcc = (30 * 55 - 5 * 10) / ((35 * 40 * 60 * 65) ** 0.5)
    assert matthews_corr(conf) == pytest.approx(mcc)
    assert matthews_corr(torch.eye(3) * 7) == pytest.approx(1.0)
    assert matthews_corr(torch.tensor([[10, 0], [10, 0]])) == 0.0  # a constant predictor


def test_warmup_then_cosine_schedule():
    assert warmup_cosine(0, 10, 100, 0.1) == pytest.approx(0.1)
    assert warmup_cosine(9, 10, 100, 0.1) == pytest.approx(1.0)
    assert warmup_cosine(100, 10, 100, 0.1) == pytest.approx(0.1)
    assert warmup_cosine(55, 10, 100, 0.1) == pytest.approx(0.1 + 0.9 * 0.5)
