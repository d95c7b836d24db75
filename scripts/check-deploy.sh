#!/usr/bin/env bash
# Validates the deployment files offline, with no Docker engine and no cluster:
#
#   - docker-compose.yml against the compose specification's JSON schema (the copy
#     vendored in check-jsonschema: `--builtin-schema vendor.compose-spec`);
#   - every manifest of deploy/kubernetes/ strictly against the Kubernetes JSON
#     schemas bundled in kubernetes-validate, and the references between the files
#     (scripts/check_deploy.py);
#   - deploy/haproxy.cfg with `haproxy -c` (Debian's haproxy package).
#
# Usage:
#   scripts/check-deploy.sh              check this checkout
#   scripts/check-deploy.sh ROOT         check another tree (docker-compose.yml,
#                                        deploy/, crates/server/src/)
#   scripts/check-deploy.sh --self-test  check this checkout, then broken copies of
#                                        it in a temporary folder: each must fail
#
# The validators go into a virtual environment (target/check-deploy-venv, or
# CHECK_DEPLOY_VENV) from the pinned deploy/check-requirements.txt, made again
# when that file changes; the checks themselves run with the network shut off
# (a dead proxy), so nothing is fetched. haproxy and python3-venv are installed
# with apt-get when missing (root or sudo). Under CI (CI=true) a validator that
# cannot be installed is a failure; elsewhere the HAProxy check is skipped with
# a message.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${CHECK_DEPLOY_VENV:-$repo/target/check-deploy-venv}
reqs=$repo/deploy/check-requirements.txt

say() { echo "check-deploy: $*" >&2; }
fail() { say "$*"; exit 1; }
in_ci() { [[ "${CI:-}" == true || "${CI:-}" == 1 ]]; }

apt_install() {
  local SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  command -v apt-get >/dev/null 2>&1 || return 1
  [[ -z $SUDO ]] || command -v sudo >/dev/null 2>&1 || return 1
  say "installing $* with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends "$@"; } >/dev/null 2>&1
}

ensure_venv() {
  local stamp=$venv/.requirements
  if [[ -x $venv/bin/python && -f $stamp ]] && cmp -s "$stamp" "$reqs"; then
    return 0
  fi
  rm -rf "$venv"
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    rm -rf "$venv"
    apt_install python3-venv || true
    python3 -m venv "$venv" || fail "cannot make a Python virtual environment (python3-venv)"
  fi
  say "installing the validators into $venv"
  "$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$reqs" ||
    fail "pip could not install deploy/check-requirements.txt"
  cp "$reqs" "$stamp"
}

haproxy_bin=""
ensure_haproxy() {
  haproxy_bin=$(command -v haproxy || true)
  [[ -n $haproxy_bin || ! -x /usr/sbin/haproxy ]] || haproxy_bin=/usr/sbin/haproxy
  if [[ -z $haproxy_bin ]]; then
    apt_install haproxy || true
    haproxy_bin=$(command -v haproxy || true)
    [[ -n $haproxy_bin || ! -x /usr/sbin/haproxy ]] || haproxy_bin=/usr/sbin/haproxy
  fi
  if [[ -z $haproxy_bin ]]; then
    in_ci && fail "haproxy is missing and could not be installed (apt-get install haproxy)"
    say "SKIPPED the HAProxy check: haproxy is missing (apt-get install haproxy)"
  fi
}

# Checks one tree; prints what is wrong and returns non-zero when anything is.
check() {
  local root=$1 bad=0
  # A dead proxy: any attempt to fetch a schema fails instead of passing online.
  local offline=(env http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9
    HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 no_proxy= NO_PROXY=)
  "${offline[@]}" "$venv/bin/check-jsonschema" --builtin-schema vendor.compose-spec \
    "$root/docker-compose.yml" >&2 || bad=1
  "${offline[@]}" "$venv/bin/python" "$repo/scripts/check_deploy.py" "$root" >&2 || bad=1
  if [[ -n $haproxy_bin ]]; then
    if ! out=$("$haproxy_bin" -c -f "$root/deploy/haproxy.cfg" 2>&1); then
      printf '%s\n' "$out" | grep -E 'ALERT|error' >&2 || printf '%s\n' "$out" >&2
      say "haproxy -c rejects deploy/haproxy.cfg"
      bad=1
    fi
  fi
  return $bad
}

