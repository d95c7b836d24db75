#!/usr/bin/env bash
# The GPU campaign in three commands (docs/gpu-campaign.md):
#
#   scripts/gpu-campaign.sh bundle            # here: build and gather .campaign/ (< 50 MiB)
#   scripts/gpu-campaign.sh run [STAGE...]    # on the GPU machine, repo root, .campaign carried
#   scripts/gpu-campaign.sh rehearse          # here or in CI: the same pipeline on PoCL, tiny corpus
#
# Stages of `run`, in this order (default: all): check bench cusparse request label fit.
#   check     every kernel x precision against the reference on every bundled matrix
#             and the awkward shapes, on the device (`spmv check`)
#   bench     `spmv bench --csv`: GB/s beside the device's measured copy bandwidth
#   cusparse  bench/cusparse_bench.py: cuSPARSE through CuPy, f32 and f64, on the bundled
#             matrices and the bench stage's --gen ones (written by `spmv gen`)
#   request   the service on the device: bench/request_path.py checks y on awkward shapes
#             (--awkward), then times POST /spmv on an uploaded 1M-nonzero stencil
#             against kernel + x/y transfer time
#   label     `trainer label` into the results database, stopped by a time budget;
#             run it again (next command) to resume
#   fit       fit and evaluate both models: `trainer run` on the device (held-out
#             matrices re-timed), else `trainer fit --from-db` (stored measurements)
#
# Every stage keeps to a share of one command's time (CAMPAIGN_MINUTES, default 9):
# a stage that would not fit is skipped with a message saying what to run next.
# Outputs go to $OUT (default ./campaign-out), at most 8 files, each < 16 MiB:
#   summary.txt campaign.log check.txt bench.csv cusparse.csv request.csv campaign.db.xz results.tar.gz
# (the database as .gz where neither xz nor Python's lzma exists; .00, .01 parts over 15 MiB)
# Between commands copy what came back into .campaign/state/ (CAMPAIGN_STATE): the next
# `run` resumes from the database there and joins the cuSPARSE figures found there.
#
# Environment: OUT, CAMPAIGN_MINUTES, CAMPAIGN_STATE, CAMPAIGN_DEVICE=any (accept a
# device that is not NVIDIA: the rehearsal), CAMPAIGN_MANIFEST (corpus manifest),
# CAMPAIGN_MATRICES (folder), CAMPAIGN_LABEL_MINUTES (cap of one labelling stage),
# CAMPAIGN_FIT_RESERVE (minutes kept for fit when label and fit run together, 3),
# CAMPAIGN_{CHECK,BENCH,CUSPARSE,REQUEST,TRAIN}_ARGS (extra arguments of each tool).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
B="$ROOT/.campaign"
MAX_BUNDLE_MIB=50
MAX_OUT_BYTES=${CAMPAIGN_MAX_FILE_BYTES:-$((16 * 1024 * 1024 - 1))}

say() { echo "campaign: $*" >&2; }
die() { say "ERROR: $*"; exit 1; }

# ---------------------------------------------------------------- bundle

