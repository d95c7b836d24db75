#!/usr/bin/env bash
# The service's request path under alternated settings, on the GPU machine
# (repo root, .campaign carried; see docs/gpu-campaign.md):
#
#   scripts/gpu-request-settings.sh OUT ROUNDS NNZ SETTING...
#
# Each SETTING is a space-separated list of VAR=value (e.g. "SPMV_HOST_POOLS=pinned",
# "SPMV_HOST_POOLS=heap SPMV_BINARY_STAGING=direct"); each round runs the
# campaign's request stage (bench/request_path.py: binary x and y, f64, an
# uploaded 2D stencil, 20 calls per size) once per setting, the order rotated
# from round to round so that no setting always runs first. NNZ: sizes, comma
# separated (e.g. 100000,1000000,10000000). Writes OUT/settings.csv (the
# request CSV's columns after `round` and `setting`) and prints the medians of
# the rounds per setting and size. The fourth H100 window's request A/Bs were
# run this way (training-data/report/nvidia-h100-80gb-hbm3/window4-2026-11-26/).
set -euo pipefail
[[ $# -ge 4 ]] || { sed -n 2,15p "$0"; exit 64; }
OUT="$1" ROUNDS="$2" NNZ="$3"; shift 3
SETTINGS=("$@")
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$OUT" /tmp/spmv-no-state
n=${#SETTINGS[@]}
for ((r = 1; r <= ROUNDS; r++)); do
  for ((i = 0; i < n; i++)); do
    j=$(( (i + r - 1) % n ))
    dir="$OUT/s$j-r$r"
    echo "round $r: ${SETTINGS[$j]}" >&2
    # shellcheck disable=SC2086
    env ${SETTINGS[$j]} OUT="$dir" CAMPAIGN_STATE=/tmp/spmv-no-state CAMPAIGN_MINUTES=2 \
      CAMPAIGN_REQUEST_ARGS="--nnz $NNZ --precision f64 --forms binary --calls 20" \
      timeout 100 "$ROOT/scripts/gpu-campaign.sh" run request >"$dir.log" 2>&1 || echo "  exit $?" >&2
    rm -f "$dir"/campaign.db.xz*
  done
done
python3 - "$OUT" "${SETTINGS[@]}" <<'PY'
import csv, glob, os, re, statistics, sys
out, settings = sys.argv[1], sys.argv[2:]
rows = []
for f in sorted(glob.glob(os.path.join(out, "s*-r*", "request.csv"))):
    j, r = map(int, re.search(r"s(\d+)-r(\d+)", f).groups())
    for row in csv.DictReader(open(f)):
        rows.append({"round": r, "setting": settings[j], **row})
if not rows:
    sys.exit("no request.csv came back: see the .log files in " + out)
with open(os.path.join(out, "settings.csv"), "w", newline="") as fh:
    w = csv.DictWriter(fh, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
med = lambda rs, c: statistics.median(float(x[c]) for x in rs)
for s in settings:
    for n in sorted({int(x["nnz"]) for x in rows}):
        rs = [x for x in rows if x["setting"] == s and int(x["nnz"]) == n]
        if rs:
            gap = statistics.median(float(x["device_ms"]) - float(x["kernel_ms"]) - float(x["upload_x_ms"]) - float(x["download_y_ms"]) for x in rs)
            print(f"{s:45s} {n:>9d} rounds {len(rs)}  server {med(rs, 'server_ms'):.3f}  client {med(rs, 'client_ms'):.3f}  device {med(rs, 'device_ms'):.3f}  gap {gap:.3f}  after body {med(rs, 'server_after_ms'):.3f}")
PY
