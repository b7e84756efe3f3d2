#!/usr/bin/env bash
# Create .venv and install ablate with its test tools. Idempotent: reruns are quick.
# Prerequisites, checked first (each missing one stops here with what to install):
#   make, Python >= 3.10 with its venv module (Debian/Ubuntu: python3-venv), and on the first run
#   access to the package index (PyPI, or PyTorch's CPU index for torch).
# torch: a CUDA build where an NVIDIA GPU is visible; otherwise a CPU build (a CPU wheel already
# on this machine if pip can find one offline, else PyTorch's CPU index), never the multi-GB
# CUDA build on a CPU-only machine.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}

missing() {
  echo "setup: $1" >&2
  exit 1
}
command -v make >/dev/null 2>&1 ||
  missing "'make' is not installed; install it (Debian/Ubuntu: sudo apt-get install make; macOS: xcode-select --install)"
command -v "$python" >/dev/null 2>&1 ||
  missing "'$python' is not on PATH; install Python >= 3.10 (or set PYTHON=/path/to/python3)"
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null ||
  missing "ablate needs Python >= 3.10; '$python' is $("$python" -c 'import platform; print(platform.python_version())' 2>/dev/null || echo unknown). Install a newer Python, or set PYTHON=/path/to/python3.11"
if [ ! -x .venv/bin/python ]; then
  "$python" -c 'import venv, ensurepip' 2>/dev/null ||
    missing "'$python' has no working venv module (venv/ensurepip); install it (Debian/Ubuntu: sudo apt-get install python3-venv)"
  # pip and uv put into a venv without pip by this Python's own pip (about 4 s here; venv's ensurepip
  # took 7 s for pip alone), else by ensurepip
  "$python" -m venv --without-pip .venv
  "$python" -m pip --python .venv/bin/python install --quiet --disable-pip-version-check pip uv >/dev/null 2>&1 ||
    .venv/bin/python -m ensurepip --default-pip >/dev/null
fi
pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
uv=(.venv/bin/python -m uv pip install --quiet --python .venv/bin/python)
stamp=.venv/.ablate-installed
# uv installs in parallel, without compiling, from its cache where it has the files already (pip is the
# fallback where uv cannot be installed or fails)
.venv/bin/python -m uv --version >/dev/null 2>&1 || "${pip[@]}" uv 2>/dev/null || true

# A torch wheel this machine already holds, where pip finds one offline (its find-links): its path
local_torch_wheel() {
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --dry-run --no-index --no-deps --report - \
    "torch>=2.4" 2>/dev/null | .venv/bin/python -c '
import json, sys, urllib.parse
print(urllib.parse.unquote(json.load(sys.stdin)["install"][0]["download_info"]["url"].removeprefix("file://")))'
}
# ... installed without its dependencies (ablate's install below brings them): by uv (under a second
# from its cache; pip took 12 s), else by pip. Not compiled: the warm-up below compiles what ablate's
# processes import of torch's 2,300 modules.
install_local_torch() {
  local wheel
  wheel=$(local_torch_wheel) && [ -f "$wheel" ] && "${uv[@]}" --no-deps "$wheel" 2>/dev/null && return 0
  "${pip[@]}" --no-index --no-deps --no-compile "torch>=2.4" 2>/dev/null
}

if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  rm -f "$stamp"  # torch's dependencies come with ablate's, below
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "setup: NVIDIA GPU found: installing torch (CUDA build)"
    "${pip[@]}" --no-compile "torch>=2.4"
  elif install_local_torch; then
    echo "setup: installed torch $(.venv/bin/python -c "import importlib.metadata as m; print(m.version('torch'))") found on this machine"
  else
    echo "setup: no GPU: installing torch (CPU build)"
    "${pip[@]}" --no-compile "torch>=2.4" --index-url https://download.pytorch.org/whl/cpu
  fi
fi

if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  # uv resolves and downloads in parallel (about 6 s here against pip's minute); torch is already in
  # place and satisfies the requirement, so uv leaves it as it is and installs its dependencies
  "${uv[@]}" -e ".[test]" || "${pip[@]}" -e ".[test]" ||
    missing "pip could not install ablate's dependencies: the package index (PyPI) must be reachable on the first run"
  # Bytecode for what ablate's processes import: two processes import it with bytecode writing on, at
  # once: torch and ablate's own stack, and the rest, scipy and sympy first, which the first reaches
  # later (about 15 s here; one process took 32 s). Where PYTHONDONTWRITEBYTECODE is set, every process would
  # otherwise compile Lightning, Hydra and the rest from source (the test suite took 774 s, not 600);
  # compiling every installed package instead (uv --compile-bytecode, pip's default) took 45 s more,
  # mostly for modules no process imports. `make test` and `make main` let Python write the bytecode
  # of whatever else they import, once.
  warm_up() {
    env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -c '
import importlib, sys
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception:  # a module this machine cannot import is compiled when first imported
        pass' "$@"
  }
  warm_up ablate.cli ablate.lit ablate.run ablate.train ablate.sweeper ablate.report.cli ablate.bench \
    ablate.coord_check torch._inductor torch.distributed hydra_plugins.hydra_joblib_launcher.joblib_launcher \
    hydra_plugins.hydra_submitit_launcher.submitit_launcher &
  warm_up scipy.signal scipy.stats sympy matplotlib.pyplot pandas wandb submitit tokenizers sacrebleu pytest xdist
  wait
  touch "$stamp"
fi
# ablate's own bytecode too, which an editable install leaves to the first import: where
# PYTHONDONTWRITEBYTECODE is set, every process would compile its 20k lines again (0.7 CPU-s each,
# and the test suite starts some 300 processes). Quick when nothing changed; stale files are ignored.
.venv/bin/python -m compileall -q -j 0 ablate hydra_plugins >/dev/null

# Debian's chromium, for the report's browser test (tests/test_report_page.py): installed where this
# runs as root with apt-get (a container, CI), tried once; elsewhere that one test skips and says why.
browser_stamp=.venv/.ablate-browser-tried
if [ ! -f "$browser_stamp" ] && ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] &&
  command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing chromium (apt-get) for the report's browser test"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; } \
    >/dev/null 2>&1 || echo "setup: could not install chromium; the report's browser test will skip" >&2
  touch "$browser_stamp"
fi
