# The two commands a newcomer needs (see README): `make main` and `make test`.
.PHONY: setup main test bench

setup:
	@bash scripts/setup.sh

main: setup  ## the Q=K=V vs Q=K vs independent QKV ablation, 3 seeds, table at the end
	.venv/bin/ablate -m experiment=qkv_sharing

test: setup  ## the whole test suite (CPU, under 10 minutes)
	.venv/bin/python -m pytest -q

bench: setup  ## framework overhead: plain PyTorch loop vs ablate's Lightning module
	.venv/bin/python scripts/bench_overhead.py
