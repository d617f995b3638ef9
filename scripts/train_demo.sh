#!/usr/bin/env bash
# The main job: build zaya, prepare the default corpus (the Python 3.11 documentation sources), train the `small`
# preset from scratch on 2 cores, and print a text sample. Set ZAYA_DEMO_STEPS to change the number of steps.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${ZAYA_DEMO_STEPS:-500}
[[ $steps =~ ^[1-9][0-9]*$ ]] || { echo "ZAYA_DEMO_STEPS must be a positive whole number, got '$steps'" >&2; exit 2; }
warmup=$((steps < 500 ? (steps + 9) / 10 : 50)) # 50 for the default run; a tenth of a shorter one
bash scripts/build.sh
if [ ! -f data/pydocs/data.json ]; then
    build/zaya prepare --out data/pydocs --vocab-size 4096
fi
build/zaya train --data data/pydocs --out runs/small --model small \
    --steps "$steps" --batch 8 --seq 256 --lr 1e-2 --warmup "$warmup" --schedule cosine \
    --eval-every 100 --eval-batches 16 --sample-tokens 200 --sample-prompt "The "
echo "run directory: runs/small (metrics.jsonl, model/ in Hugging Face format with tokenizer.model)"
