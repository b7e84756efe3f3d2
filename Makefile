# The two commands a newcomer needs (see README): `make main` and `make test`.
.PHONY: setup main test bench

setup:
	@bash scripts/setup.sh

main: setup  ## the Q=K=V vs Q=K vs independent QKV ablation, 3 seeds, table at the end
	.venv/bin/ablate -m experiment=qkv_sharing

test: setup  ## the whole test suite (CPU; two pytest workers, each test file in one; about 12 minutes on 2 cores)
	.venv/bin/python -m pytest -q -n 2 --dist loadfile

bench: setup  ## framework overhead: plain PyTorch loop vs ablate's Lightning module
	.venv/bin/python scripts/bench_overhead.py
