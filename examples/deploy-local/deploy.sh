#!/usr/bin/env bash
# A whole deployment on 127.0.0.1, as four hospitals and a coordinator would run it: a SuperLink
# with TLS, SuperNode authentication and persistent state, four `secure-fed client` nodes, FedTAR
# runs with DP, SecAgg+ and CKKS. docs/DEPLOYMENT.md shows these very commands, in this order
# (tests/server/test_deployment.py checks that the page's commands are the ones this script runs,
# and runs the page's steps top to bottom).
#
#   examples/deploy-local/deploy.sh [up|run|restart|check|crash|down|all] [WORK] [SITE]
#
#   up       keys, certificates, each site's policy, the app and its FAB, each site's review and
#            approval of that FAB, the $FLWR_HOME connection file, the SuperLink (its state in
#            WORK/superlink.db), node registration, then the four nodes (in the background; their
#            logs in WORK/logs)
#   run      one run of the approved app: `flwr run`, then `flwr ls` until it ends; exit 0 only if
#            it completed
#   restart  the coordinator goes down and comes back: the SuperLink is stopped and started again
#            on the same database; the nodes stay up and reconnect, the earlier runs stay listed
#   check    each site's privacy ledger, then `audit verify` and `audit report` of the last run
#   crash    SITE's node dies at once (SIGKILL to its whole process group, as a power cut would):
#            the drill for a hospital lost mid-round; the run goes on without it
#   down     stop the SuperLink and the nodes this script started
#   all      up, run, restart, run, check, down (the default): the page's walk-through
#
# One port everywhere: PORT (default 8000, Flower's) is the SuperLink's --port, the address every
# node dials and the address in $FLWR_HOME/config.toml. Everything runs in WORK (default
# ./deploy-work), the folder the TOML files' relative paths refer to.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ACTION="${1:-all}"
WORK="${2:-deploy-work}"
PORT="${PORT:-8000}"
SITES=(site0 site1 site2 site3)
RUN_TIMEOUT="${RUN_TIMEOUT:-1800}"

mkdir -p "$WORK/logs"
WORK="$(cd "$WORK" && pwd)"
cd "$WORK"
export REPO WORK PORT FLWR_HOME="$WORK/flwr_home" FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1

say() { echo "deploy: $*" >&2; }

# -- the page's helpers, word for word (docs/DEPLOYMENT.md, "Where to work") ---------------------

start() { # start NAME CMD...: CMD in the background, in a session of its own, output in logs/NAME.log
  local name="$1"
  shift
  setsid "$@" >"logs/$name.log" 2>&1 </dev/null &
  echo "$!" >"logs/$name.pid"
}

stop() { # stop NAME: end the session `start NAME` began (SIGTERM; SIGKILL after 30 s) and wait for it
  [ -e "logs/$1.pid" ] || return 0
  local pid
  pid="$(cat "logs/$1.pid")"
  kill -TERM -- "-$pid" 2>/dev/null || true
  for _ in $(seq 60); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  kill -KILL -- "-$pid" 2>/dev/null || true
  rm -f "logs/$1.pid"
}

json_field() { # json_field KEY < flwr's JSON output: KEY of the run (`flwr run`, `flwr ls`); online: nodes online
  python3 -c '
import json, sys
text = sys.stdin.read()
data = json.loads(text[text.index("{"):])
if not data.get("success", True):
    sys.exit("flwr: " + str(data.get("error-message", data)))
if sys.argv[1] == "online":
    print(sum(node.get("status") == "online" for node in data.get("nodes", [])))
else:
    print(((data.get("runs") or [{}])[0] if "runs" in data else data).get(sys.argv[1], ""))' "$1"
}

wait_for() { # wait_for SECONDS WHAT CONDITION: until the shell CONDITION holds (every 2 s); after SECONDS, say so and fail
  local deadline=$((SECONDS + $1))
  until eval "$3"; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "gave up after $1 s waiting for $2 (logs in $WORK/logs)" >&2
      return 1
    fi
    sleep 2
  done
}

# -- the steps -----------------------------------------------------------------------------------

superlink() { # the SuperLink: TLS, SuperNode authentication, its state in a database file that
  #             outlives a restart, no dependency installation at run time; then wait until it answers
  start superlink flower-superlink --database superlink.db \
    --ssl-ca-certfile certs/ca.crt --ssl-certfile certs/superlink.pem --ssl-keyfile certs/superlink.key \
    --enable-supernode-auth --host 127.0.0.1 --port "$PORT" --disable-runtime-dependency-installation
  wait_for 120 "the SuperLink on 127.0.0.1:$PORT to answer" 'flwr ls local-deploy >/dev/null 2>&1'
}

