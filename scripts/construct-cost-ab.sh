#!/bin/sh
# Constructor and feature pass before/after (issue 12: saved or only moved?).
# Two builds of `cargo build --release -p sparse --example construct_cost`
# (copy target/release/examples/construct_cost out of target/ for the "before"
# one) run family by family, interleaved, in one run; then per matrix the least
# of REPS timings of `Csr::try_new` on sorted arrays and of `Features::of`, and
# their sum, before and after.
#
#   scripts/construct-cost-ab.sh BEFORE AFTER OUTDIR [REPS] [SIZES]
set -eu
B=$1 A=$2 OUT=$3 REPS=${4:-9} SIZES=${5:-1000000,4000000,16000000}
mkdir -p "$OUT"
: > "$OUT/before.csv"; : > "$OUT/after.csv"
for f in stencil2d stencil3d7 stencil3d27 uniform_random power_law road_like block_diagonal lp_like mixed_lengths many_empty_rows; do
  uptime >> "$OUT/uptime.txt"
  "$B" "$REPS" "$SIZES" "$f" | tail -n +2 >> "$OUT/before.csv"
  "$A" "$REPS" "$SIZES" "$f" | tail -n +2 >> "$OUT/after.csv"
done
uptime >> "$OUT/uptime.txt"
python3 - "$OUT" <<'PY'
import csv, statistics as st, sys
d = sys.argv[1]
b = list(csv.reader(open(d + '/before.csv'))); a = list(csv.reader(open(d + '/after.csv')))
print(f"{'family':<16}{'nnz':>9} {'new b':>7} {'new a':>7} {'feat b':>7} {'feat a':>7} {'sum b':>7} {'sum a':>7} {'b/a':>5}")
rs = []
for x, y in zip(b, a):
    assert x[:2] == y[:2], (x, y)
    nb, fb, na, fa = map(float, (x[2], x[3], y[2], y[3]))
    rs.append(((nb + fb) / (na + fa), nb / na, fb / fa))
    print(f"{x[0]:<16}{int(x[1]):>9} {nb:7.3f} {na:7.3f} {fb:7.3f} {fa:7.3f} {nb+fb:7.3f} {na+fa:7.3f} {(nb+fb)/(na+fa):5.2f}")
print("before/after, median over %d matrices: constructor %.2fx, features %.2fx, both %.2fx" % (
    len(rs), st.median(r[1] for r in rs), st.median(r[2] for r in rs), st.median(r[0] for r in rs)))
PY
