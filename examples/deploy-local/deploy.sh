#!/usr/bin/env bash
# A whole deployment on 127.0.0.1, as four hospitals and a coordinator would run it: a SuperLink
# with TLS and SuperNode authentication, four `secure-fed client` nodes, one FedTAR run with DP,
# SecAgg+ and CKKS. docs/DEPLOYMENT.md shows these very commands; tests/server/test_deployment.py
# runs this script unchanged.
#
#   examples/deploy-local/deploy.sh [up|run|crash|down|all] [WORK] [SITE]
#
#   up     keys, certificates, the $FLWR_HOME connection file, the SuperLink, node registration,
#          the app and its FAB, each site's review and approval of that FAB, then the four nodes
#          (in the background; their logs in WORK/logs)
#   run    one run of the approved app: `flwr run`, then `flwr ls` until it ends; exit 0 only if
#          it completed
#   crash  SITE's node dies at once (SIGKILL to its whole process group, as a power cut would):
#          the drill for a hospital lost mid-round; the run goes on without it
#   down   stop the SuperLink and the nodes this script started
#   all    up, run, down (the default)
#
# One port everywhere: PORT (default 8000, Flower's) is the SuperLink's --port, the address every
# node dials and the address in $FLWR_HOME/config.toml. Everything runs in WORK (default
# ./deploy-work), the folder the TOML files' relative paths refer to.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
ACTION="${1:-all}"
WORK="${2:-deploy-work}"
PORT="${PORT:-8000}"
SITES=(site0 site1 site2 site3)
RUN_TIMEOUT="${RUN_TIMEOUT:-1800}"

mkdir -p "$WORK/logs"
WORK="$(cd "$WORK" && pwd)"
cd "$WORK"
export FLWR_HOME="$WORK/flwr_home" FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1

say() { echo "deploy: $*" >&2; }

json_field() {  # json_field KEY < flwr's JSON output: the key's value (in "runs"[0] for `flwr ls`)
  python3 -c '
import json, sys
text = sys.stdin.read()
data = json.loads(text[text.index("{"):])
if not data.get("success", True):
    sys.exit("flwr: " + str(data.get("error-message", data)))
data = (data.get("runs") or [{}])[0] if "runs" in data else data
print(data.get(sys.argv[1], ""))' "$1"
}

start() {  # start NAME CMD...: in a session of its own, so `down` ends it with all it started
  local name="$1"
  shift
  setsid "$@" >"logs/$name.log" 2>&1 </dev/null &
  echo "$!" >"logs/$name.pid"
}