up() {
  # 1. Keys (the key ceremony: each party makes its own signing key, only public halves are
  #    exchanged) and certificates (CA, SuperLink, node keys)
  [ -d keys ] || bash "$REPO/examples/key-ceremony/ceremony.sh" keys site0 site1 site2 site3
  [ -d certs ] || secure-fed certs init --out certs --host 127.0.0.1 --host localhost \
    --nodes site0,site1,site2,site3

  # 2. Each hospital's own policy, and the code its node runs: the FAB built from the release it
  #    has (here this repository), reviewed against its installed secure_fed, its SHA-256 pinned
  #    in the site's [deploy] approved_fabs; then its node's checks and caches
  for site in "${SITES[@]}"; do
    cp "$REPO/examples/deploy-local/$site.toml" .
  done
  cp "$REPO/examples/deploy-local/server.toml" .
  package
  for site in "${SITES[@]}"; do
    secure-fed code review fab/*.fab --config "$site.toml" >"logs/$site-review.txt"
    secure-fed code approve fab/*.fab --config "$site.toml" --note "release 0.1.0, ticket 123"
  done
  for site in "${SITES[@]}"; do
    secure-fed client --site "$site" --config "$site.toml" --keys "keys/$site-keys" --prepare-only
  done

  # 3. How `flwr` reaches the SuperLink (a named connection with the CA, no `insecure`), the
  #    SuperLink, and the operator admitting each hospital's node key
  mkdir -p "$FLWR_HOME"
  sed -e "s|@PORT@|$PORT|g" -e "s|@WORK@|$WORK|g" "$REPO/examples/deploy-local/flwr_home/config.toml" \
    >"$FLWR_HOME/config.toml"
  superlink
  for site in "${SITES[@]}"; do
    flwr supernode register "certs/$site-node.pub" local-deploy
  done

  # 4. Each hospital's node (TLS, its own auth key, one local Runtime API port per node)
  for k in 0 1 2 3; do
    start "site$k" secure-fed client --site "site$k" --config "site$k.toml" --keys "keys/site$k-keys" \
      --superlink "127.0.0.1:$PORT" --root-certificates certs/ca.crt --auth-key "certs/site$k-node.key" \
      --runtime-port "$((PORT + 10 + k))"
  done
  # Ready when the SuperLink sees every node online (each fills its caches before it dials)
  wait_for "$RUN_TIMEOUT" "all ${#SITES[@]} nodes online" \
    '[ "$(flwr supernode list local-deploy --format json | json_field online)" = "${#SITES[@]}" ]'
  say "SuperLink on 127.0.0.1:$PORT, nodes ${SITES[*]} online (logs in $WORK/logs)"
}

package() {
  # The app as pyproject.toml declares it, copied once (`flwr run` packs the folder it is given, and
  # the sites approved the FAB of exactly this copy), and that FAB, as `flwr build` makes it
  [ -d app ] && return 0
  mkdir -p app fab
  cp "$REPO/pyproject.toml" "$REPO/README.md" app/
  (cd "$REPO" && find secure_fed -name '*.py' -print0 | xargs -0 cp --parents -t "$WORK/app")
  (cd fab && flwr build --app ../app)
}

run() {
  [ -d app ] || { say "no approved app: run \`$0 up $WORK\` first (it builds the FAB the sites approve)"; return 1; }
  local run_id status
  flwr run app local-deploy --format json --run-config "config-file='$WORK/server.toml'" >logs/run.json
  run_id="$(json_field run-id <logs/run.json)"
  say "run $run_id submitted"
  wait_for "$RUN_TIMEOUT" "run $run_id to end" \
    'flwr ls local-deploy --run-id $run_id --format json | json_field status | grep -q "^finished:"'
  status="$(flwr ls local-deploy --run-id "$run_id" --format json | json_field status)"
  if [ "$status" = finished:completed ]; then
    say "run $run_id completed: server/runs/$run_id, site*/runs/$run_id"
    return 0
  fi
  flwr log "$run_id" local-deploy --show >&2 || true
  say "run $run_id ended $status (the ServerApp's log is above)"
  return 1
}

restart() {
  # The coordinator's machine goes down and comes back; the nodes stay up. On the same database
  # the SuperLink still knows every registered node key (each node is back with its next
  # heartbeat, nothing registered again) and every earlier run.
  local run_id
  stop superlink
  superlink
  if [ -e logs/run.json ]; then
    run_id="$(json_field run-id <logs/run.json)"
    flwr ls local-deploy --run-id "$run_id" --format json | json_field status
  fi
  flwr supernode list local-deploy
  say "SuperLink restarted on its database superlink.db"
}

check() {
  local run_id
  if [ ! -e logs/run.json ]; then
    say "no run to check in $WORK yet: \`$0 run $WORK\` starts one (check reads its id from logs/run.json)"
    return 1
  fi
  run_id="$(json_field run-id <logs/run.json)"
  for site in "${SITES[@]}"; do
    secure-fed ledger show --site "$site" --config "$site.toml"
  done
  secure-fed audit verify "server/runs/$run_id/audit/server.jsonl" site*/"runs/$run_id/audit/"*.jsonl \
    --keys keys/verifier-keys
  secure-fed audit report "server/runs/$run_id/audit/server.jsonl" site*/"runs/$run_id/audit/"*.jsonl \
    --keys keys/verifier-keys -o report.html
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
  for name in site0 site1 site2 site3 superlink; do
    stop "$name"
  done
  say "stopped"
}

case "$ACTION" in
up) up ;;
run) run ;;
restart) restart ;;
check) check ;;
crash) crash "${3:-}" ;;
down) down ;;
all)
  trap down EXIT
  up
  run
  restart
  run
  check
  down
  ;;
*)
  echo "usage: $0 [up|run|restart|check|crash|down|all] [WORK] [SITE]" >&2
  exit 2
  ;;
esac
