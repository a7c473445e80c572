#!/usr/bin/env bash
# Builds llama.cpp's real llama-server from the reference release (the git
# bundle node-llama-cpp ships under tools/parity/node_modules), for
# run.sh --side-by-side. CPU only, generic x86-64 (GGML_NATIVE=OFF).
#
# To fit a small shared box it compiles only what the prebuilt libraries of
# that same release (tools/parity's npm package: libggml*, libllama,
# libllama-common) lack: the server, mtmd, cpp-httplib, vendor/hash and the (empty) UI
# library, with the compile lines of llama.cpp's own CMake configuration
# (Release, -O1 instead of -O3: faster to build, same behaviour), and links
# them against the prebuilt libraries. The CPU backend it loads is the
# generic x64 one (libggml-cpu-x64.so), the library the parity harness
# compares against; the other variants are not copied.
#
# Usage: build-llama-server.sh [OUTDIR]   (default: $K3_LLAMA_SERVER_CACHE or
#        ~/.cache/k3/llama-server). Prints the binary's path last. Reuses a
#        finished build; the compile runs under nice -n 19.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-${K3_LLAMA_SERVER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/k3/llama-server}}"
bin="$out/bin/llama-server"
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
bundle="${LLAMA_BUNDLE:-$(find "$root/tools/parity" -name gitRelease.bundle -print -quit)}"
libs="${LLAMA_PREBUILT_LIBS:-$(dirname "$(find "$root/tools/parity/node_modules" -name libllama-common.so -print -quit)")}"
[ -n "$bundle" ] && [ -f "$libs/libllama-common.so" ] ||
  { echo "build-llama-server.sh: no bundle or prebuilt libraries under tools/parity (run .ci/setup-parity.sh)" >&2; exit 1; }
for t in cmake g++ make git; do
  command -v "$t" >/dev/null || { echo "build-llama-server.sh: $t not found (apt-get install cmake g++ make git)" >&2; exit 1; }
done
mkdir -p "$out"
src="$out/src"
[ -d "$src/.git" ] || git clone -q -c advice.detachedHead=false "$bundle" "$src"
b="$src/build"
if [ ! -f "$b/Makefile" ]; then
  nice -n 19 cmake -S "$src" -B "$b" -DCMAKE_BUILD_TYPE=Release \
    "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG" \
    -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF >"$out/configure.log"
fi
jobs="${JOBS:-2}"
# Each target's own build.make: its objects and archive, not its
# dependencies (ggml, llama and common come prebuilt).
target() { # DIR TARGET
  (cd "$b" && nice -n 19 make -s -f "$1/CMakeFiles/$2.dir/build.make" "$1/CMakeFiles/$2.dir/depend" &&
    nice -n 19 make -s -j"$jobs" -f "$1/CMakeFiles/$2.dir/build.make" "$1/CMakeFiles/$2.dir/build") >&2
}
target tools/ui llama-ui-embed
target tools/ui llama-ui-assets
target tools/ui llama-ui
target vendor/cpp-httplib cpp-httplib
target vendor/hash vendor-hash
target tools/mtmd mtmd
target tools/server server-context
target tools/server llama-server-impl
(cd "$b" && nice -n 19 make -s -f tools/server/CMakeFiles/llama-server.dir/build.make \
  tools/server/CMakeFiles/llama-server.dir/main.cpp.o) >&2
mkdir -p "$out/bin"
cp "$libs"/libllama-common.so "$libs"/libllama.v0.4.0.so "$libs"/libggml.v0.4.0.so \
  "$libs"/libggml-base.so "$libs"/libggml-cpu-x64.so "$out/bin/"
s="$b/tools/server"
nice -n 19 g++ -o "$bin.tmp" "$s/CMakeFiles/llama-server.dir/main.cpp.o" \
  -Wl,--start-group "$s/libllama-server-impl.a" "$s/libserver-context.a" "$b/tools/mtmd/libmtmd.a" \
  "$b/tools/ui/libllama-ui.a" "$b/vendor/cpp-httplib/libcpp-httplib.a" "$b/vendor/hash/libvendor-hash.a" -Wl,--end-group \
  -L"$out/bin" -lllama-common -l:libllama.v0.4.0.so -l:libggml.v0.4.0.so -lggml-base \
  -fopenmp -lpthread -ldl -Wl,-rpath,'$ORIGIN'
mv "$bin.tmp" "$bin"
echo "$bin"
