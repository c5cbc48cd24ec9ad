#!/usr/bin/env bash
# The key ceremony of docs/DEPLOYMENT.md, all parties on one machine for the demonstration: each
# party's folder stands for its own machine, and only what is copied into published/ (public
# halves) or, for the CKKS secret, from one site to the others, ever crosses between them.
# Usage: ceremony.sh WORKDIR [SITES...]   (default sites: site0 site1 site2)
set -euo pipefail
export FLWR_TELEMETRY_ENABLED=0
work=${1:?usage: ceremony.sh WORKDIR [SITES...]}
shift
sites=("${@:-site0 site1 site2}")
read -r -a sites <<<"${sites[*]}"
fed=${SECURE_FED:-secure-fed}
mkdir -p "$work/published"
cd "$work"

# 1. every party makes its own signing key; only the .pub is published
for party in server "${sites[@]}"; do
  $fed keys new --party "$party" --out "$party-keys"
  cp "$party-keys/signing/$party.pub" published/
done

# 2. the first site holds the CKKS keys: public context published, secret to the other sites only
$fed keys he-init --out "${sites[0]}-keys"
mkdir -p published/he
cp "${sites[0]}-keys/he/public.tenseal" published/he/
for site in "${sites[@]:1}"; do
  mkdir -p "$site-keys/he"
  cp "${sites[0]}-keys/he/secret.tenseal" "$site-keys/he/"
done

# 3. every party pins everyone's published keys in its own kit
for party in server "${sites[@]}"; do
  $fed keys assemble --keys "$party-keys" --public published
done

# 4. what a compliance officer receives to verify the audit logs
$fed keys export-public --keys server-keys --out verifier-keys
