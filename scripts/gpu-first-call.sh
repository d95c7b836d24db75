#!/bin/bash
# Second H100 window: first calls on the GPU: inline /spmv planned for one call vs for many (bench/first_call.py).
ROOT="$(cd "$(dirname "$0")/.." && pwd)"; B="$ROOT/.campaign"
lib=$(ls /usr/local/nvidia/lib64/libnvidia-opencl.so.1* 2>/dev/null | head -1)
mkdir -p /tmp/icd; echo "$lib" > /tmp/icd/nvidia.icd
ORIG="${LD_LIBRARY_PATH:-}"
OCL_ICD_VENDORS=/tmp/icd LD_LIBRARY_PATH="$B/lib:$(dirname "$lib")" "$B/bin/server" --bind 127.0.0.1:18181 --no-database --models-dir "$B/models" > /tmp/srv.log 2>&1 &
pid=$!
for i in $(seq 1 120); do curl -sf http://127.0.0.1:18181/readyz >/dev/null && break; sleep 0.5; done
curl -s http://127.0.0.1:18181/models | head -c 1500; echo
F=""; for m in HB__bcsstk33 DIMACS10__ct2010 DIMACS10__delaunay_n16 Grund__bayer10 DIMACS10__de2010 AG-Monien__whitaker3 HB__bcsstk21 DIMACS10__vsp_model1_crew1_cr42_south31; do F="$F $B/matrices/$m.mtx.gz"; done
for p in f64 f32; do LD_LIBRARY_PATH="$ORIG" python3 "$ROOT/bench/first_call.py" --url http://127.0.0.1:18181 --precision $p --reps 7 $F; done
kill $pid; wait $pid; tail -5 /tmp/srv.log
