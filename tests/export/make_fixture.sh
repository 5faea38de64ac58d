#!/usr/bin/env bash
# The model the export tests share (ctest fixtures export_model, export_llama_model): a
# small GPT-2 (or, with ARCH llama, a Llama-style model with an untied LM head) trained
# for a few seconds on the first 3000 lines of the bundled Vietnamese corpus, with a
# 2048-piece SentencePiece vocabulary, so that tone marks, đ/Đ and digits all occur.
#   make_fixture.sh RINGTRAIN_BINARY DIR [ARCH]   # writes DIR/{data,ckpt,shape.json}
#   make_fixture.sh --clean DIR                   # removes DIR (the fixture's cleanup)
set -euo pipefail
if [[ ${1:-} == --clean ]]; then rm -rf "$2"; exit 0; fi
bin=$1 dir=$2 arch=${3:-gpt2}
arch_flags=(--arch "$arch")
# llama: untied (the export's output.weight / lm_head.weight path) and a RoPE base that
# turns fast enough within 128 positions for a wrong pairing to show in the logits.
[[ $arch == llama ]] && arch_flags+=(--untied --rope-theta 500 --ffn-dim 160)
repo=$(cd "$(dirname "$0")/../.." && pwd)
layers=2 heads=2 dim=64 seq_len=128
rm -rf "$dir"
mkdir -p "$dir"
# (zstd gets SIGPIPE when head has its lines: not an error here.)
(set +o pipefail; zstd -dc "$repo/third_party/vi-wiki-sample/vi-wiki-sample.txt.zst" | head -n 3000) \
  >"$dir/corpus.txt"
[[ $(wc -l <"$dir/corpus.txt") == 3000 ]] || { echo "make_fixture: cannot read the corpus" >&2; exit 1; }
"$bin" prepare --input "$dir/corpus.txt" --out "$dir/data" --vocab-size 2048 --val-fraction 0.05 \
  --license "CC BY-SA 3.0/4.0 (Vietnamese Wikipedia contributors)" --threads 2 | tail -n 2
"$bin" train --data "$dir/data" --layers $layers --heads $heads --dim $dim --seq-len $seq_len \
  --batch 8 --steps 250 --lr 3e-3 --min-lr 3e-4 --warmup 20 --eval-every 0 --precision fp32 \
  --threads 2 --ckpt-dir "$dir/ckpt" "${arch_flags[@]}" | tail -n 2
vocab=$(sed -n 's/^vocab_size \([0-9]*\)$/\1/p' "$dir/data/manifest.txt")
printf '{"layers": %d, "heads": %d, "dim": %d, "seq_len": %d, "vocab": %d, "arch": "%s"}\n' \
  $layers $heads $dim $seq_len "$vocab" "$arch" >"$dir/shape.json"
