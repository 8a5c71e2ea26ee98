#!/usr/bin/env bash
# The compose cluster under real faults. Builds the image, solves a board with the engine
# for reference, starts the compose cluster (databases built into a shared volume, gRPC
# over TLS with a token) with 3 database-backed workers on it, and during the run:
#   1. kills one worker container with SIGKILL (then starts it again),
#   2. kills the coordinator container with SIGKILL and starts it again,
#   3. cuts a worker off the network for longer than a lease, then reconnects it.
# Then asserts: the answer equals `cram solve`'s, no finished unit was solved twice (from
# the event log), every worker exited 0 and searched with the databases the coordinator
# checked at registration, the status page and metrics answered, and the logs show each
# fault handled. Everything
# is torn down, also on failure. Skipped, with a notice, when no Docker engine answers.
set -euo pipefail
# With pipefail, a pipeline whose reader stops early (head, grep -q) fails with 141 when its
# writer is still writing: lists are read whole (mapfile) and greps read to the end.
cd "$(dirname "$0")/.."

if ! docker info >/dev/null 2>&1; then
    echo "deploy/test.sh: SKIPPED: no Docker engine answers (docker info failed)"
    exit 0
fi

JOB="${JOB:-5x9}"
LEASE=10
P="cramtest$$"
tmp="$(mktemp -d)"
if docker compose version >/dev/null 2>&1; then
    compose() { docker compose -p "$P" -f deploy/compose.yaml "$@"; }
else
    compose() { docker-compose -p "$P" -f deploy/compose.yaml "$@"; }
