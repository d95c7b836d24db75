#!/usr/bin/env bash
# Proves the README's first command and its examples work: starts the README's
# serve command on a free port, waits for /healthz, runs the README's shell and
# Python examples (read from README.md itself, so the document cannot drift)
# against it, then sends SIGTERM while requests are in flight and checks that the
# service answered them and exited drained. Run by .ci/run after the tests.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "readme-smoke: FAIL: $*" >&2; exit 1; }

# The README's Python example needs numpy, scipy and requests, and the client
# package installed from this checkout, as the README says (no dependencies
# fetched: they are checked just above; reinstalled so that it is this checkout's).
python3 -c 'import numpy, scipy, requests' 2>/dev/null ||
  python3 -m pip install -q numpy scipy requests >&2
python3 -m pip install -q --no-deps --force-reinstall ./clients/python >&2 ||
  fail "pip install ./clients/python failed"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
work=$(mktemp -d)
trap 'kill -9 "${pid:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT

# The serve command exactly as the README writes it, plus a free port.
serve_cmd=$(awk '/^## The two commands/{f=1} f&&/^```sh/{getline; print; exit}' README.md)
[[ "$serve_cmd" == "./scripts/serve.sh" ]] || fail "the README's serve command is '$serve_cmd', expected ./scripts/serve.sh"
DATABASE_URL="sqlite://$work/smoke.db" $serve_cmd --bind "127.0.0.1:$port" >"$work/server.log" 2>&1 &
pid=$!
base="http://127.0.0.1:$port"
for _ in $(seq 1 900); do
  curl -sf "$base/healthz" >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/server.log" >&2; fail "the service exited before answering /healthz"; }
  sleep 1
done
curl -sf "$base/healthz" >/dev/null || fail "no answer from /healthz"
echo "readme-smoke: service up on $base (pid $pid)" >&2

# The README's blocks under "## Using the service", with its address replaced.
extract() { # $1 = fence language; prints the first such block after "## Using the service"
  awk -v lang="$1" '/^## Using the service/{f=1} f&&$0=="```"lang{b=1; next} b&&/^```/{exit} b{print}' README.md |
    sed "s#localhost:8080#127.0.0.1:$port#g"
}
extract sh >"$work/example.sh"
extract python >"$work/example.py"
[[ -s "$work/example.sh" && -s "$work/example.py" ]] || fail "README examples not found"

bash -euo pipefail "$work/example.sh" >"$work/example.out" 2>&1 || { tail -c 3000 "$work/example.out" >&2; fail "the README's shell example failed"; }
if grep -q '"error":{' "$work/example.out"; then
  grep -o '"error":{[^}]*}' "$work/example.out" >&2
  fail "the README's shell example got an error answer"
fi
echo "readme-smoke: shell example: $(wc -l <"$work/example.out") lines of answers, no error" >&2

python3 "$work/example.py" >"$work/example_py.out" 2>&1 || { cat "$work/example_py.out" >&2; fail "the README's Python example failed"; }
# Its one line: max |y - A x|, the scheme, the kernel time.
read -r err _ <"$work/example_py.out"
python3 -c "import sys; e=float('$err'); sys.exit(0 if e < 1e-9 else 1)" || fail "README Python example: max error $err"
echo "readme-smoke: Python example: $(cat "$work/example_py.out")" >&2

# SIGTERM with requests in flight: each must still get its answer.
M=crates/sparse/tests/data/HB__can_229.mtx.gz
for i in 1 2 3 4; do
  curl -s -o "$work/inflight$i.json" -w '%{http_code}' --data-binary @$M \
    -H 'Content-Type: text/plain' "$base/predict?explain=true" >"$work/inflight$i.code" &
done
sleep 0.05
kill -TERM "$pid"
wait_rc=0
wait "$pid" || wait_rc=$?
wait
for i in 1 2 3 4; do
  code=$(cat "$work/inflight$i.code")
  [[ "$code" == 200 || "$code" == 000 ]] || fail "in-flight request $i got $code during shutdown"
done
grep -q "stopped: drained" "$work/server.log" || { tail -20 "$work/server.log" >&2; fail "the service did not report a drained shutdown"; }
[[ $wait_rc == 0 ]] || fail "the service exited with $wait_rc after SIGTERM"
curl -s "$base/healthz" >/dev/null 2>&1 && fail "the service still answers after SIGTERM"
echo "readme-smoke: SIGTERM: exited 0, drained; in-flight answers: $(cat "$work"/inflight*.code | tr '\n' ' ')" >&2
echo "readme-smoke: 1 passed, 0 failed"
