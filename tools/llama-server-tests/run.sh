#!/usr/bin/env bash
# Runs llama.cpp's server test suite (tools/server/tests from the reference
# release the npm package node-llama-cpp ships as a git bundle) against
# `k3 serve` through ./llama-server, with pytest and its dependencies from
# Debian's packages. Prints passed/failed counts per test file and fails
# when a test listed in pass.txt does not pass.
# Usage: run.sh            every test file that needs no openai module
#        run.sh --gate     only the files pass.txt names (what CI runs)
#        run.sh FILE...    those files (unit/test_basic.py ...)
#        run.sh --side-by-side [FILE...]
#                          the same files against llama.cpp's own llama-server
#                          of that release (built once by build-llama-server.sh,
#                          or LLAMA_SERVER_REAL=path) on the same tiny model,
#                          then against k3: counts per file side by side, and
#                          the tests that pass there but not on k3. Not in CI.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
mode=all
case "${1:-}" in
  --gate) mode=gate; shift ;;
  --side-by-side) mode=sbs; shift ;;
esac
py=/usr/bin/python3 # Debian's, where apt installs pytest
if ! "$py" -c 'import pytest, requests, aiohttp, filelock, wget' 2>/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pytest python3-requests python3-aiohttp python3-filelock python3-wget >/dev/null
fi
[ -x "$root/bin/k3" ] || (cd "$root" && CGO_ENABLED=0 go build -o bin/k3 ./cmd/k3)
bundle="${LLAMA_BUNDLE:-$(find "$root/tools/parity" -name gitRelease.bundle -print -quit)}"
[ -n "$bundle" ] || { echo "no llama.cpp bundle under tools/parity (run .ci/setup-parity.sh)" >&2; exit 1; }
real=""
if [ "$mode" = sbs ]; then
  real="${LLAMA_SERVER_REAL:-$(LLAMA_BUNDLE="$bundle" "$here/build-llama-server.sh" | tail -n 1)}"
  [ -x "$real" ] || { echo "no llama-server at '$real'" >&2; exit 1; }
fi
work="$(mktemp -d)"
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT; echo "work dir: $work"
git clone -q -c advice.detachedHead=false "$bundle" "$work/llama" 2>/dev/null
tests="$work/llama/tools/server/tests"
export LLAMA_SERVER_BIN_PATH="$here/llama-server" K3_BIN="$root/bin/k3"
export XDG_CACHE_HOME="$work/cache" LLAMA_CACHE="$work/cache/llama"
# A free port, so that runs side by side on one machine do not meet on 8080.
export PORT="${PORT:-$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
cd "$tests"
# Files that import the Python openai client (not packaged by Debian) are
# left out; the npm openai client covers those routes.
mapfile -t files < <(grep -L -E '^(from|import) openai' unit/test_*.py)
echo "left out (need the openai module): $(grep -l -E '^(from|import) openai' unit/test_*.py | tr '\n' ' ')"
if [ "$mode" = gate ]; then
  mapfile -t files < <(grep -v '^#' "$here/pass.txt" | sed 's/::.*//' | grep . | sort -u)
  set --
fi
if [ $# -eq 0 ]; then set -- "${files[@]}"; fi

# suite NAME FILE...: runs pytest, writing $work/NAME.out (its output) and
# $work/NAME.results ("PASSED|FAILED|ERROR test-id" and "SKIPPED n file").
suite() {
  local name="$1"; shift
  nice -n 19 "$py" -m pytest -p no:cacheprovider -q -rA --continue-on-collection-errors "$@" >"$work/$name.out" 2>&1 || true
  { grep -a -E '^(PASSED|FAILED|ERROR) ' "$work/$name.out" | sed 's/ - .*//' | sort -u || true
    grep -a -E '^SKIPPED \[[0-9]+\] ' "$work/$name.out" | sed -E 's/^SKIPPED \[([0-9]+)\] ([^:]+):.*/SKIPPED \1 \2/' || true
  } >"$work/$name.results"
}
# counts RESULTS: "file passed failed skipped" per file.
counts() {
  awk '$1=="SKIPPED" {s[$3]+=$2; all[$3]=1; next}
       {split($2, a, "::"); f=a[1]; if ($1=="PASSED") p[f]++; else x[f]++; all[f]=1}
       END {for (f in all) printf "%s %d %d %d\n", f, p[f], x[f], s[f]}' "$1" | sort
}

if [ "$mode" = sbs ]; then
  suite k3 "$@"
  # The model k3 --demo wrote (the same bytes k3 synth --type q2_k writes).
  model="$XDG_CACHE_HOME/k3/demo/k3-synth-tiny.gguf"
  [ -f "$model" ] || { mkdir -p "$(dirname "$model")"; "$K3_BIN" synth -o "$model" --type q2_k >/dev/null; }
  LLAMA_SERVER_REAL="$real" suite real "$@"
  echo "per file: llama-server (passed failed skipped) | k3 (passed failed skipped)"
  join -a1 -a2 -e0 -o 0,1.2,1.3,1.4,2.2,2.3,2.4 <(counts "$work/real.results") <(counts "$work/k3.results") |
    awk '{printf "  %-32s %4d %4d %4d | %4d %4d %4d\n", $1, $2, $3, $4, $5, $6, $7; for (i=2;i<=7;i++) t[i]+=$i}
         END {printf "  %-32s %4d %4d %4d | %4d %4d %4d\n", "total", t[2], t[3], t[4], t[5], t[6], t[7]}'
  echo "pass on llama-server, not on k3:"
  comm -23 <(sed -n 's/^PASSED //p' "$work/real.results" | sort) <(sed -n 's/^PASSED //p' "$work/k3.results" | sort) | sed 's/^/  /'
  echo "pass on k3, not on llama-server: $(comm -13 <(sed -n 's/^PASSED //p' "$work/real.results" | sort) <(sed -n 's/^PASSED //p' "$work/k3.results" | sort) | wc -l)"
  exit 0
fi

suite k3 "$@"
echo "per file: passed failed skipped"
counts "$work/k3.results" | awk '{printf "  %-32s %4d %4d %4d\n", $1, $2, $3, $4}'
missing=0
while read -r t; do
  case "$t" in ''|'#'*) continue ;; esac
  if ! grep -aqxF "PASSED $t" "$work/k3.results"; then
    echo "expected to pass, did not: $t"; missing=1
  fi
done <"$here/pass.txt"
if [ "$missing" = 1 ]; then
  tail -n 80 "$work/k3.out"
  exit 1
fi
echo "every test in pass.txt passed"