# Extracts the OpenCL ICD loader and clinfo from Debian's packages into $B.
bundle_opencl() {
  local tmp; tmp="$(mktemp -d)"
  local got=0
  if (cd "$tmp" && apt-get download ocl-icd-libopencl1 clinfo >/dev/null 2>&1); then
    for d in "$tmp"/*.deb; do dpkg -x "$d" "$tmp/x"; done
    got=1
    say "OpenCL loader and clinfo from Debian packages: $(cd "$tmp" && ls ./*.deb | xargs -n1 basename | tr '\n' ' ')"
  else
    say "apt-get download failed (no network?): copying the installed ocl-icd-libopencl1 and clinfo files instead"
    mkdir -p "$tmp/x"
    for pkg in ocl-icd-libopencl1 clinfo; do
      dpkg -L "$pkg" >/dev/null 2>&1 || die "package $pkg is neither downloadable nor installed (run scripts/setup.sh)"
      dpkg -L "$pkg" | while read -r f; do
        if [[ -f "$f" || -L "$f" ]]; then mkdir -p "$tmp/x$(dirname "$f")"; cp -a "$f" "$tmp/x$f"; fi
      done
    done
    got=1
  fi
  [[ $got == 1 ]] || die "no OpenCL loader"
  cp -a "$tmp"/x/usr/lib/x86_64-linux-gnu/libOpenCL.so.1* "$B/lib/"
  cp "$tmp/x/usr/bin/clinfo" "$B/bin/clinfo"
  rm -rf "$tmp"
}

# The newest glibc symbol version the bundled programs need.
glibc_needed() {
  objdump -T "$@" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1
}

write_manifests() {
  cat >"$B/training-data/manifest.json" <<'EOF'
{
  "description": "GPU campaign corpus: every bundled real matrix (../shared/matrices), 120 stand-ins drawn across the kinds and sizes of the SuiteSparse collection scaled to 1M nonzeros, and the 10 generator families at 100K, 1M and 4M nonzeros",
  "real_dir": "matrices",
  "real_fallback_dir": "matrices",
  "stats_file": "training-data/uf_stats.csv",
  "standins": 120,
  "standin_nnz_budget": 1000000,
  "generator_nnz": [100000, 1000000, 4000000],
  "seed": 42
}
EOF
  cat >"$B/training-data/manifest-rehearse.json" <<'EOF'
{
  "description": "campaign rehearsal corpus: the six shipped fixtures and four small stand-ins",
  "real_dir": "rehearse-matrices",
  "real_fallback_dir": "rehearse-matrices",
  "stats_file": "training-data/uf_stats.csv",
  "standins": 4,
  "standin_nnz_budget": 4000,
  "generator_nnz": [],
  "seed": 42
}
EOF
}

cmd_bundle() {
  command -v cargo >/dev/null || die "bundle needs cargo (Rust): run it where the project builds"
  say "building release binaries (spmv, trainer, server)"
  (cd "$ROOT" && cargo build --release -p cli -p trainer -p server)
  local state_keep=""
  if [[ -d "$B/state" ]]; then state_keep="$(mktemp -d)"; cp -a "$B/state/." "$state_keep/"; fi
  rm -rf "$B"
  mkdir -p "$B"/{bin,lib,matrices,rehearse-matrices,training-data,models,kernels,bench,state}
  for b in spmv trainer server; do
    cp "$ROOT/target/release/$b" "$B/bin/$b"
    strip --strip-all "$B/bin/$b"
  done
  bundle_opencl
  cp -r "$ROOT"/kernels/. "$B/kernels/"
  cp "$ROOT"/models/*.json "$B/models/" 2>/dev/null || true
  cp "$ROOT/training-data/uf_stats.csv" "$B/training-data/"
  cp "$ROOT/bench/cusparse_bench.py" "$ROOT/bench/request_path.py" "$B/bench/"
  local shared="$ROOT/../shared/matrices"
  if [[ -d "$shared" ]]; then
    cp "$shared"/*.mtx.gz "$B/matrices/"
    cp "$shared/index.csv" "$B/matrices/" 2>/dev/null || true
    say "matrices: $(ls "$B/matrices" | grep -c '\.mtx') from $shared"
  else
    cp "$ROOT"/crates/sparse/tests/data/* "$B/matrices/"
    say "matrices: ../shared/matrices not found: only the $(ls "$B/matrices" | grep -c '\.mtx') shipped fixtures (big synthetic matrices are generated on the device)"
  fi
  cp "$ROOT"/crates/sparse/tests/data/* "$B/rehearse-matrices/"
  write_manifests
  if [[ -n "$state_keep" ]]; then
    cp -a "$state_keep/." "$B/state/"; rm -rf "$state_keep"
    say "kept the earlier state (database, figures) in $B/state"
  fi
  local glibc; glibc="$(glibc_needed "$B/bin/spmv" "$B/bin/trainer" "$B/bin/server" "$B/bin/clinfo" "$B"/lib/libOpenCL.so.1*)"
  echo "$glibc" >"$B/GLIBC_NEEDED"
  (cd "$ROOT" && git rev-parse HEAD 2>/dev/null || echo unknown) >"$B/COMMIT"
  local bytes; bytes="$(du -sb "$B" | cut -f1)"
  local mib; mib="$(awk -v b="$bytes" 'BEGIN{printf "%.1f", b/1048576}')"
  say "bundle $B: $mib MiB ($bytes bytes); the programs need glibc >= $glibc"
  du -sh "$B"/* | sed 's/^/  /' >&2
  if (( bytes >= MAX_BUNDLE_MIB * 1024 * 1024 )); then
    die "the bundle is $mib MiB, over the $MAX_BUNDLE_MIB MiB limit"
  fi
}

# ---------------------------------------------------------------- run

LOG=""
STATUS=()
T0=$(date +%s)

log() { echo "$*" | tee -a "$LOG" >&2; }
minutes_left() { awk -v t0="$T0" -v now="$(date +%s)" -v m="$CAMPAIGN_MINUTES" 'BEGIN{printf "%.2f", m - (now - t0)/60}'; }
# Seconds a stage may take: its own cap, within what is left minus a reserve.
stage_seconds() { awk -v left="$(minutes_left)" -v cap="$1" -v res="$2" 'BEGIN{s=(left-res)*60; if (s>cap*60) s=cap*60; printf "%d", (s<0?0:s)}'; }

# Runs a stage command under a time limit, its output in the log (and in FILE when given).
run_stage() {
  local name="$1" secs="$2"; shift 2
  if (( secs < 20 )); then
    log "== $name: SKIPPED: not enough time left in this command ($(minutes_left) min); run it in the next command: scripts/gpu-campaign.sh run $name"
    STATUS+=("$name=skipped(time)")
    return 0
  fi
  log "== $name: $* (limit ${secs}s)"
  local t=$(date +%s) rc=0
  timeout --signal=INT --kill-after=20 "$secs" "$@" >>"$LOG" 2>&1 || rc=$?
  log "== $name: exit $rc after $(( $(date +%s) - t ))s"
  if (( rc == 0 )); then STATUS+=("$name=ok"); else STATUS+=("$name=FAILED($rc)"); FAILED=1; fi
  return 0
}

# Finds libnvidia-opencl.so.1 and points the bundled ICD loader at it.
find_nvidia_opencl() {
  local c
  for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib /lib/x86_64-linux-gnu /usr/local/cuda/lib64 /usr/lib/wsl/lib; do
    [[ -e "$d/libnvidia-opencl.so.1" ]] && { echo "$d/libnvidia-opencl.so.1"; return 0; }
  done
  c="$(ldconfig -p 2>/dev/null | awk '/libnvidia-opencl\.so\.1/{print $NF; exit}')"
  [[ -n "$c" && -e "$c" ]] && { echo "$c"; return 0; }
  c="$(find /usr /opt /lib /lib64 -maxdepth 6 -name 'libnvidia-opencl.so.1*' 2>/dev/null | head -1)"
  [[ -n "$c" ]] && { echo "$c"; return 0; }
  return 1
}

setup_opencl() {
  ORIG_LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"
  # The bundle's loader first; system folders never ahead of it.
  export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  local lib
  if lib="$(find_nvidia_opencl)"; then
    local icd=/tmp/spmv-campaign-icd
    mkdir -p "$icd"
    echo "$lib" >"$icd/nvidia.icd"
    export OCL_ICD_VENDORS="$icd"
    # The driver library's own dependencies (libcuda, ...) live beside it: last in the path.
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$(dirname "$lib")"
    NVIDIA=1
    log "NVIDIA OpenCL library: $lib (ICD file $icd/nvidia.icd, OCL_ICD_VENDORS=$icd)"
  else
    NVIDIA=0
    log "NO NVIDIA OpenCL LIBRARY FOUND: libnvidia-opencl.so.1 is in none of /usr/local/nvidia/lib64, the system library folders or ldconfig's cache: the OpenCL stages are skipped (CAMPAIGN_DEVICE=any runs them on any OpenCL device, as the rehearsal does)"
  fi
  log "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  log "--- clinfo -l"
  "$B/bin/clinfo" -l >>"$LOG" 2>&1 || log "(clinfo -l failed: no OpenCL platform)"
}

check_glibc() {
  local need have
  need="$(cat "$B/GLIBC_NEEDED" 2>/dev/null || echo unknown)"
  have="$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')"; have="${have:-unknown}"
  log "glibc: this machine $have, the bundle needs $need"
  if [[ $need != unknown && $have != unknown ]] && [[ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]]; then
    log "WARNING: this machine's glibc $have is older than the $need the bundled programs need: they may not start"
  fi
}

# xz (about 40% smaller than gzip on the database), from xz or Python's lzma.
xz_stream() {
  if command -v xz >/dev/null; then xz -9 -T0 -c; else python3 -c 'import lzma,sys; sys.stdout.buffer.write(lzma.compress(sys.stdin.buffer.read(), preset=9))'; fi
}
unxz_stream() {
  if command -v xz >/dev/null; then xz -dc; else python3 -c 'import lzma,sys; sys.stdout.buffer.write(lzma.decompress(sys.stdin.buffer.read()))'; fi
}

# The state carried from earlier commands: the database and earlier figures.
restore_state() {
  mkdir -p "$WORK"
  DB="$WORK/campaign.db"
  local f found=""
  for f in campaign.db.xz.00 campaign.db.xz campaign.db.gz.00 campaign.db.gz campaign.db; do
    if [[ -f "$STATE/$f" ]]; then found="$f"; break; fi
  done
  if [[ -n "$found" ]]; then
    local parts=("$STATE/$found")
    if [[ $found == *.00 ]]; then parts=("$STATE/${found%.00}".[0-9][0-9]); fi
    case $found in
      *.xz*) cat "${parts[@]}" | unxz_stream >"$DB" ;;
      *.gz*) cat "${parts[@]}" | gunzip -c >"$DB" ;;
      *) cp "$STATE/$found" "$DB" ;;
    esac
    log "resuming from $STATE/$found$([[ ${#parts[@]} -gt 1 ]] && echo " (+ $(( ${#parts[@]} - 1 )) more parts)") ($(du -h "$DB" | cut -f1) uncompressed)"
  else
    log "no earlier database in $STATE: starting a new one"
  fi
  CUSPARSE_CSV="$OUT/cusparse.csv"
  if [[ -f "$STATE/cusparse.csv" ]]; then cp "$STATE/cusparse.csv" "$WORK/cusparse-earlier.csv"; fi
}

stage_check() {
  run_stage check "$(stage_seconds 4 0.5)" \
    bash -c "set -o pipefail; '$B/bin/spmv' check --awkward $CHECK_ARGS '$MATRICES' | tee '$OUT/check.txt'"
}

stage_bench() {
  # The largest bundled matrices and big generated ones (made on the device's host).
  run_stage bench "$(stage_seconds 4 0.5)" \
    bash -c "'$B/bin/spmv' bench --csv $BENCH_ARGS '$MATRICES' >'$OUT/bench.csv'"
}

stage_cusparse() {
  local py; py="$(command -v python3 || true)"
  if [[ -z "$py" ]]; then
    log "== cusparse: SKIPPED: no python3"; STATUS+=("cusparse=skipped(no python3)"); return 0
  fi
  local secs; secs="$(stage_seconds 4 0.5)"
  log "== cusparse: python3 bench/cusparse_bench.py (limit ${secs}s)"
  local rc=0
  # The generated matrices the bench stage timed (its --gen specs), written by
  # `spmv gen` as binary CSR so cuSPARSE times the very same ones.
  local gens=() prev="" a
  for a in $BENCH_ARGS; do [[ "$prev" == "--gen" ]] && gens+=("$a"); prev="$a"; done
  local gendir="$WORK/gen"; mkdir -p "$gendir"
  if [[ ${#gens[@]} -gt 0 ]]; then
    "$B/bin/spmv" gen "${gens[@]}" --out "$gendir" >>"$LOG" 2>&1 || log "== cusparse: spmv gen failed (see above)"
  fi
  # Python gets the machine's own library path, not the bundle's loader.
  timeout --signal=INT "$secs" env LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" "$py" "$ROOT/bench/cusparse_bench.py" \
    --out "$WORK/cusparse.csv" $CUSPARSE_ARGS "$MATRICES" "$gendir" >>"$LOG" 2>&1 || rc=$?
  case $rc in
    0) cp "$WORK/cusparse.csv" "$OUT/cusparse.csv"; STATUS+=("cusparse=ok") ;;
    3) log "== cusparse: SKIPPED: CuPy or a CUDA GPU is missing (see above)"; STATUS+=("cusparse=skipped(no CuPy/GPU)") ;;
    *) [[ -s "$WORK/cusparse.csv" ]] && cp "$WORK/cusparse.csv" "$OUT/cusparse.csv"
       STATUS+=("cusparse=FAILED($rc)"); FAILED=1 ;;
  esac
  log "== cusparse: exit $rc"
}

stage_request() {
  local py; py="$(command -v python3 || true)"
  if [[ -z "$py" ]] || ! env LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" "$py" -c 'import numpy, scipy' 2>/dev/null; then
    log "== request: SKIPPED: no python3 with numpy and scipy"; STATUS+=("request=skipped(no python)"); return 0
  fi
  local secs; secs="$(stage_seconds 3 0.5)"
  if (( secs < 40 )); then
    log "== request: SKIPPED: not enough time left ($(minutes_left) min)"; STATUS+=("request=skipped(time)"); return 0
  fi
  local port; port="$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  log "== request: server on 127.0.0.1:$port (models $B/models, no database)"
  "$B/bin/server" --bind "127.0.0.1:$port" --no-database --models-dir "$B/models" >"$WORK/server.log" 2>&1 &
  local pid=$! up=0 i
  for i in $(seq 1 120); do
    if "$py" -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/healthz', timeout=1)" 2>/dev/null; then up=1; break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  if [[ $up != 1 ]]; then
    log "== request: FAILED: the server did not come up"; tail -20 "$WORK/server.log" >>"$LOG"
    kill "$pid" 2>/dev/null || true; STATUS+=("request=FAILED(start)"); FAILED=1; return 0
  fi
  "$py" -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:$port/device').read().decode()[:400])" >>"$LOG" 2>&1 || true
  run_stage request "$(( secs - 15 ))" env LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" "$py" "$ROOT/bench/request_path.py" \
    --url "http://127.0.0.1:$port" --out "$OUT/request.csv" $REQUEST_ARGS
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  tail -3 "$WORK/server.log" | sed 's/^/server: /' >>"$LOG"
}

stage_label() {
  local secs; secs="$(stage_seconds 60 "$LABEL_RESERVE")"
  if (( secs < 30 )); then
    log "== label: SKIPPED: not enough time left ($(minutes_left) min); next command: scripts/gpu-campaign.sh run label"
    STATUS+=("label=skipped(time)"); return 0
  fi
  local budget; budget="$(awk -v s="$secs" -v cap="${CAMPAIGN_LABEL_MINUTES:-1e9}" 'BEGIN{b=(s-25)/60; if (b>cap) b=cap; printf "%.2f", b}')"
  run_stage label "$secs" "$B/bin/trainer" label --manifest "$MANIFEST" --database "$DB" \
    --budget-minutes "$budget" $TRAIN_ARGS
  "$B/bin/trainer" corpus --manifest "$MANIFEST" $TRAIN_ARGS 2>/dev/null | tail -1 | sed 's/^/corpus: /' >>"$LOG" || true
}

stage_fit() {
  local secs; secs="$(stage_seconds 8 0.3)"
  local csv=""
  if [[ -f "$OUT/cusparse.csv" ]]; then csv="$OUT/cusparse.csv"; elif [[ -f "$WORK/cusparse-earlier.csv" ]]; then csv="$WORK/cusparse-earlier.csv"; fi
  local peers=()
  if [[ -n "$csv" ]]; then peers=(--cusparse "$csv"); fi
  rm -rf "$WORK/models" "$WORK/report"
  if [[ $DEVICE_OK == 1 ]]; then
    # On the device: labelling resumes (nothing left to time when it is complete),
    # then both models are fitted and the held-out matrices re-timed.
    run_stage fit "$secs" "$B/bin/trainer" run --manifest "$MANIFEST" --database "$DB" \
      --budget-minutes 0.2 --models-dir "$WORK/models" --out "$WORK/report" "${peers[@]}" $TRAIN_ARGS
  fi
  if [[ $DEVICE_OK != 1 || ${STATUS[-1]} != fit=ok ]]; then
    [[ -f "$DB" ]] || { log "== fit: SKIPPED: no results database yet (run label first)"; STATUS+=("fit=skipped(no db)"); return 0; }
    rm -rf "$WORK/models" "$WORK/report"
    run_stage fit-from-db "$(stage_seconds 8 0.2)" "$B/bin/trainer" fit --from-db "$DB" \
      --manifest "$MANIFEST" --models-dir "$WORK/models" --out "$WORK/report" "${peers[@]}" $TRAIN_ARGS
  fi
  pack_results
}

# models/<slug>-f32.json, -f64.json and training-data/report/<slug>/ in one archive.
pack_results() {
  local m; m="$(ls "$WORK"/models/*-f64.json "$WORK"/models/*-f32.json 2>/dev/null | head -1 || true)"
  [[ -n "$m" ]] || { log "no model was written"; return 0; }
  local slug; slug="$(basename "$m" .json)"; slug="${slug%-f64}"; slug="${slug%-f32}"
  local p="$WORK/pack"; rm -rf "$p"; mkdir -p "$p/models" "$p/training-data/report/$slug"
  cp "$WORK"/models/*.json "$p/models/"
  cp -r "$WORK"/report/. "$p/training-data/report/$slug/"
  tar -C "$p" -czf "$OUT/results.tar.gz" models training-data
  log "results.tar.gz: models/$slug-{f32,f64}.json and training-data/report/$slug/ ($(tar -tzf "$OUT/results.tar.gz" | wc -l) entries)"
}

finish_run() {
  if [[ -f "$DB" ]]; then
    local z="$OUT/campaign.db.xz"
    if ! xz_stream <"$DB" >"$z" 2>/dev/null; then z="$OUT/campaign.db.gz"; rm -f "$OUT/campaign.db.xz"; gzip -9 -c "$DB" >"$z"; fi
    log "$(basename "$z"): $(du -h "$z" | cut -f1) ($(du -h "$DB" | cut -f1) uncompressed): copy it to $STATE/ before the next command"
    if (( $(stat -c %s "$z") > MAX_OUT_BYTES )); then
      # Over what one file may be: parts of 15 MiB (.00, .01, ...), joined again by `run`.
      split -b "$(( MAX_OUT_BYTES < 15728640 ? MAX_OUT_BYTES : 15728640 ))" -d "$z" "$z." && rm "$z"
      log "$(basename "$z") split into $(ls "$z".* | wc -l) parts under the file limit"
    fi
  fi
  {
    echo "spmv-select GPU campaign, $(date -u +%FT%TZ), commit $(cat "$B/COMMIT" 2>/dev/null || echo unknown)"
    echo "stages: ${STAGES[*]}"
    echo "status: ${STATUS[*]}"
    echo "nvidia_opencl: $NVIDIA"
    "$B/bin/clinfo" -l 2>&1 || echo "clinfo -l: no platform"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
  } >"$OUT/summary.txt"
  local n; n="$(find "$OUT" -maxdepth 1 -type f | wc -l)"
  local big; big="$(find "$OUT" -type f -size +${MAX_OUT_BYTES}c)"
  if [[ -n "$big" ]]; then log "WARNING: over 16 MiB, will not come back: $big"; FAILED=1; fi
  (( n <= 8 )) || { log "WARNING: $n files in $OUT (at most 8 come back)"; FAILED=1; }
  log "status: ${STATUS[*]}"
  log "outputs in $OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
  if [[ -z "${KEEP_WORK:-}" ]]; then rm -rf "$WORK"; fi
}

cmd_run() {
  [[ -x "$B/bin/spmv" ]] || die "no bundle at $B: run 'scripts/gpu-campaign.sh bundle' where Rust is, and carry .campaign"
  OUT="${OUT:-$ROOT/campaign-out}"
  mkdir -p "$OUT"; OUT="$(cd "$OUT" && pwd)"
  CAMPAIGN_MINUTES="${CAMPAIGN_MINUTES:-9}"
  STATE="${CAMPAIGN_STATE:-$B/state}"
  MANIFEST="${CAMPAIGN_MANIFEST:-$B/training-data/manifest.json}"
  MATRICES="${CAMPAIGN_MATRICES:-$B/matrices}"
  CHECK_ARGS="${CAMPAIGN_CHECK_ARGS:-}"
  BENCH_ARGS="${CAMPAIGN_BENCH_ARGS:---largest 40 --gen stencil2d:16M --gen stencil2d:4M --gen power_law:4M --gen uniform:4M --gen road_like:4M}"
  CUSPARSE_ARGS="${CAMPAIGN_CUSPARSE_ARGS:-}"
  REQUEST_ARGS="${CAMPAIGN_REQUEST_ARGS:---awkward}"
  TRAIN_ARGS="${CAMPAIGN_TRAIN_ARGS:-}"
  WORK="$(mktemp -d /tmp/spmv-campaign.XXXXXX)"
  LOG="$OUT/campaign.log"
  if [[ -f "$STATE/campaign.log" && ! -f "$LOG" ]]; then cp "$STATE/campaign.log" "$LOG"; fi
  STAGES=("$@"); [[ ${#STAGES[@]} -eq 0 || " ${STAGES[*]} " == *" all "* ]] && STAGES=(check bench cusparse request label fit)
  for s in "${STAGES[@]}"; do
    case $s in check|bench|cusparse|request|label|fit) ;; *) die "unknown stage '$s' (check bench cusparse request label fit all)";; esac
  done
  LABEL_RESERVE=0.5
  if [[ " ${STAGES[*]} " == *" fit "* ]]; then LABEL_RESERVE="${CAMPAIGN_FIT_RESERVE:-3}"; fi
  FAILED=0
  log "=================== run ${STAGES[*]} on $(uname -n) at $(date -u +%FT%TZ), $CAMPAIGN_MINUTES min"
  check_glibc
  setup_opencl
  DEVICE_OK=0
  if [[ $NVIDIA == 1 || ${CAMPAIGN_DEVICE:-} == any ]]; then
    "$B/bin/clinfo" -l >/dev/null 2>&1 && DEVICE_OK=1
  fi
  [[ $DEVICE_OK == 1 ]] || log "no usable OpenCL device for the campaign: the OpenCL stages are skipped"
  restore_state
  for s in "${STAGES[@]}"; do
    if [[ $DEVICE_OK != 1 && $s =~ ^(check|bench|request|label)$ ]]; then
      log "== $s: SKIPPED: needs the NVIDIA OpenCL device"; STATUS+=("$s=skipped(no device)"); continue
    fi
    "stage_$s"
  done
  finish_run
  if [[ $NVIDIA != 1 && ${CAMPAIGN_DEVICE:-} != any ]]; then
    say "FAILED: no NVIDIA OpenCL library (libnvidia-opencl.so.1) on this machine: nothing ran on a GPU"
    exit 2
  fi
  (( FAILED == 0 )) || { say "some stages failed: see $OUT/campaign.log"; exit 1; }
}

# ---------------------------------------------------------------- rehearse

expect() {
  local f="$1" what="$2"
  if [[ -s "$f" ]]; then say "rehearse: ok: $what ($(basename "$f"))"; else say "rehearse: MISSING: $what ($f)"; REH_FAIL=1; fi
}

cmd_rehearse() {
  local t0; t0=$(date +%s)
  cmd_bundle
  local t1; t1=$(date +%s)
  local tmp; tmp="$(mktemp -d /tmp/spmv-rehearse.XXXXXX)"
  local state="$tmp/state"; mkdir -p "$state"
  REH_FAIL=0
  export CAMPAIGN_DEVICE=any CAMPAIGN_STATE="$state"
  export CAMPAIGN_MANIFEST="$B/training-data/manifest-rehearse.json"
  export CAMPAIGN_MATRICES="$B/rehearse-matrices"
  export CAMPAIGN_CHECK_ARGS=""
  export CAMPAIGN_FIT_RESERVE=0.7
  export CAMPAIGN_BENCH_ARGS="--reps 3 --warmup 1 --copy-mb 32 --kernels serial,subvector8,vector,csr_adaptive,merge_path,merge_tile --gen stencil2d:20k"
  export CAMPAIGN_CUSPARSE_ARGS=""
  export CAMPAIGN_REQUEST_ARGS="--nnz 20000 --calls 3 --warmup 1 --awkward"
  export CAMPAIGN_TRAIN_ARGS="--min-reps 2 --max-reps 3"
  # Command 1: correctness, bench, cuSPARSE (skipped without CuPy), the start of labelling.
  say "rehearse: command 1 (check bench cusparse request label, labelling cut short after 2 s)"
  # A 30 kB file limit makes the database come back in parts, as a big one would.
  OUT="$tmp/out1" CAMPAIGN_MINUTES=2.2 CAMPAIGN_LABEL_MINUTES=0.03 CAMPAIGN_MAX_FILE_BYTES=30000 \
    "$0" run check bench cusparse request label || say "rehearse: command 1 exit $? (over-limit warnings expected)"
  expect "$tmp/out1/check.txt" "correctness of every kernel"
  expect "$tmp/out1/bench.csv" "spmv bench CSV"
  expect "$tmp/out1/campaign.db.xz.00" "results database, first part"
  expect "$tmp/out1/campaign.db.xz.01" "results database, second part"
  expect "$tmp/out1/summary.txt" "summary"
  grep -q "mismatches" "$tmp/out1/check.txt" 2>/dev/null || { say "rehearse: check.txt has no verdict"; REH_FAIL=1; }
  if python3 -c 'import scipy' 2>/dev/null; then
    python3 -m unittest discover -s "$ROOT/bench" >/dev/null 2>&1 && say "rehearse: ok: cusparse_bench.py tests (no GPU parts)" \
      || { say "rehearse: cusparse_bench.py tests FAILED"; REH_FAIL=1; }
    if python3 -c 'import cupy' 2>/dev/null; then expect "$tmp/out1/cusparse.csv" "cuSPARSE CSV"; fi
    expect "$tmp/out1/request.csv" "request path through the service"
  else
    say "rehearse: no scipy here: cusparse_bench.py's tests skipped"
  fi
  cp "$tmp"/out1/* "$state/"
  # Command 2: what the lead does next: the state carried in, labelling resumed, fit.
  say "rehearse: command 2 (label fit, resuming from the carried database)"
  OUT="$tmp/out2" CAMPAIGN_MINUTES=3 "$0" run label fit || { say "rehearse: command 2 exit $?"; REH_FAIL=1; }
  grep -q "resuming from .*more parts" "$tmp/out2/campaign.log" || { say "rehearse: the database parts were not carried into command 2"; REH_FAIL=1; }
  grep -q "time budget reached" "$tmp/out1/campaign.log" || { say "rehearse: command 1's labelling was not cut short: resuming is not exercised"; REH_FAIL=1; }
  grep -q "label=ok" "$tmp/out2/summary.txt" || { say "rehearse: command 2 did not finish labelling"; REH_FAIL=1; }
  expect "$tmp/out2/results.tar.gz" "models and report"
  mkdir -p "$tmp/res" && tar -C "$tmp/res" -xzf "$tmp/out2/results.tar.gz" 2>/dev/null || true
  for p in f32 f64; do
    expect "$(ls "$tmp"/res/models/*-$p.json 2>/dev/null | head -1)" "model $p"
    expect "$(ls "$tmp"/res/training-data/report/*/report_${p}_all.md 2>/dev/null | head -1)" "report $p"
    expect "$(ls "$tmp"/res/training-data/report/*/fig8_${p}_all.svg 2>/dev/null | head -1)" "bound / cuSPARSE figure $p"
  done
  # The lead's path after a cut-short campaign: models from the database alone.
  say "rehearse: trainer fit --from-db on the database that came back"
  unxz_stream <"$tmp/out2/campaign.db.xz" >"$tmp/back.db"
  if "$B/bin/trainer" fit --from-db "$tmp/back.db" --manifest "$CAMPAIGN_MANIFEST" \
      --models-dir "$tmp/fit/models" --out "$tmp/fit/report" --min-reps 2 >"$tmp/fit.log" 2>&1; then
    expect "$(ls "$tmp"/fit/models/*-f64.json 2>/dev/null | head -1)" "model fitted from the database alone"
  else
    say "rehearse: trainer fit --from-db FAILED:"; tail -20 "$tmp/fit.log" >&2; REH_FAIL=1
  fi
  # Without NVIDIA, a real `run` must say so and fail.
  local rc=0
  env -u CAMPAIGN_DEVICE OUT="$tmp/out3" CAMPAIGN_MINUTES=1 "$0" run cusparse >/dev/null 2>&1 || rc=$?
  if [[ $rc != 0 ]] && grep -q "NO NVIDIA OpenCL LIBRARY FOUND" "$tmp/out3/campaign.log" 2>/dev/null; then
    say "rehearse: ok: without NVIDIA OpenCL, run says so and exits $rc"
  elif grep -q "NVIDIA OpenCL library:" "$tmp/out3/campaign.log" 2>/dev/null; then
    say "rehearse: (an NVIDIA OpenCL library is present here: the no-NVIDIA path is not exercised)"
  else
    say "rehearse: run without NVIDIA did not fail clearly (exit $rc)"; REH_FAIL=1
  fi
  local t2; t2=$(date +%s)
  say "rehearse: bundle $((t1 - t0)) s, pipeline $((t2 - t1)) s; outputs in $tmp"
  (( REH_FAIL == 0 )) || die "rehearse FAILED"
  (( t2 - t1 <= 180 )) || say "WARNING: the rehearsal took over 3 minutes"
  say "rehearse: PASSED"
  if [[ -z "${KEEP_WORK:-}" ]]; then rm -rf "$tmp"; fi
}

case "${1:-}" in
  bundle) cmd_bundle ;;
  run) shift; cmd_run "$@" ;;
  rehearse) cmd_rehearse ;;
  *) echo "usage: $0 bundle | run [check bench cusparse request label fit | all] | rehearse" >&2; exit 2 ;;
esac
