#!/usr/bin/env bash
# The commands of docs/RESULTS.md, "Empirical audit", exactly as written there (run from the repo
# root; each prints its wall time). One torch thread (configs/empirical_audit.toml): the machine has
# 2 cores shared with whatever else runs.
set -euo pipefail
cd "$(dirname "$0")/.."
export FLWR_TELEMETRY_ENABLED=0 OMP_NUM_THREADS=1
SF=${SF:-.venv/bin/secure-fed}
rm -rf runs/audit-eps4 runs/audit-eps1 runs/audit-eps8 runs/audit-eps4-m5000
time $SF audit empirical --config configs/empirical_audit.toml --canaries 1000 -o runs/audit-eps4
$SF audit verify runs/audit-eps4/audit/*.jsonl --keys runs/audit-eps4/keys
time $SF audit empirical --config configs/empirical_audit.toml --target-epsilon 1 --canaries 1000 -o runs/audit-eps1
time $SF audit empirical --config configs/empirical_audit.toml --target-epsilon 8 --canaries 1000 -o runs/audit-eps8
time $SF audit empirical --config configs/empirical_audit.toml --canaries 5000 --site site0 -o runs/audit-eps4-m5000
$SF audit verify runs/audit-eps4-m5000/audit/*.jsonl --keys runs/audit-eps4-m5000/keys
