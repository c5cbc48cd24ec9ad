# Both entry points set up everything on a fresh machine: a .venv, the pinned packages, the package.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# a fresh venv's disk need, checked before it is made (.ci/check-install-space)
INSTALL_NEEDS_GIB ?= 7

# A hardened node never phones home, not even from the test suite.
export FLWR_TELEMETRY_ENABLED := 0
export FLWR_DISABLE_UPDATE_CHECK := 1
export RAY_USAGE_STATS_ENABLED := 0
export HF_HUB_OFFLINE := 1

.PHONY: install browser test test-fast test-deploy demo lint bench clean results results-paper results-paper-drift0 results-paper-drift results-paper-powered results-paper-powered-plain results-paper-powered-private results-paper-powered-visit-blind results-paper-powered-ablation results-paper-powered-calpha results-hospital results-hospital-site results-hospital-distributed hospital-worker-1 hospital-worker-2 results-hospital-grid results-hospital-grid-site results-hospital-grid-distributed hospital-grid-worker-1 hospital-grid-worker-2

$(STAMP): pyproject.toml
	test -x $(PY) || bash .ci/check-install-space $(dir $(abspath $(VENV))) $(INSTALL_NEEDS_GIB)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.14.1 torchvision==0.29.1
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# The report's browser test needs Chromium: installed here when missing, or make test fails.
browser:
	bash .ci/ensure-browser

# Two pytest workers (pytest-xdist), a test file to a worker: the tests run torch on one thread
# (tests/conftest.py), so one worker leaves the second core of the 2-core machine mostly idle. A
# file's tests stay together, in order, with its module fixtures. TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# the benchmark scripts' slower smoke runs are `make bench`'s (pytest -m bench)
test: $(STAMP) browser
	$(PYTEST) -m "not bench"

# the suite less its `slow` tests (those that start Ray, a SuperLink or SuperNode or a `secure-fed
# run`, and the in-process runs, rounds and scripts of several seconds): 2 min 22 s for 1,705 tests
# on the idle 2-core machine, against `make test`'s 16 min 48 s (README, commit 6bae359)
test-fast: $(STAMP) browser
	$(PYTEST) -m "not slow and not bench"

# docs/RESULTS.md's tables, resumable (finished cells are skipped): run it in the background with
#   nohup make results > runs/results.log 2>&1 &
# and run it again after an interruption. Wall time: see docs/RESULTS.md.
RESULTS_METHODS := base,local,central,fedavg,fedprox,scaffold,fedadam,drfa,fedtar,fedtar-no-gmm,fedtar-no-temporal,fedavg-ft,fedtar-ft
SHARED_METHODS := base,local,central,fedavg,fedavg-ft,fedtar,fedtar-ft,fedtar-no-gmm,fedtar-no-temporal
SWEEP := $(VENV)/bin/secure-fed-lab sweep
results: $(STAMP)
	$(SWEEP) --config configs/results.toml --methods $(RESULTS_METHODS) --seeds 0,1,2,3,4 --epsilons inf -o runs/results
	$(SWEEP) --config configs/results.toml --methods base,local,central,fedavg,fedavg-ft --seeds 5,6,7,8,9 --epsilons inf -o runs/results-seeds5-9
	$(SWEEP) --config configs/results.toml --methods base,fedavg,fedtar --seeds 0,1,2 --epsilons 16,8,4,2,1 -o runs/results
	$(SWEEP) --config configs/results-null.toml --methods $(RESULTS_METHODS) --seeds 0,1,2,3,4 --epsilons inf -o runs/results-null
	$(SWEEP) --config configs/small-sites.toml --methods base,local,central,fedavg,fedavg-ft,fedtar,fedtar-ft --seeds 0,1,2,3,4 --epsilons inf -o runs/results-small
	$(SWEEP) --config configs/shared-wording.toml --methods $(SHARED_METHODS) --seeds 0,1,2,3,4 --epsilons inf -o runs/results-shared
	$(SWEEP) --config configs/small-shared-wording.toml --methods base,local,central,fedavg,fedavg-ft,fedtar,fedtar-ft --seeds 0,1,2,3,4 --epsilons inf -o runs/results-small-shared
	$(SWEEP) --config configs/iid-sites.toml --methods base,local,central,fedavg --seeds 0,1,2,3,4 --epsilons inf -o runs/results-iid
	$(SWEEP) --config configs/small-iid-sites.toml --methods base,local,central,fedavg,fedavg-ft,fedtar --seeds 0,1,2,3,4,5,6,7,8,9 --epsilons inf -o runs/results-small-iid
	$(SWEEP) --config configs/training-noise.toml --methods base,local,central,fedavg --seeds 0,1,2,3,4 --epsilons inf -o runs/results-training-noise

