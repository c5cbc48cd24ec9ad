#!/usr/bin/env bash
# The commands of docs/RESULTS.md, "Empirical lower bound", exactly as written there (run from the repo
# root; each prints its wall time). One torch thread (configs/lower_bound.toml): the machine has
# 2 cores shared with whatever else runs.
set -euo pipefail
cd "$(dirname "$0")/.."
export FLWR_TELEMETRY_ENABLED=0 OMP_NUM_THREADS=1
SF=${SF:-.venv/bin/secure-fed}
rm -rf runs/bound-eps4 runs/bound-eps1 runs/bound-eps8 runs/bound-eps4-m5000
time $SF lower-bound --config configs/lower_bound.toml --canaries 1000 -o runs/bound-eps4
$SF audit verify runs/bound-eps4/audit/*.jsonl --keys runs/bound-eps4/keys
time $SF lower-bound --config configs/lower_bound.toml --target-epsilon 1 --canaries 1000 -o runs/bound-eps1
time $SF lower-bound --config configs/lower_bound.toml --target-epsilon 8 --canaries 1000 -o runs/bound-eps8
time $SF lower-bound --config configs/lower_bound.toml --canaries 5000 --site site0 -o runs/bound-eps4-m5000
$SF audit verify runs/bound-eps4-m5000/audit/*.jsonl --keys runs/bound-eps4-m5000/keys
