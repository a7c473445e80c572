#!/usr/bin/env bash
# Reference renderers/parsers beyond tools/parity (which .ci/run sets up
# first): @huggingface/jinja and llama.cpp's own chat code.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/jinja-ref/setup.sh
# js-tiktoken's o200k ranks: the large real vocabulary of the tokenizer parity tests.
npm ci --prefix core/tokenizer/testdata/npm --no-audit --no-fund --ignore-scripts
