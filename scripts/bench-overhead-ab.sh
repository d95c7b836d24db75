#!/bin/sh
# Before/after of the analysis overhead (issue 12): two `spmv` binaries run
# `bench-overhead` family by family, interleaved, in one run; then per family
# the worst and median (features + prediction) / SpMV of each, with each
# matrix's SpMV time pooled over both runs (the least of the two: the plans are
# the same, so the kernel time is one quantity and its noise is not charged to
# either side).
#
#   scripts/bench-overhead-ab.sh BEFORE_SPMV AFTER_SPMV OUTDIR [min|median] [FAMILY...]
#
# A "before" binary: `git stash; git checkout <old> -- crates/sparse/src;
# cargo build --release -p cli; cp target/release/spmv /tmp/spmv-before`, then
# restore the tree and build again for "after".
set -eu
B=$1 A=$2 OUT=$3 STAT=${4:-min}
shift 3; [ $# -gt 0 ] && shift
FAMS=${*:-"stencil2d stencil3d7 stencil3d27 uniform_random power_law road_like block_diagonal lp_like mixed_lengths many_empty_rows"}
mkdir -p "$OUT"
for f in $FAMS; do
  uptime >> "$OUT/uptime.txt"
  "$B" bench-overhead --families "$f" --stat "$STAT" --csv > "$OUT/before-$f.csv" 2>> "$OUT/before.log"
  "$A" bench-overhead --families "$f" --stat "$STAT" --csv > "$OUT/after-$f.csv" 2>> "$OUT/after.log"
done
uptime >> "$OUT/uptime.txt"
python3 - "$OUT" <<'PY'
import csv, glob, os, sys, statistics as st
d = sys.argv[1]
rows = []
for p in sorted(glob.glob(d + '/after-*.csv')):
    f = os.path.basename(p)[6:-4]
    b = list(csv.DictReader(open(f'{d}/before-{f}.csv'))); a = list(csv.DictReader(open(p)))
    for x, y in zip(b, a):
        assert x['matrix'] == y['matrix'] and x['plan'] == y['plan'], (x['matrix'], x['plan'], y['plan'])
        spmv = min(float(x['spmv_ms']), float(y['spmv_ms']))
        hb = float(x['features_ms']) + float(x['predict_ms'])
        ha = float(y['features_ms']) + float(y['predict_ms'])
        rows.append((f, y['matrix'] + ' ' + y['precision'], hb / spmv, ha / spmv,
                     float(x['features_ms']) / float(y['features_ms'])))
print(f"{'family':<16} {'worst before':>12} {'worst after':>11} {'median b':>8} {'median a':>8}  worst matrix after")
worst = []
for f in sorted(set(r[0] for r in rows)):
    rs = [r for r in rows if r[0] == f]
    wa = max(rs, key=lambda r: r[3])
    worst.append((max(r[2] for r in rs), wa[3], f))
    print(f"{f:<16} {worst[-1][0]:12.3f} {wa[3]:11.3f} {st.median(r[2] for r in rs):8.3f} "
          f"{st.median(r[3] for r in rs):8.3f}  {wa[1]}")
print("worst family: before %.3f (%s), after %.3f (%s)" % (
    max(worst)[0], max(worst)[2], max(w[1] for w in worst), max(worst, key=lambda w: w[1])[2]))
print("features before / after, median over %d rows: %.2fx" % (len(rows), st.median(r[4] for r in rows)))
PY
