#!/usr/bin/env bash
# Create .venv and install ablate with its test tools. Idempotent: reruns are quick.
# torch: a CUDA build where an NVIDIA GPU is visible; otherwise a CPU build (a CPU wheel already
# on this machine if pip can find one offline, else PyTorch's CPU index), never the multi-GB
# CUDA build on a CPU-only machine.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)

if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "setup: NVIDIA GPU found: installing torch (CUDA build)"
    "${pip[@]}" "torch>=2.4"
  elif "${pip[@]}" --no-index --no-deps "torch>=2.4" 2>/dev/null; then
    # a torch wheel this machine already holds (pip's find-links); its dependencies from the index
    version=$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('torch'))")
    "${pip[@]}" "torch==$version"
    echo "setup: installed torch $version found on this machine"
  else
    echo "setup: no GPU: installing torch (CPU build)"
    "${pip[@]}" "torch>=2.4" --index-url https://download.pytorch.org/whl/cpu
  fi
fi

stamp=.venv/.ablate-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  "${pip[@]}" -e ".[test]"
  touch "$stamp"
fi
