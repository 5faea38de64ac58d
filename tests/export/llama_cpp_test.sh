#!/usr/bin/env bash
# GGUF export checked by llama.cpp itself (tests/export/llama_cpp_check.mjs): exports
# the fixture's checkpoint as f32 and f16 GGUF and compares llama.cpp's tokenization,
# greedy decoding and log-probabilities with ringtrain's; then runs
# tools/llama-cpp-generate as the README shows it.
#   llama_cpp_test.sh RINGTRAIN_BINARY FIXTURE_DIR
# Installs node-llama-cpp through tools/install-node-llama-cpp (cached outside the
# tree); exit 77 (ctest: skipped) only when the npm registry cannot be reached.
set -euo pipefail
bin=$1 fixture=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
status=0
modules=$("$repo/tools/install-node-llama-cpp") || status=$?
if ((status == 77)); then
  # The line tools/test lists skipped tests by (tests/skip.h), with the reason.
  echo "RINGTRAIN_TEST_SKIPPED: the npm registry cannot be reached, so node-llama-cpp (llama.cpp) cannot be installed"
  exit 77
fi
((status == 0)) || exit "$status"
work=$(mktemp -d /tmp/rt_export_gguf_XXXXXX)
trap 'rm -rf "$work"' EXIT
"$bin" export --ckpt "$fixture/ckpt" --out "$work/model-f32.gguf" --format gguf --dtype f32 | tail -n 1
"$bin" export --ckpt "$fixture/ckpt" --out "$work/model-f16.gguf" --format gguf --dtype f16 | tail -n 1
node "$repo/tests/export/llama_cpp_check.mjs" --modules "$modules" --ringtrain "$bin" \
  --ckpt "$fixture/ckpt" --f32 "$work/model-f32.gguf" --f16 "$work/model-f16.gguf" --tokens 32
# tools/llama-cpp-generate as the README shows it: the text continues the prompt and the
# last line is its JSON summary (fewer than 100 tokens only if end-of-text came first).
gen=$("$repo/tools/llama-cpp-generate" "$work/model-f32.gguf" "Việt Nam là" 100)
echo "$gen" | tail -n 2
[[ $(head -n 1 <<<"$gen") == "Việt Nam là"?* ]] ||
  { echo "FAIL tools/llama-cpp-generate: the output does not continue the prompt" >&2; exit 1; }
[[ $(tail -n 1 <<<"$gen") =~ \"generated_tokens\":[1-9][0-9]*, ]] ||
  { echo "FAIL tools/llama-cpp-generate: no generated tokens in its JSON line" >&2; exit 1; }
echo "ok   tools/llama-cpp-generate continues the prompt"