up() {
  # 1. Keys (the kit every party gets its part of) and certificates (CA, SuperLink, node keys)
  # (the key ceremony: each party makes its own signing key, only public halves are exchanged)
  [ -d keys ] || bash "$HERE/../key-ceremony/ceremony.sh" keys "${SITES[@]}"
  [ -d certs ] || secure-fed certs init --out certs --host 127.0.0.1 --host localhost \
    --nodes site0,site1,site2,site3

  # 2. How `flwr` reaches the SuperLink: a named connection with the CA, no `insecure`
  mkdir -p "$FLWR_HOME"
  sed -e "s|@PORT@|$PORT|g" -e "s|@WORK@|$WORK|g" "$HERE/flwr_home/config.toml" >"$FLWR_HOME/config.toml"

  # 3. The SuperLink: TLS, SuperNode authentication, no dependency installation at run time
  start superlink flower-superlink \
    --ssl-ca-certfile certs/ca.crt --ssl-certfile certs/superlink.pem --ssl-keyfile certs/superlink.key \
    --enable-supernode-auth --host 127.0.0.1 --port "$PORT" --disable-runtime-dependency-installation
  for _ in $(seq 120); do
    (echo >"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
    sleep 0.5
  done

  # 4. The operator admits each hospital's node key
  for site in "${SITES[@]}"; do
    flwr supernode register "certs/$site-node.pub" local-deploy
  done

  # 5. Each hospital decides what its node runs: the FAB built from the release it has (here this
  #    repository), reviewed against its installed secure_fed, its SHA-256 pinned in the site's
  #    [deploy] approved_fabs. The node runs its own installed code, and only for runs of this FAB.
  package
  for site in "${SITES[@]}"; do
    secure-fed code review fab/*.fab --config "$HERE/$site.toml" >"logs/$site-review.txt"
    secure-fed code approve fab/*.fab --config "$HERE/$site.toml" --note "deploy-local: this repository"
  done

  # 6. Each hospital's node: checks, caches filled, then the SuperNode (TLS, its own auth key)
  for site in "${SITES[@]}"; do
    secure-fed client --site "$site" --config "$HERE/$site.toml" --keys "keys/$site-keys" --prepare-only
  done
  local runtime_port=$((PORT + 10))
  for site in "${SITES[@]}"; do
    start "$site" secure-fed client --site "$site" --config "$HERE/$site.toml" --keys "keys/$site-keys" \
      --superlink "127.0.0.1:$PORT" --root-certificates certs/ca.crt --auth-key "certs/$site-node.key" \
      --runtime-port "$runtime_port"
    runtime_port=$((runtime_port + 1))
  done
  # 7. Ready when the SuperLink sees every node online (each fills its caches before it dials)
  local online=0
  for _ in $(seq "$RUN_TIMEOUT"); do
    online="$(flwr supernode list local-deploy --format json | python3 -c '
import json, sys
text = sys.stdin.read()
nodes = json.loads(text[text.index("{"):]).get("nodes", [])
print(sum(node.get("status") == "online" for node in nodes))' 2>/dev/null || echo 0)"
    [ "$online" -ge "${#SITES[@]}" ] && break
    sleep 1
  done
  if [ "$online" -lt "${#SITES[@]}" ]; then
    say "only $online of ${#SITES[@]} nodes online within $RUN_TIMEOUT s (logs in $WORK/logs)"
    return 1
  fi
  say "SuperLink on 127.0.0.1:$PORT, nodes ${SITES[*]} online (logs in $WORK/logs)"
}

package() {
  # The app as pyproject.toml declares it, copied once (`flwr run` packs the folder it is given, and
  # the sites approved the FAB of exactly this copy), and that FAB, as `flwr build` makes it
  [ -d app ] && return 0
  mkdir -p app fab
  cp "$REPO/pyproject.toml" "$REPO/README.md" app/
  (cd "$REPO" && find secure_fed -name '*.py' -print0 | xargs -0 cp --parents -t "$WORK/app")
  (cd fab && flwr build --app ../app >/dev/null)
}

run() {
  [ -d app ] || { say "no approved app: run \`$0 up $WORK\` first (it builds the FAB the sites approve)"; return 1; }
  local submitted run_id status
  submitted="$(flwr run app local-deploy --format json --run-config "config-file='$HERE/server.toml'")"
  run_id="$(json_field "run-id" <<<"$submitted")"
  echo "$run_id" >logs/last-run-id
  say "run $run_id submitted"
  for _ in $(seq "$RUN_TIMEOUT"); do
    status="$(flwr ls local-deploy --run-id "$run_id" --format json | json_field status)"
    case "$status" in
    finished:completed)
      say "run $run_id completed: server/runs/$run_id, site*/runs/$run_id"
      return 0
      ;;
    finished:*)
      flwr log "$run_id" local-deploy --show >&2 || true
      say "run $run_id ended $status (the ServerApp's log is above)"
      return 1
      ;;
    esac
    sleep 1
  done
  say "run $run_id did not end within $RUN_TIMEOUT s"
  return 1
}

crash() {
  local site="${1:?crash needs a SITE, e.g. site3}" pid node nodes
  [ -e "logs/$site.pid" ] || { say "no node of $site started by this script (logs/$site.pid)"; return 1; }
  pid="$(cat "logs/$site.pid")"
  # `secure-fed client` runs the SuperNode in a process group of its own (pgid = the node's pid):
  # a power cut takes both groups at once, so both get SIGKILL, with no chance to say goodbye
  nodes="$(ps -o pid= --ppid "$pid" || true)"
  kill -KILL -- "-$pid" 2>/dev/null || true
  for node in $nodes; do
    kill -KILL -- "-$node" 2>/dev/null || true
  done
  rm -f "logs/$site.pid"
  say "$site's node killed (pid $pid and everything it started); the SuperLink marks it offline within a minute"
}

down() {
  local pidfile pid
  for pidfile in logs/*.pid; do
    [ -e "$pidfile" ] || continue
    pid="$(cat "$pidfile")"
    kill -TERM -- "-$pid" 2>/dev/null || true
    rm -f "$pidfile"
  done
  say "stopped"
}

case "$ACTION" in
up) up ;;
run) run ;;
crash) crash "${3:-}" ;;
down) down ;;
all)
  trap down EXIT
  up
  run
  ;;
*)
  echo "usage: $0 [up|run|crash|down|all] [WORK] [SITE]" >&2
  exit 2
  ;;
esac
