#!/bin/bash
# Second H100 window: merge_tile tile shapes on the matrices where we lost to
# cuSPARSE, then every kernel on them (f64). Run on the GPU machine from the
# repository root with .campaign carried (scripts/gpu-campaign.sh bundle).
B="$(cd "$(dirname "$0")/.." && pwd)/.campaign"
lib=$(ls /usr/local/nvidia/lib64/libnvidia-opencl.so.1* 2>/dev/null | head -1)
[ -z "$lib" ] && lib="$(find /usr /opt /lib /lib64 -maxdepth 6 -name 'libnvidia-opencl.so.1*' 2>/dev/null | head -1)"
mkdir -p /tmp/icd; echo "$lib" > /tmp/icd/nvidia.icd
export OCL_ICD_VENDORS=/tmp/icd LD_LIBRARY_PATH="$B/lib:$(dirname "$lib")"
mkdir -p /tmp/sw; for m in DIMACS10__vsp_model1_crew1_cr42_south31 DIMACS10__vsp_befref_fxm_2_4_air02 HB__bcsstk33 DIMACS10__ct2010 DIMACS10__delaunay_n16; do ln -sf "$B/matrices/$m.mtx.gz" /tmp/sw/; done
for shape in 128,8 128,7 256,7 64,15 256,8 256,15 512,7; do
  w=${shape%,*}; i=${shape#*,}
  echo "## mt_wg=$w mt_items=$i"
  "$B/bin/spmv" bench --csv --kernels merge_tile --copy-mb 64 --plan-scheme none --precision f64 --kernel-params mt_wg=$w,mt_items=$i /tmp/sw 2>&1 | grep -v "^#" | sed "s/^/$w,$i,/"
done
echo "## reference kernels"
"$B/bin/spmv" bench --csv --copy-mb 64 --plan-scheme none --precision f64 /tmp/sw 2>&1 | grep -v "^#"
