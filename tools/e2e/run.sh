#!/bin/sh
# Builds k3, serves a synthetic model with the real `k3 serve` binary and
# runs the end-to-end tests against it. Set K3_URL to test a server that is
# already running instead. Extra arguments go to k3 serve (e.g. --api-key).
set -eu
cd "$(dirname "$0")"
if [ -n "${K3_URL:-}" ]; then
	exec npm test
fi
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$work"' EXIT INT TERM
(cd ../.. && CGO_ENABLED=0 go build -o "$work/k3" ./cmd/k3)
"$work/k3" synth --preset tiny --type q2_k -o "$work/tiny.gguf" >/dev/null
prev=""
for a in "$@"; do
	[ "$prev" = "--api-key" ] && export K3_API_KEY="$a"
	prev=$a
done
port=${K3_PORT:-18181}
"$work/k3" serve -m "$work/tiny.gguf" --port "$port" -c 4096 -t 2 -np 3 "$@" >"$work/serve.log" 2>&1 &
pid=$!
export K3_URL="http://127.0.0.1:$port"
i=0
until curl -fs "$K3_URL/health" >/dev/null 2>&1; do
	i=$((i + 1))
	if [ $i -gt 100 ] || ! kill -0 $pid 2>/dev/null; then
		echo "k3 serve did not come up:" >&2
		cat "$work/serve.log" >&2
		exit 1
	fi
	sleep 0.2
done
status=0
npm test || status=$?
echo "--- k3 serve log (tail) ---"
tail -n 20 "$work/serve.log"
exit $status
