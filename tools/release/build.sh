#!/usr/bin/env bash
# Release build: static pure-Go k3 binaries and reproducible archives.
#
#   tools/release/build.sh [-o DIR] [ARCH ...]     (default: dist, amd64 arm64)
#
# For each ARCH it writes DIR/k3-VERSION-linux-ARCH.tar.gz (the binary,
# LICENSE, THIRD_PARTY_LICENSES, README.md, docs/deploy.md, packaging/,
# configs/) and DIR/SHA256SUMS. Two runs on one commit produce the same bytes
# (tools/release/check-reproducible.sh checks it in CI):
#   - CGO_ENABLED=0 -trimpath: no C toolchain, no local paths in the binary;
#   - -ldflags "-buildid=": no build id derived from the action graph;
#   - -buildvcs=true: the commit and dirty flag come from git, not the clock;
#   - tar with sorted names, owner 0, fixed modes and mtime = the commit's
#     time (SOURCE_DATE_EPOCH), gzip -n (no name or time in the header).
# VERSION is K3_VERSION, else `git describe --tags --always --dirty`; it is
# stamped into core/buildinfo (k3 version, /metrics, the mode line).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="/usr/local/go/bin:$PATH"
export GOFLAGS="${GOFLAGS:-} -mod=readonly"

out=dist
if [ "${1:-}" = "-o" ]; then out="$2"; shift 2; fi
arches=("$@")
[ ${#arches[@]} -gt 0 ] || arches=(amd64 arm64)

version="${K3_VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}"
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}"
pkg=github.com/k3-inference/k3/core/buildinfo

mkdir -p "$out"
out="$(cd "$out" && pwd)"
for arch in "${arches[@]}"; do
  name="k3-$version-linux-$arch"
  stage="$out/$name"
  rm -rf "$stage" "$stage.tar.gz"
  mkdir -p "$stage"
  echo "build $name"
  CGO_ENABLED=0 GOOS=linux GOARCH="$arch" go build -trimpath -buildvcs=true \
    -ldflags "-buildid= -X $pkg.version=$version" -o "$stage/k3" ./cmd/k3
  # Go stamps the commit only in a plain clone (not in a `git worktree`,
  # whose .git is a file, nor in an unpacked source archive).
  if ! go version -m "$stage/k3" | grep -q 'vcs.revision=' && [ -z "${K3_ALLOW_NOVCS:-}" ]; then
    echo "build.sh: $name has no VCS revision (build from a git clone, or set K3_ALLOW_NOVCS=1)" >&2
    exit 1
  fi
  cp LICENSE THIRD_PARTY_LICENSES README.md "$stage/"
  mkdir -p "$stage/docs"
  cp docs/deploy.md "$stage/docs/"
  cp -r packaging configs "$stage/"
  find "$stage/packaging" -name '*.go' -delete
  tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
    --mode='u+rwX,go+rX,go-w' --format=gnu -C "$out" -cf - "$name" | gzip -n -9 >"$stage.tar.gz"
  rm -rf "$stage"
done
(cd "$out" && sha256sum -- k3-"$version"-linux-*.tar.gz >SHA256SUMS && cat SHA256SUMS)
