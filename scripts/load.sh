#!/usr/bin/env bash
# Open-loop load on loopback: builds the release binaries, starts the server on a
# free 127.0.0.1 port without a database, finds (or takes) the sustainable rate of
# /predict and of /spmv by id, runs 1x, 2x and 4x of it, prints a table and checks
# that overload is shed with quick 503s (never another 5xx, no errors or client
# time-outs) and that /healthz answers 200 right after each phase. The server is
# stopped at the end. Exit status 1 when a check fails.
#
# Environment (all optional):
#   LOAD_SECONDS=10        seconds per phase
#   LOAD_P99_MS=50         p99 bound of the sustainable-rate search (ms)
#   LOAD_PROBE_S=5         seconds of each probe of the search
#   LOAD_SHED_MS=250       bound on a 503's p99, from its send (ms)
#   LOAD_PREDICT_RATE=N    take N req/s for /predict instead of searching
#   LOAD_SPMV_RATE=N       the same for /spmv
#   LOAD_MAX_RATE=8000     highest rate the search tries
#   LOAD_OUT=DIR           keep each phase's loadgen JSON there
#   LOAD_ARGS="..."        extra loadgen flags (e.g. --matrix-nnz 1000000 --precision f64)
set -euo pipefail
cd "$(dirname "$0")/.."

PHASE_S=${LOAD_SECONDS:-10}
P99_MS=${LOAD_P99_MS:-50}
SHED_MS=${LOAD_SHED_MS:-250}
PROBE_S=${LOAD_PROBE_S:-5}
MAX_RATE=${LOAD_MAX_RATE:-8000}
read -r -a EXTRA <<<"${LOAD_ARGS:-}"

cargo build --release -q -p server --bin server --bin loadgen
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
ADDR=127.0.0.1:$PORT
WORK=$(mktemp -d)
target/release/server --bind "$ADDR" --no-database >"$WORK/server.log" 2>&1 &
SERVER=$!
stop() {
    kill "$SERVER" 2>/dev/null || true
    wait "$SERVER" 2>/dev/null || true
    rm -rf "$WORK"
}
trap stop EXIT

# Milliseconds until /healthz answers 200 (at most 30 s), or "never".
healthz_ms() {
    local t0 code
    t0=$(date +%s%N)
    for _ in $(seq 300); do
        code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "http://$ADDR/healthz" || true)
        if [ "$code" = 200 ]; then
            echo $((($(date +%s%N) - t0) / 1000000))
            return
        fi
        sleep 0.1
    done
    echo never
}

[ "$(healthz_ms)" != never ] || { echo "server did not start:"; cat "$WORK/server.log"; exit 1; }
echo "server on $ADDR (pid $SERVER); ${PHASE_S} s per phase" >&2

for target in predict spmv; do
    var=LOAD_$(echo "$target" | tr a-z A-Z)_RATE
    rate=${!var:-}
    if [ -z "$rate" ]; then
        echo "searching the sustainable rate of /$target (p99 <= $P99_MS ms, only 200s) ..." >&2
        rate=$(target/release/loadgen --addr "$ADDR" --target "$target" "${EXTRA[@]}" \
            --find-sustainable --rate 100 --p99-ms "$P99_MS" --probe-seconds "$PROBE_S" --max-rate "$MAX_RATE" --json |
            python3 -c 'import json, sys; print(int(json.load(sys.stdin)["sustainable_rate"]))')
    fi
    if [ "$rate" -le 0 ]; then
        echo "no sustainable rate found for /$target" >&2
        exit 1
    fi
    echo "$target" "$rate" >>"$WORK/rates"
    for mult in 1 2 4; do
        echo "/$target at ${mult}x = $((rate * mult)) req/s ..." >&2
        target/release/loadgen --addr "$ADDR" --target "$target" "${EXTRA[@]}" \
            --rate $((rate * mult)) --seconds "$PHASE_S" --json >"$WORK/$target-$mult.json"
        echo "$mult $(healthz_ms)" >"$WORK/$target-$mult.healthz"
        if [ -n "${LOAD_OUT:-}" ]; then mkdir -p "$LOAD_OUT" && cp "$WORK/$target-$mult.json" "$LOAD_OUT/"; fi
    done
done

python3 - "$WORK" "$SHED_MS" "$P99_MS" <<'EOF'
import json, sys, pathlib
work, shed_ms, p99_ms = pathlib.Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
f = lambda v: "-" if v is None else f"{v:.1f}"
print(f"{'target':8} {'x':>2} {'rate':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
      f"{'200':>6} {'503':>6} {'5xx':>4} {'other':>5} {'err':>4} {'t/o':>4} {'503 p99':>8} {'lag p99':>8} {'healthz':>8}")
failures = []
for line in (work / "rates").read_text().split("\n"):
    if not line:
        continue
    target, _ = line.split()
    for mult in (1, 2, 4):
        s = json.loads((work / f"{target}-{mult}.json").read_text())
        health = (work / f"{target}-{mult}.healthz").read_text().split()[1]
        print(f"{target:8} {mult:>2} {s['rate']:>6.0f} {f(s['p50_ms']):>8} {f(s['p99_ms']):>8} "
              f"{f(s['max_ms']):>8} {s['ok']:>6} {s['s503']:>6} {s['other_5xx']:>4} {s['other']:>5} "
              f"{s['errors']:>4} {s['timeouts']:>4} {f(s['shed_p99_ms']):>8} {f(s['lag_p99_ms']):>8} {health + ' ms':>8}")
        where = f"/{target} at {mult}x"
        if s["other_5xx"] or s["other"]:
            failures.append(f"{where}: statuses other than 200 and 503: {s['statuses']}")
        if s["errors"] or s["timeouts"]:
            failures.append(f"{where}: {s['errors']} errors ({s['first_error']}), {s['timeouts']} time-outs")
        if s["s503"] and s["shed_p99_ms"] > shed_ms:
            failures.append(f"{where}: 503s are slow (p99 {s['shed_p99_ms']:.1f} ms > {shed_ms} ms)")
        if mult > 1 and s["s503"] == 0 and (s["ok_p99_ms"] or 0) > p99_ms:
            failures.append(f"{where}: overload queued, not shed (200 p99 {s['ok_p99_ms']:.1f} ms, no 503)")
        if health == "never":
            failures.append(f"{where}: /healthz did not answer 200 within 30 s")
print("\np50/p99/max: every answer, from its scheduled send; 503 p99: from its actual send; lag p99: how late "
      "requests left their schedule (the generator short of CPU or slots); healthz: time until /healthz answered 200 after the phase")
for x in failures:
    print("CHECK FAILED:", x)
print("all checks passed" if not failures else f"{len(failures)} checks failed")
sys.exit(1 if failures else 0)
EOF