fi
cleanup() {
    compose down -v --remove-orphans --timeout 5 >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT
[ -z "${KEEP:-}" ] || trap - EXIT
fail() {
    echo "deploy/test.sh: FAILED: $*" >&2
    compose logs --no-color --tail 40 >&2 || true
    exit 1
}
started=$(date +%s)
say() { printf '[%4ss] %s\n' "$(( $(date +%s) - started ))" "$*"; }

TAG=test deploy/build-image.sh
cram=target/x86_64-unknown-linux-gnu/release/cram
say "reference: cram solve $JOB"
expect="${EXPECT:-$($cram solve "$JOB" --json --no-db | python3 -c 'import json,sys; v=json.load(sys.stdin); print(v["outcome"], v["nimber"])')}"
say "engine says: $expect"

head -c 32 /dev/urandom | base64 | tr -d '/+=\n' > "$tmp/token"
chmod 644 "$tmp/token"
deploy/tls.sh "$tmp/tls" >/dev/null
DBS="4x7,3x9,5x5"
export CRAM_TAG=test CRAM_JOB="$JOB" CRAM_LEASE_SECS=$LEASE CRAM_PROGRESS_SECS=5 CRAM_PUBLISH=127.0.0.1: \
    CRAM_HTTP_PUBLISH=127.0.0.1: CRAM_TOKEN_FILE="$tmp/token" CRAM_TLS_DIR="$tmp/tls" CRAM_DBS="$DBS" \
    CRAM_WORKER_TT_MB=32 CRAM_LINGER_SECS=40 CRAM_SPLIT_DEPTH=2 CRAM_UNIT_NODES=3000000
compose up -d --scale worker=3 >/dev/null 2>&1 || fail "compose up"
cluster_start=$(date +%s)
say "cluster up: databases $DBS, coordinator (TLS) and 3 workers on $JOB"

status() {
    local addr
    addr="$(compose port coordinator 7700 2>/dev/null)" || return 1
    $cram status --coordinator "https://$addr" --tls-ca "$tmp/tls/ca.pem" --token-file "$tmp/token" --json 2>/dev/null
}
done_units() { status | python3 -c 'import json,sys; print(json.load(sys.stdin)["units"]["done"])' 2>/dev/null || echo -1; }
wait_done_units() {
    local want=$1 deadline=$(( $(date +%s) + 180 ))
    until [ "$(done_units)" -ge "$want" ]; do
        [ "$(date +%s)" -lt "$deadline" ] || fail "no progress to $want units"
        sleep 0.5
    done
}

coordinator_log() { docker logs "$(compose ps -q coordinator)" 2>&1 >/dev/null; }
host_of() { docker inspect -f '{{.Config.Hostname}}' "$1"; }
# True when `cram status` shows the worker in container $1 holding a unit.
holding() {
    status | python3 -c '
import json, sys
host = sys.argv[1]
s = json.load(sys.stdin)
sys.exit(0 if any(w["name"] == host and w["units"] for w in s["workers"]) else 1)' "$(host_of "$1")" 2>/dev/null
}
# Waits until the worker in container $1 holds a unit.
wait_holding() {
    local deadline=$(( $(date +%s) + 120 ))
    until holding "$1"; do
        [ "$(date +%s)" -lt "$deadline" ] || fail "worker $(host_of "$1") never held a unit"
        sleep 0.3
    done
}
# Waits until the coordinator log shows a lease of the worker in container $1 expiring.
wait_expiry() {
    local host deadline=$(( $(date +%s) + 60 ))
    host="$(host_of "$1")"
    until coordinator_log | grep "lease expired" | grep "worker=$host" >/dev/null; do
        [ "$(date +%s)" -lt "$deadline" ] || fail "no lease expiry for worker $host"
        sleep 0.5
    done
}

wait_done_units 3
# What people look at while it runs: the status page and the metrics.
http="$(compose port coordinator 7780)"
python3 - "$http" <<'PY' || fail "status page or metrics"
import json, sys, urllib.request
base = f"http://{sys.argv[1]}"
page = urllib.request.urlopen(base + "/").read().decode()
assert "<title>cram coordinator</title>" in page, page[:200]
status = json.load(urllib.request.urlopen(base + "/status.json"))
assert status["units"]["done"] >= 3 and status["history"], status
metrics = urllib.request.urlopen(base + "/metrics").read().decode()
assert "# TYPE cram_nodes_total counter" in metrics and "cram_workers 3" in metrics, metrics[:500]
print(f"status page and metrics answer: {status['units']['done']} units done, 3 workers")
PY
mapfile -t workers < <(compose ps -q worker)
w1="${workers[0]}"
# Killed until the coordinator still counts a lease of it once it is dead (see fault 2).
for try in 1 2 3 4 5; do
    wait_holding "$w1"
    docker kill --signal KILL "$w1" >/dev/null
    sleep 1 # a result already on its way is handled first
    holding "$w1" && break
    [ "$try" -lt 5 ] || fail "worker $(host_of "$w1") never held a unit when killed"
    say "  (it had handed its unit in when killed; started again, to be killed again)"
    docker start "$w1" >/dev/null
done
say "fault 1: SIGKILL worker $(docker inspect -f '{{.Name}}' "$w1") while it holds a unit"
wait_expiry "$w1"
say "  its lease expired and the unit was reissued; starting the worker again"
docker start "$w1" >/dev/null

w2="${workers[1]}"
net="$(docker inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}}{{end}}' "$w2")"
# Units here take a fraction of a second: a worker seen holding one may have handed it in
# by the time it is cut off. Cut it again until the coordinator still counts a lease of it
# once it is cut (nothing from it can arrive then, so only the lease's expiry ends it).
# Longer than a worker gives a call (30 s): a cut shorter than that may pass unnoticed (its
# calls hang, then go on), and the worker is to log the outage.
CUT=36
for try in 1 2 3 4 5; do
    wait_holding "$w2"
    docker network disconnect "$net" "$w2"
    cut_at=$(date +%s)
    sleep 1
    holding "$w2" && break
    [ "$try" -lt 5 ] || fail "worker $(host_of "$w2") never held a unit when cut off"
    say "  (it had handed its unit in when cut off; reconnected, to be cut off again)"
    docker network connect "$net" "$w2"
done
say "fault 2: cut worker $(docker inspect -f '{{.Name}}' "$w2") off $net for $CUT s (lease $LEASE s)"
wait_expiry "$w2"
say "  its lease expired"
left=$(( cut_at + CUT - $(date +%s) ))
[ "$left" -le 0 ] || sleep "$left"
docker network connect "$net" "$w2"
say "  worker reconnected"

coord="$(compose ps -q coordinator)"
say "fault 3: SIGKILL the coordinator, then start it again"
docker kill --signal KILL "$coord" >/dev/null
sleep 2
docker start "$coord" >/dev/null
deadline=$(( $(date +%s) + 60 ))
until status >/dev/null; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "coordinator did not come back"
    sleep 0.5
done
say "  coordinator serving again"

say "waiting for the answer"
code="$(timeout 900 docker wait "$coord")" || fail "the coordinator did not finish"
[ "$code" = 0 ] || fail "coordinator exit code $code"
cluster_secs=$(( $(date +%s) - cluster_start ))
got="$(docker logs "$coord" 2>/dev/null | tail -1 | python3 -c 'import json,sys; v=json.load(sys.stdin); print(v["outcome"], v["nimber"])')"
say "cluster says: $got (in $cluster_secs s)"
[ "$got" = "$expect" ] || fail "cluster answer '$got' differs from the engine's '$expect'"

docker cp "$coord:/data/state/events.jsonl" "$tmp/events.jsonl"
python3 - "$tmp/events.jsonl" <<'PY' || fail "event log check"
import collections, json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
# Solves by honest workers: spot checks (a second answer on purpose) and the results of
# distrusted workers (discarded) are left out.
bad = {e["worker"] for e in events if e["event"] == "distrust"}
finished = collections.Counter(
    e["unit"] for e in events
    if e["event"] == "result" and e["finished"] and not e.get("check") and e["worker"] not in bad
)
twice = [u for u, n in finished.items() if n > 1]
assert not bad, f"workers distrusted in a cluster of honest workers: {sorted(bad)}"
assert not twice, f"units solved twice: {twice}"
starts = sum(e["event"] == "start" for e in events)
assert starts == 2, f"expected 2 coordinator starts, saw {starts}"
print(f"event log: {len(finished)} units, each solved once; {starts} coordinator starts")
PY

for w in $(compose ps -a -q worker); do
    c="$(timeout 60 docker wait "$w")" || fail "a worker did not exit"
    [ "$c" = 0 ] || fail "worker $(docker inspect -f '{{.Name}}' "$w") exit code $c"
done
clog="$(docker logs "$coord" 2>&1 >/dev/null)"
w2log="$(docker logs "$w2" 2>&1)"
w1log="$(docker logs "$w1" 2>&1)"
grep -q "resumed_results=[1-9]" <<<"$clog" || fail "the restarted coordinator resumed nothing"
grep -q "coordinator unreachable" <<<"$w2log" || fail "the cut worker never noticed"
grep -q "registering again" <<<"$w1log$w2log" || fail "no worker registered again after the coordinator restart"
grep -q "answer cache opened" <<<"$w1log" || fail "the restarted worker did not open its cache"
# Every database named on the log line $2 of $1 (in any order).
has_databases() {
    local line
    line="$(grep "$2" <<<"$1" | tail -1)"
    for d in ${DBS//,/ }; do
        [[ "$line" == *databases=*"$d"* ]] || return 1
    done
}
for w in $(compose ps -a -q worker); do
    has_databases "$(docker logs "$w" 2>&1)" "endgame databases" \
        || fail "worker $(docker inspect -f '{{.Name}}' "$w") did not search with the databases"
done
has_databases "$clog" "coordinator serving" || fail "the coordinator has not the databases"
dblog="$(docker logs "$(compose ps -a -q databases)" 2>&1)"
grep "built /data/db/cram-4x7.cramdb" <<<"$dblog" >/dev/null || fail "the databases were not built: $dblog"
cat <<REPORT
deploy/test.sh: PASSED ($JOB, $cluster_secs s in the cluster)
  injected: SIGKILL of a worker container holding a unit (then restarted); a worker holding a
            unit cut off the network for $CUT s (lease $LEASE s, then reconnected);
            SIGKILL of the coordinator container (then restarted)
  setup:    databases $DBS built once into a shared volume, loaded read-only by every
            worker and the coordinator (fingerprints checked at registration); gRPC over TLS
            with a token; the status page and /metrics answered during the run
  observed: both workers' leases expired and their units were reissued; the cut worker
            logged the outage; the coordinator resumed $(grep -o 'resumed_results=[0-9]*' <<<"$clog" | tail -1 | cut -d= -f2) results
            from its log and the workers registered again; answer $got = the engine's; no unit
            solved twice; all workers exited 0
REPORT
