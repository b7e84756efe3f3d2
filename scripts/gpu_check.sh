#!/usr/bin/env bash
# What only a GPU can show, in one run and one summary table: every option of every group under
# trainer=gpu (bf16), the allocator peak, FlexAttention (equivalence and speed), torch.compile,
# DDP on 2 GPUs, tokens/s and MFU of model.size=l against a plain PyTorch loop.
#
#   scripts/gpu_check.sh                  # a CUDA machine; under 8 minutes on one H200
#   scripts/gpu_check.sh --dry-run        # the CPU-safe parts on CPU, tiny sizes, the same table
#   scripts/gpu_check.sh --out DIR        # keep records, log (gpu_check.log) and table (gpu_check.txt) in DIR
#   scripts/gpu_check.sh --only flex,compile --budget-s 300
#
# Downloads nothing (built-in corpus, the repository's test fixtures, wandb offline).
# Exit status: 0 when no row failed, 1 otherwise, 2 on bad arguments.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${ABLATE_PYTHON:-$repo/.venv/bin/python}"
[[ -x "$python" ]] || python="$(command -v python3)"
export WANDB_MODE=offline HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1
exec "$python" "$repo/scripts/gpu_check.py" "$@"
