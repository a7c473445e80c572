#!/usr/bin/env bash
# Prepares the two chat-template references core/chat's parity tests use:
#   1. npm ci: @huggingface/jinja (render.mjs), pinned in package-lock.json;
#   2. build/chatref: llama.cpp's own common_chat_templates_apply and
#      common_chat_parse, compiled from llama/chatref.cpp against the prebuilt
#      libllama-common of the reference release. Its headers (common/, vendor/)
#      are checked out from the git bundle in tools/parity's npm package, so
#      tools/parity/setup.sh must have run first.
# Idempotent; needs node, npm, g++ and git.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
die() { echo "jinja-ref/setup.sh: $*" >&2; exit 1; }

if [[ ! -d node_modules/@huggingface/jinja || package-lock.json -nt node_modules/.package-lock.json ]]; then
	npm ci --ignore-scripts --no-audit --no-fund >&2
fi

parity=../parity
libdir=$parity/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
bundle=$parity/node_modules/node-llama-cpp/llama/gitRelease.bundle
[[ -f $libdir/libllama-common.so && -f $bundle ]] || die "run tools/parity/setup.sh first (needs $libdir/libllama-common.so and $bundle)"
command -v g++ >/dev/null || die "g++ not found (Debian: apt-get install g++)"

src=llama.cpp-src
sparse=(common ggml/include include vendor)
if [[ ! -f $src/common/chat.h ]]; then
	rm -rf "$src"
	git clone --quiet --no-checkout "$bundle" "$src" >&2
	git -C "$src" sparse-checkout set "${sparse[@]}" >&2
	git -C "$src" checkout --quiet >&2
fi

mkdir -p build
out=build/chatref
if [[ ! -x $out || llama/chatref.cpp -nt $out || setup.sh -nt $out ]]; then
	libabs=$(cd "$libdir" && pwd)
	g++ -std=c++17 -O1 -o "$out" llama/chatref.cpp \
		-I"$src/common" -I"$src/include" -I"$src/ggml/include" -I"$src/vendor" \
		"$libabs/libllama-common.so" "$libabs/libllama.v0.4.0.so" "$libabs/libggml.v0.4.0.so" "$libabs/libggml-base.so" \
		-Wl,-rpath,"$libabs" >&2
fi
echo "jinja-ref: ready ($here/build/chatref)" >&2
