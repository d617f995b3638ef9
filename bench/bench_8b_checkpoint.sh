#!/usr/bin/env bash
# The full ZAYA1-8B shape on this machine (not CI): writes a synthetic bf16 checkpoint (random weights, 8.3B
# parameters ≈ 16.7 GB, sharded safetensors + index) into a temporary directory, then runs `zaya generate` on it
# (memory-mapped, bf16 matrices used in place) and `zaya bench decode` on it. Prints generate's statistics line
# (decode tokens/s, peak RSS) and the decode benchmark against the memory-bandwidth bound; removes the checkpoint.
# Needs ~17 GB free disk under ${TMPDIR:-/var/tmp} and < 24 GB RAM.
# Usage: bench/bench_8b_checkpoint.sh [ZAYA_BINARY] [NEW_TOKENS]
set -euo pipefail
ZAYA=${1:-build/zaya}
NEW=${2:-32}
dir=$(mktemp -d "${TMPDIR:-/var/tmp}/zaya8b.XXXXXX")
trap 'rm -rf "$dir"' EXIT
echo "== writing a synthetic zaya1-8b bf16 checkpoint to $dir"
start=$(date +%s)
"$ZAYA" init --model zaya1-8b --dtype bf16 --synthetic --shard-gb 4 --out "$dir/model"
echo "   written in $(($(date +%s) - start)) s: $(du -sh "$dir/model" | cut -f1), $(ls "$dir/model" | tr '\n' ' ')"
echo "== zaya generate (greedy, $NEW new tokens)"
"$ZAYA" generate "$dir/model" --tokens 2,1000,2000,3000,4000 -n "$NEW" --temperature 0 --print-ids 2>&1 | tail -2
echo "== zaya bench decode on the same checkpoint"
"$ZAYA" bench decode --model "$dir/model" --prompt-tokens 64 --new-tokens "$NEW"
