#!/usr/bin/env bash
# Builds the llama.cpp reference harness (tools/parity) for the parity tests.
set -euo pipefail
exec "$(cd "$(dirname "$0")/.." && pwd)/tools/parity/setup.sh" "$@"
