#!/usr/bin/env bash
# GGUF export checked by llama.cpp itself (tests/export/llama_cpp_check.mjs): exports
# the fixture's checkpoint as f32 and f16 GGUF and compares llama.cpp's tokenization,
# greedy decoding and log-probabilities with ringtrain's.
#   llama_cpp_test.sh RINGTRAIN_BINARY FIXTURE_DIR
# Installs node-llama-cpp through tools/install-node-llama-cpp (cached outside the
# tree); exit 77 (ctest: skipped) only when the npm registry cannot be reached.
set -euo pipefail
bin=$1 fixture=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
status=0
modules=$("$repo/tools/install-node-llama-cpp") || status=$?
if ((status == 77)); then
  echo "SKIPPED: the npm registry cannot be reached, so node-llama-cpp (llama.cpp) cannot be installed"
  exit 77
fi
((status == 0)) || exit "$status"
work=$(mktemp -d /tmp/rt_export_gguf_XXXXXX)
trap 'rm -rf "$work"' EXIT
"$bin" export --ckpt "$fixture/ckpt" --out "$work/model-f32.gguf" --format gguf --dtype f32 | tail -n 1
"$bin" export --ckpt "$fixture/ckpt" --out "$work/model-f16.gguf" --format gguf --dtype f16 | tail -n 1
node "$repo/tests/export/llama_cpp_check.mjs" --modules "$modules" --ringtrain "$bin" \
  --ckpt "$fixture/ckpt" --f32 "$work/model-f32.gguf" --f16 "$work/model-f16.gguf" --tokens 32