# The FedTAR paper's Table 1 beside ours (docs/experiments/paper-table.md): its baselines as it runs
# them (time points pooled, a plain adapter: <method>-plain), ours with the patient hyper-LoRA,
# FedTAR and its ablations with the temporal step read both ways (<method>-convex), without DP and
# at ε = 8 with distributed DP (the methods that have it), on the drift-0 cohort and at the
# paper's drift. Resumable; the two drifts run side by side under -j2:
#   nohup make -j2 results-paper > runs/results-paper.log 2>&1 &
# Wall time: docs/experiments/paper-table.md (benchmarks/paper_grid_time.py).
PAPER_METHODS := fedavg-plain,fedprox-plain,scaffold-plain,fedadam-plain,drfa-plain,fedavg,fedtar,fedtar-no-gmm,fedtar-no-temporal,fedtar-convex,fedtar-no-gmm-convex,fedtar-no-temporal-convex
PAPER_PRIVATE := fedavg-plain,fedavg,fedtar,fedtar-no-gmm,fedtar-no-temporal,fedtar-convex
results-paper: results-paper-drift0 results-paper-drift

results-paper-drift0: $(STAMP)
	$(SWEEP) --config configs/paper-drift-0.toml --methods $(PAPER_METHODS) --seeds 0,1,2 --epsilons inf -o runs/results-paper-drift0
	$(SWEEP) --config configs/paper-drift-0-distributed.toml --methods $(PAPER_PRIVATE) --seeds 0,1,2 --epsilons 8 -o runs/results-paper-drift0-distributed

# The paper's comparison at its drift at FedTAR's current defaults (floored α, ψ by SGD, the
# visit-aware hyper-LoRA, the one-vector release under distributed DP), at the seeds issue 63's
# power computation asks for (paired SD ≈ 0.23 CIDEr: ≥ 6), with base and pooled central as the
# table's floor and ceiling (docs/experiments/paper-table.md, "At FedTAR's current defaults"):
#   nohup make -j2 results-paper-powered > runs/results-paper-powered.log 2>&1 &
PAPER_POWERED_SEEDS := 0,1,2,3,4,5
results-paper-powered: results-paper-powered-plain results-paper-powered-private results-paper-powered-visit-blind results-paper-powered-ablation

results-paper-powered-plain: $(STAMP)
	$(SWEEP) --config configs/paper-drift.toml --methods base,central,fedavg-plain,fedavg,fedtar --seeds $(PAPER_POWERED_SEEDS) --epsilons inf -o runs/results-paper-powered

results-paper-powered-private: $(STAMP)
	$(SWEEP) --config configs/paper-drift-distributed.toml --methods fedavg-plain,fedavg,fedtar --seeds $(PAPER_POWERED_SEEDS) --epsilons 8 -o runs/results-paper-powered-distributed

# FedTAR visit-blind (model.visit_input = false, the default before issue 63), same seeds, to set
# beside the visit-aware default (after the two sweeps above, so -j2 never runs more than two cells)
results-paper-powered-visit-blind: results-paper-powered-plain results-paper-powered-private
	$(SWEEP) --config configs/paper-drift.toml --methods fedtar --seeds $(PAPER_POWERED_SEEDS) --epsilons inf --set model.visit_input=false -o runs/results-paper-powered-visit-blind
	$(SWEEP) --config configs/paper-drift-distributed.toml --methods fedtar --seeds $(PAPER_POWERED_SEEDS) --epsilons 8 --set model.visit_input=false -o runs/results-paper-powered-visit-blind-distributed

# FedTAR with α fixed uniform (no α exchange, no sketch in the release), same seeds: what the
# temporal step and its release cost or give, without DP and at ε = 8
results-paper-powered-ablation: results-paper-powered-visit-blind
	$(SWEEP) --config configs/paper-drift.toml --methods fedtar-no-temporal --seeds $(PAPER_POWERED_SEEDS) --epsilons inf -o runs/results-paper-powered-ablation
	$(SWEEP) --config configs/paper-drift-distributed.toml --methods fedtar-no-temporal --seeds $(PAPER_POWERED_SEEDS) --epsilons 8 -o runs/results-paper-powered-ablation-distributed

# the private FedTAR cells again at the sized C_α (dp.alpha_clip = 0.01 in the distributed config,
# benchmarks/alpha_clip.py): docs/experiments/paper-table-powered.md, "At the sized C_α"
results-paper-powered-calpha: $(STAMP)
	$(SWEEP) --config configs/paper-drift-distributed.toml --methods fedtar --seeds $(PAPER_POWERED_SEEDS) --epsilons 8 -o runs/results-paper-powered-calpha-distributed
	$(SWEEP) --config configs/paper-drift-distributed.toml --methods fedtar --seeds $(PAPER_POWERED_SEEDS) --epsilons 8 --set model.visit_input=false -o runs/results-paper-powered-calpha-visit-blind-distributed

results-paper-drift: $(STAMP)
	$(SWEEP) --config configs/paper-drift.toml --methods $(PAPER_METHODS) --seeds 0,1,2 --epsilons inf -o runs/results-paper-drift
	$(SWEEP) --config configs/paper-drift-distributed.toml --methods $(PAPER_PRIVATE) --seeds 0,1,2 --epsilons 8 -o runs/results-paper-drift-distributed

