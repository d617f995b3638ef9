#!/usr/bin/env bash
# The main job, until training lands: build zaya, create a small ZAYA1-architecture model with random weights
# (zaya's own initialisation, not a trained model), inspect it, and run the forward pass on a token sequence.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
mkdir -p runs
build/zaya init --model small --out runs/small-random --seed 1234
build/zaya info runs/small-random --seq-len 512
build/zaya forward runs/small-random --tokens 2,17,345,99,1024,7,7,512,3000,41 --out runs/small-random-logits.safetensors
echo "logits written to runs/small-random-logits.safetensors (tensor 'logits', F32 [10, 8192])"
build/zaya bench forward --model small --seq-len 256 --batch 2 --iters 3
