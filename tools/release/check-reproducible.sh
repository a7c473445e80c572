#!/usr/bin/env bash
# Checks that two release builds of the committed HEAD are byte-identical.
#
#   tools/release/check-reproducible.sh [ARCH]     (default: amd64)
#
# Each build runs in its own clone at a different path, so -trimpath and
# the archive's paths are exercised; the second has an empty GOCACHE, so
# every package (the standard library included) is compiled again rather
# than linked from the first build's cached objects — a shared cache would
# only prove that linking is deterministic. One architecture keeps it to
# one cold build (a few minutes on 2 cores); arm64 shares all of the
# Go code and differs only in the compiler's back end.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="/usr/local/go/bin:$PATH"
arch="${1:-amd64}"
rev="$(git rev-parse HEAD)"
tmp="$(mktemp -d)"
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT

for n in a b; do
  git clone -q --no-checkout . "$tmp/src-$n"
  git -C "$tmp/src-$n" checkout -q "$rev"
done
export K3_VERSION="${K3_VERSION:-$(git describe --tags --always 2>/dev/null || echo dev)}"
echo "build a (the usual GOCACHE)"
bash "$tmp/src-a/tools/release/build.sh" -o "$tmp/out-a" "$arch" >/dev/null
echo "build b (an empty GOCACHE, another path)"
GOCACHE="$tmp/gocache-b" bash "$tmp/src-b/tools/release/build.sh" -o "$tmp/out-b" "$arch" >/dev/null
# The release binary names its commit (k3 version).
tar -xzf "$tmp"/out-a/k3-*.tar.gz -C "$tmp/out-a"
if [ "$arch" = "$(go env GOHOSTARCH)" ]; then
  "$tmp"/out-a/k3-*/k3 version | tee "$tmp/version.txt"
  grep -q "^commit:  $rev\$" "$tmp/version.txt" || { echo "k3 version does not print commit $rev" >&2; exit 1; }
fi
rm -rf "$tmp"/out-a/k3-*/
if cmp -s "$tmp/out-a/SHA256SUMS" "$tmp/out-b/SHA256SUMS"; then
  echo "reproducible: $(cat "$tmp/out-a/SHA256SUMS")"
  exit 0
fi
echo "NOT reproducible:" >&2
diff "$tmp/out-a/SHA256SUMS" "$tmp/out-b/SHA256SUMS" >&2 || true
for n in a b; do tar -xzf "$tmp/out-$n"/k3-*.tar.gz -C "$tmp/out-$n"; done
for f in "$tmp"/out-a/k3-*/k3; do
  go version -m "$f" >&2
done
exit 1