# docs/RESULTS.md's "Hospital scale" at the DP recipe the configs carry (chosen on public patients by
# benchmarks/dp_tune.py; docs/experiments/hospital-retuned-recipe.md): 10,000 patients over 5
# unequal sites, at ε = 8 distributed FedAvg and FedTAR (DP inside SecAgg+), pooled DP-SGD
# (`central` at a finite ε), its noise-free clipped reference and the non-private references.
# Resumable like `results` (finished cells are skipped):
#   nohup make -j2 results-hospital > runs/results-hospital.log 2>&1 &
# Two workers share both sweeps' cells, one cell each at a time (DP steps run in passes of at most
# dp.max_patients_per_pass patients, so two cells fit in 24 GiB: docs/RESULTS.md, "Hospital scale"):
# each runs one sweep, then the other, in opposite orders, and leaves a cell the other worker holds
# (a lock beside its folder) to it, so neither idles while the other has hours of cells left. The
# last recipe writes each sweep's tables from all its cells and runs any fine-tuned cell that was
# left waiting for its federated cell. Without -j2 the first worker runs everything.
# Its wall time here, from the cells that ran: benchmarks/hospital_grid_time.py (docs/RESULTS.md).
results-hospital: hospital-worker-1 hospital-worker-2
	$(MAKE) --no-print-directory results-hospital-site
	$(MAKE) --no-print-directory results-hospital-distributed

hospital-worker-1: $(STAMP)
	$(MAKE) --no-print-directory results-hospital-site
	$(MAKE) --no-print-directory results-hospital-distributed

hospital-worker-2: $(STAMP)
	$(MAKE) --no-print-directory results-hospital-distributed
	$(MAKE) --no-print-directory results-hospital-site

results-hospital-site: $(STAMP)
	$(SWEEP) --config configs/hospital-scale.toml --methods base,central,central-clip --seeds 0,1,2 --epsilons inf,8 -o runs/results-hospital
	$(SWEEP) --config configs/hospital-scale.toml --methods fedavg,fedtar --seeds 0,1,2 --epsilons inf -o runs/results-hospital

results-hospital-distributed: $(STAMP)
	$(SWEEP) --config configs/hospital-scale-distributed.toml --methods fedavg,fedtar --seeds 0,1,2 --epsilons 8 -o runs/results-hospital-distributed

# The whole grid of issues 30 and 31 at the same recipe: every ε, site mode's federated methods, each
# site fine-tuning the federated model (an epoch of its own that releases nothing). It shares its
# folders, and so its finished cells, with `results-hospital`; the same two workers. Far longer than
# a night here (benchmarks/hospital_grid_time.py --target results-hospital-grid).
results-hospital-grid: hospital-grid-worker-1 hospital-grid-worker-2
	$(MAKE) --no-print-directory results-hospital-grid-site
	$(MAKE) --no-print-directory results-hospital-grid-distributed

hospital-grid-worker-1: $(STAMP)
	$(MAKE) --no-print-directory results-hospital-grid-site
	$(MAKE) --no-print-directory results-hospital-grid-distributed

hospital-grid-worker-2: $(STAMP)
	$(MAKE) --no-print-directory results-hospital-grid-distributed
	$(MAKE) --no-print-directory results-hospital-grid-site

results-hospital-grid-site: $(STAMP)
	$(SWEEP) --config configs/hospital-scale.toml --methods base,local,central,fedavg,fedtar,fedavg-ft,fedtar-ft --seeds 0,1,2 --epsilons inf,16,8,4,2,1 -o runs/results-hospital

results-hospital-grid-distributed: $(STAMP)
	$(SWEEP) --config configs/hospital-scale-distributed.toml --methods fedavg,fedtar,fedavg-ft --seeds 0,1,2 --epsilons 8,4,2,1 -o runs/results-hospital-distributed

# docs/DEPLOYMENT.md's walk-through run top to bottom (a node lost, the SuperLink restarted): ~30 min here
test-deploy: $(STAMP)
	SECURE_FED_DEPLOY_SCRIPT=1 $(PY) -m pytest -q tests/server/test_deployment.py

# each demo is a run of its own (a run folder belongs to one run): runs/demo-<UTC time>
demo: $(STAMP)
	$(VENV)/bin/secure-fed run --out runs/demo-$$(date -u +%Y%m%dT%H%M%SZ)

# every benchmark's smoke run (--quick), ~3 min: the scripts and the fields docs/BENCHMARKS.md quotes
# still work; the figures come from the full commands given there
bench: $(STAMP)
	$(PY) -m pytest -q tests/test_benchmarks.py tests/model/test_gpu_benchmark.py

lint: $(STAMP)
	$(VENV)/bin/ruff check secure_fed tests benchmarks

clean:
	rm -rf runs .cache .pytest_cache
