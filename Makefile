# The two commands a newcomer needs (see README): `make main` and `make test`.
# `make test-fast` runs the tests not marked `slow` (no CLI or other subprocess, none takes seconds),
# for the edit-and-test loop; `make test` runs all of them, as CI does.
.PHONY: setup main test test-fast bench

# Python may write the bytecode of .venv's packages and of the repo as they are first imported, even where
# PYTHONDONTWRITEBYTECODE is set: otherwise every process (the suite starts hundreds) compiles from source
# whatever scripts/setup.sh did not compile (it compiles what every ablate process imports).
WRITING_BYTECODE := env -u PYTHONDONTWRITEBYTECODE

setup:
	@bash scripts/setup.sh

main: setup  ## the Q=K=V vs Q=K vs independent QKV ablation, 3 seeds, table at the end (2 jobs at once, re-timed at the end)
	$(WRITING_BYTECODE) .venv/bin/ablate -m experiment=qkv_sharing hydra/launcher=joblib

test: setup  ## the whole test suite, slow tests included (CPU; two pytest workers, each test file in one; its measured time on 2 cores: README)
	$(WRITING_BYTECODE) .venv/bin/python -m pytest -q -n 2 --dist loadfile

test-fast: setup  ## the fast tier: every test not marked slow (in-process, two pytest workers; under 2 minutes on 2 cores)
	$(WRITING_BYTECODE) .venv/bin/python -m pytest -q -n 2 -m "not slow"

bench: setup  ## framework overhead: plain PyTorch loop vs ablate's Lightning module
	.venv/bin/python scripts/bench_overhead.py
