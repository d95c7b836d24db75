#!/usr/bin/env bash
# Before/after of bench/request_path.py on two server binaries, alternated run
# by run (old first in odd runs, new first in even ones), each server started
# fresh without a database on a loopback port; `uptime` logged before each run.
# Prints, per binary and size, the median over runs of each run's medians of
# server - kernel - copies (server_over_ms) and of the same without receiving
# the body (server_unread_ms), with every run's figure in brackets, and the
# device's wall time beyond its profiled commands (device_ms - kernel - the
# part of x's upload after the body - y's download);
# then the split after the body (server_after_ms: server - read - kernel - the
# part of x's upload after its last byte - y's download; for a server that
# uploads x once whole the same as the second column), the time after the
# body (after_read_ms), and read_ms beside loopback_x_ms (x's bytes alone over
# loopback, measured in the same run).
#
# Usage: bench/request_path_ab.sh OLD_BIN NEW_BIN RUNS OUT_DIR [request_path.py args...]
#   e.g. bench/request_path_ab.sh /tmp/server-main target/release/server 4 /tmp/ab \
#          --nnz 100000,1000000,10000000 --precision f64 --forms binary --calls 20
set -euo pipefail
old=$1 new=$2 runs=$3 out=$4
shift 4
mkdir -p "$out"
port=${PORT:-18461}
here=$(dirname "$0")
for r in $(seq 1 "$runs"); do
  if ((r % 2)); then order="old new"; else order="new old"; fi
  for who in $order; do
    bin=$old
    [[ $who == new ]] && bin=$new
    SPMV_BIND=127.0.0.1:$port "$bin" --no-database >"$out/$who-$r.log" 2>&1 &
    pid=$!
    until curl -sf "http://127.0.0.1:$port/healthz" >/dev/null; do
      sleep 0.5
      kill -0 "$pid"
    done
    echo "$who run $r: $(uptime)" | tee -a "$out/uptime.txt"
    python3 "$here/request_path.py" --url "http://127.0.0.1:$port" --out "$out/$who-$r.csv" "$@" \
      2>>"$out/$who-$r.log" || echo "$who run $r: request_path.py failed (see $out/$who-$r.log)"
    kill "$pid"
    wait "$pid" || true
  done
done
python3 - "$out" <<'PY'
import csv, glob, os, statistics, sys
rows = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*-*.csv"))):
    who = os.path.basename(f).split("-")[0]
    for r in csv.DictReader(open(f)):
        rows.setdefault((int(r["nnz"]), r["precision"], r["form"], who), []).append(r)
print("| nnz | precision | form | server | runs | kernel ms | upload x + download y ms | device wall - profiled ms "
      "| server - kernel - copies ms (per run) | without receiving the body ms (per run) "
      "| after the body: server's own ms (per run) | after the body ms | x upload after the body ms "
      "| read ms | loopback x ms |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for key in sorted(rows, key=lambda k: (k[0], k[1], k[2], k[3] != "new")):
    rs = rows[key]
    med = lambda k: statistics.median(float(r[k]) for r in rs)
    runs = lambda k: " / ".join(f"{float(r[k]):.2f}" for r in rs)
    copies = statistics.median(float(r["upload_x_ms"]) + float(r["download_y_ms"]) for r in rs)
    # (The device's wall time covers only the part of x's upload after the body.)
    gap = statistics.median(float(r["device_ms"]) - float(r["kernel_ms"]) - float(r["upload_x_after_ms"])
                            - float(r["download_y_ms"]) for r in rs)
    print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {len(rs)} | {med('kernel_ms'):.3f} | {copies:.3f} | {gap:.3f} "
          f"| {med('server_over_ms'):.3f} ({runs('server_over_ms')}) "
          f"| {med('server_unread_ms'):.3f} ({runs('server_unread_ms')}) "
          f"| {med('server_after_ms'):.3f} ({runs('server_after_ms')}) | {med('after_read_ms'):.3f} "
          f"| {med('upload_x_after_ms'):.3f} | {med('read_ms'):.3f} | {med('loopback_x_ms'):.3f} |")
PY
