#!/usr/bin/env bash
# Builds the llama.cpp reference harness used by k3's parity tests:
#   1. npm installs the prebuilt llama.cpp v0.4.0 CPU libraries (node-llama-cpp's
#      linux-x64 package; the GPU packages are skipped and no install scripts run),
#   2. checks out the headers of that same release from the package's git bundle,
#   3. compiles k3ref (k3ref/*.c) against the prebuilt libraries.
# Idempotent: each step is skipped when its output is already up to date.
# Needs node, npm and gcc; git too, which it apt-get installs when missing (as root).
# Prints the export line for K3_PARITY last.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cd "$here"

die() { echo "setup.sh: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || die "$1 not found (Debian: apt-get install $2)"; }
need node nodejs
need npm npm
need gcc gcc
# git only unpacks the source bundle; a bare Debian image may lack it.
if ! command -v git >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [[ $(id -u) == 0 ]]; then
	echo "setup.sh: installing git with apt-get" >&2
	apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends git >&2
fi
need git git

libdir=node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
bundle=node_modules/node-llama-cpp/llama/gitRelease.bundle
src=llama.cpp-src

case "$(uname -sm)" in
"Linux x86_64") ;;
*) die "only linux x86_64 is supported (the prebuilt libraries are linux-x64), not $(uname -sm)" ;;
esac

# npm: reinstall when a library is missing or the lock file changed since the last install.
if [[ ! -f $libdir/libllama.v0.4.0.so || ! -f $bundle || package-lock.json -nt node_modules/.package-lock.json ]]; then
	echo "setup.sh: npm ci (llama.cpp prebuilt libraries)" >&2
	npm ci --omit=optional --ignore-scripts --no-audit --no-fund >&2
fi
[[ -f $libdir/libllama.v0.4.0.so ]] || die "npm ci did not install $libdir/libllama.v0.4.0.so"

# The same release's source, from the bundle shipped in the npm package: the
# headers k3ref compiles against, gguf-py, and models/ (llama.cpp's vocabulary
# test files and chat templates, which k3's tokenizer and chat tests read).
sparse=(ggml/include gguf-py include models) # sorted, as sparse-checkout list prints it
if [[ ! -f $src/include/llama.h || ! -f $src/ggml/include/gguf.h ]]; then
	echo "setup.sh: checking out llama.cpp source from $bundle" >&2
	rm -rf "$src"
	git clone --quiet --no-checkout "$bundle" "$src" >&2
	git -C "$src" sparse-checkout set "${sparse[@]}" >&2
	git -C "$src" checkout --quiet >&2
elif [[ $(git -C "$src" sparse-checkout list 2>/dev/null) != "$(printf '%s\n' "${sparse[@]}")" ]]; then
	git -C "$src" sparse-checkout set "${sparse[@]}" >&2
fi

# k3ref: rebuilt when a source file is newer than the binary.
mkdir -p build
out=build/k3ref
if [[ ! -x $out ]] || [[ -n $(find k3ref setup.sh -newer "$out" -print -quit) ]]; then
	echo "setup.sh: compiling $out" >&2
	gcc -std=gnu11 -O2 -g -Wall -Wextra -Werror=implicit-function-declaration \
		-I"$src/include" -I"$src/ggml/include" \
		k3ref/*.c -o "$out.tmp" \
		-L"$libdir" -l:libllama.v0.4.0.so -l:libggml.v0.4.0.so -l:libggml-base.so -ldl -lm \
		-Wl,-rpath,'$ORIGIN/../'"$libdir"
	mv "$out.tmp" "$out"
fi
"$out" version >/dev/null || die "$out does not run"

echo "export K3_PARITY=$here/$out"