# Copies what check() reads into a fresh folder under $tmp.
copy_tree() {
  local dest=$1
  mkdir -p "$dest/crates/server/src"
  cp -r "$repo/deploy" "$repo/docker-compose.yml" "$dest/"
  cp -r "$repo/crates/server/src/." "$dest/crates/server/src/"
}

# One broken copy: FILE in the copy, a sed expression that must change it, and
# what the break is; the check must fail on it.
broken() {
  local file=$1 expr=$2 what=$3 dir
  dir=$(mktemp -d "$tmp/broken.XXXX")
  copy_tree "$dir"
  sed -i -e "$expr" "$dir/$file"
  if cmp -s "$repo/$file" "$dir/$file"; then
    say "self-test is stale: '$expr' no longer changes $file ($what)"
    return 1
  fi
  if check "$dir" 2>"$dir.log"; then
    say "FAILED to catch: $what ($file)"
    return 1
  fi
  # The first specific complaint: an HAProxy alert with a line number, a schema
  # error with its JSON path, or a problem of check_deploy.py.
  say "caught: $what: $(grep -m1 -E '\[ALERT\].*:[0-9]+\]|::\$|check-deploy: (deploy|docker)' "$dir.log" | cut -c1-150)"
}

self_test() {
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  copy_tree "$tmp/clean"
  check "$tmp/clean" || fail "self-test: an unbroken copy of the files fails the check"
  local missed=0 file expr what
  # One case a line, tab-separated: the file, a sed expression that breaks it,
  # and what the break is (each case reads no input: the table is stdin).
  while IFS=$'\t' read -r file expr what; do
    broken "$file" "$expr" "$what" </dev/null || missed=1
  done <<'CASES'
deploy/kubernetes/server.yaml	s/readinessProbe:/readinesProbe:/	a misspelled field of a Deployment
deploy/kubernetes/server.yaml	s/replicas: 3/replicas: three/	a string where Kubernetes wants an integer
deploy/kubernetes/trainer-workers.yaml	s/^kind: Job$/kind: Jobs/	a kind that has no schema
deploy/kubernetes/server.yaml	s|nvidia.com/gpu: 1|nvidia.com/gpu: 2|	a server pod asking for two GPUs
deploy/kubernetes/server.yaml	s|path: /readyz|path: /ready|	a probe on a path the server does not route
deploy/kubernetes/server.yaml	s/key: id-secret/key: id_secret/	a Secret key that the Secret lacks
deploy/kubernetes/trainer-workers.yaml	s/completionMode: Indexed/completionMode: NonIndexed/	a worker Job that is not indexed
deploy/kubernetes/kustomization.yaml	/- postgres.yaml/d	a manifest left out of kustomization.yaml
docker-compose.yml	0,/stop_grace_period:/s//stop_grace_periode:/	an unknown key in a compose service
docker-compose.yml	s/^      replica-3:$/      replica-4:/	a compose dependency on a service that does not exist
deploy/haproxy.cfg	s/server replica-3 replica-3:8080/server replica-3 replica-9:8080/	an HAProxy server that is no compose service
CASES
  if [[ -n $haproxy_bin ]]; then
    broken deploy/haproxy.cfg 's/hash-type consistent/hash-type consistant/' \
      "an HAProxy keyword with a bad argument" || missed=1
  else
    say "self-test: SKIPPED the HAProxy syntax case (no haproxy)"
  fi
  ((missed == 0)) || fail "self-test: a broken copy passed the check"
  say "self-test: every broken copy was caught"
}

ensure_venv
ensure_haproxy
case "${1:-}" in
  --self-test)
    check "$repo" || fail "the deployment files of this checkout fail the check"
    say "ok: this checkout"
    self_test
    ;;
  "")
    check "$repo" || fail "the deployment files fail the check"
    say "ok"
    ;;
  *)
    check "$(cd "$1" && pwd)" || fail "the deployment files under $1 fail the check"
    say "ok: $1"
    ;;
esac
