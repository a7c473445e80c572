#!/usr/bin/env bash
# Runs llama.cpp's server test suite (tools/server/tests from the reference
# release the npm package node-llama-cpp ships as a git bundle) against
# `k3 serve` through ./llama-server, with pytest and its dependencies from
# Debian's packages. Prints passed/failed counts per test file and fails
# when a test listed in pass.txt does not pass.
# Usage: run.sh            every test file that needs no openai module
#        run.sh --gate     only the files pass.txt names (what CI runs)
#        run.sh FILE...    those files (unit/test_basic.py ...)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
py=/usr/bin/python3 # Debian's, where apt installs pytest
if ! "$py" -c 'import pytest, requests, aiohttp, filelock, wget' 2>/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pytest python3-requests python3-aiohttp python3-filelock python3-wget >/dev/null
fi
[ -x "$root/bin/k3" ] || (cd "$root" && CGO_ENABLED=0 go build -o bin/k3 ./cmd/k3)
bundle="${LLAMA_BUNDLE:-$(find "$root/tools/parity" -name gitRelease.bundle -print -quit)}"
[ -n "$bundle" ] || { echo "no llama.cpp bundle under tools/parity (run .ci/setup-parity.sh)" >&2; exit 1; }
work="$(mktemp -d)"
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT; echo "work dir: $work"
git clone -q "$bundle" "$work/llama" 2>/dev/null
tests="$work/llama/tools/server/tests"
export LLAMA_SERVER_BIN_PATH="$here/llama-server" K3_BIN="$root/bin/k3"
export XDG_CACHE_HOME="$work/cache" LLAMA_CACHE="$work/cache/llama"
cd "$tests"
# Files that import the Python openai client (not packaged by Debian) are
# left out; the npm openai client covers those routes.
mapfile -t files < <(grep -L -E '^(from|import) openai' unit/test_*.py)
echo "left out (need the openai module): $(grep -l -E '^(from|import) openai' unit/test_*.py | tr '\n' ' ')"
if [ "${1:-}" = --gate ]; then
  mapfile -t files < <(grep -v '^#' "$here/pass.txt" | sed 's/::.*//' | grep . | sort -u)
  set --
fi
if [ $# -eq 0 ]; then set -- "${files[@]}"; fi
"$py" -m pytest -p no:cacheprovider -q -rA --continue-on-collection-errors "$@" >"$work/out.txt" 2>&1 || true
grep -a -E '^(PASSED|FAILED|ERROR) ' "$work/out.txt" | sed 's/ - .*//' | sort -u >"$work/results.txt"
echo "per file: passed failed"
awk '{split($2, a, "::"); f=a[1]; if ($1=="PASSED") p[f]++; else x[f]++; all[f]=1}
     END {for (f in all) printf "  %-32s %4d %4d\n", f, p[f], x[f]}' "$work/results.txt" | sort
missing=0
while read -r t; do
  case "$t" in ''|'#'*) continue ;; esac
  if ! grep -aqxF "PASSED $t" "$work/results.txt"; then
    echo "expected to pass, did not: $t"; missing=1
  fi
done <"$here/pass.txt"
if [ "$missing" = 1 ]; then
  tail -n 80 "$work/out.txt"
  exit 1
fi
echo "every test in pass.txt passed"
