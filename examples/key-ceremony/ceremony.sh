#!/usr/bin/env bash
# The key ceremony of docs/DEPLOYMENT.md, all parties on one machine for the demonstration: each
# party's folder stands for its own machine, and only what is copied into published/ (public
# halves) or, for the CKKS secret, from one site to the others, ever crosses between them, beside
# parties.json: the names and fingerprints the parties agree on over a channel the server does not
# relay, which is all `keys assemble` accepts from published/.
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

# the fingerprint a `keys` command printed on its "publish ... sha256 FP" line
fingerprint() { awk '/publish .* sha256 /{print $NF}'; }

# 1. every party makes its own signing key; only the .pub is published. Each party also reads its
#    fingerprint to the others over a channel the server does not relay (a call, a signed letter);
#    here the script notes what each party's own command printed
signing=""
for party in server "${sites[@]}"; do
  out=$($fed keys new --party "$party" --out "$party-keys")
  echo "$out"
  signing+="${signing:+, }\"$party\": \"$(fingerprint <<<"$out")\""
  cp "$party-keys/signing/$party.pub" published/
done

# 2. the first site holds the CKKS keys: public context published, secret to the other sites only
out=$($fed keys he-init --out "${sites[0]}-keys")
echo "$out"
he_public=$(fingerprint <<<"$out")
mkdir -p published/he
cp "${sites[0]}-keys/he/public.tenseal" published/he/
for site in "${sites[@]:1}"; do
  mkdir -p "$site-keys/he"
  cp "${sites[0]}-keys/he/secret.tenseal" "$site-keys/he/"
done

# 3. what the parties agreed out of band: exactly these names, exactly these keys, and which party
#    runs the server (its key never counts as a site). The relay (published/) can then neither swap
#    a key nor add a party of its own
printf '{"he_public": "%s", "signing": {%s}, "coordinator": "server"}\n' "$he_public" "$signing" >parties.json

# 4. every party pins the expected keys in its own kit, and all compare the one digest printed
digests=()
for party in server "${sites[@]}"; do
  out=$($fed keys assemble --keys "$party-keys" --public published --expect parties.json)
  echo "$out"
  digests+=("$(awk '/^ceremony digest /{print $NF}' <<<"$out")")
done
if [ "$(printf '%s\n' "${digests[@]}" | sort -u | wc -l)" -ne 1 ]; then
  echo "ceremony.sh: the parties' ceremony digests differ: ${digests[*]}" >&2
  exit 1
fi

# 5. what a compliance officer receives to verify the audit logs
$fed keys export-public --keys server-keys --out verifier-keys
