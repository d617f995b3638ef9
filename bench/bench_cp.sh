#!/usr/bin/env bash
# Context parallelism on this machine, in one run: the same long-sequence training (model, global batch, steps) as
# 1 process × 2 OpenMP threads, 2 data-parallel ranks × 1 thread, and 2 ranks × 1 thread sharing each sequence
# (--context-parallel 2); tokens/s (medians) and the memory each rank allocates (the trainer's banner), side by side.
# The losses of the three must agree (printed: the largest relative difference). Uses a synthetic corpus of its own,
# with a validation split long enough for the sequence.
#
# Usage: bench/bench_cp.sh [MODEL (small)] [SEQ (8192)] [STEPS (6)]   — needs build/zaya and mpirun.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODEL=${1:-small}
SEQ=${2:-8192}
STEPS=${3:-6}
ZAYA=${ZAYA:-$ROOT/build/zaya}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
source "$ROOT/tests/cli/corpus.sh"
make_corpus "$tmp/corpus" $((SEQ * 3)) # ~33 tokens a document: 5 % of them hold ~5 sequences for validation
"$ZAYA" prepare --input "$tmp/corpus" --out "$tmp/data" --vocab-size 400 >"$tmp/prepare.log" 2>&1
args=(--data "$tmp/data" --model "$MODEL" --batch 2 --micro-batch 1 --seq "$SEQ" --steps "$STEPS" --warmup 1
    --eval-every 0 --eval-batches 1 --sample-tokens 0 --ns-precision fp32)
OMP_NUM_THREADS=2 "$ZAYA" train "${args[@]}" --out "$tmp/one" >"$tmp/one.log"
mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS=1 "$ZAYA" train "${args[@]}" --out "$tmp/dp" >"$tmp/dp.log"
mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS=1 "$ZAYA" train "${args[@]}" --context-parallel 2 --out "$tmp/cp" \
    >"$tmp/cp.log"
python3 - "$tmp" "$MODEL" "$SEQ" <<'PY'
import json, re, statistics, sys
tmp, model, seq = sys.argv[1:]
def run(name):
    rows = [json.loads(l) for l in open(f"{tmp}/{name}/metrics.jsonl") if '"loss"' in l]
    mib = float(re.search(r"memory ([0-9.]+) MiB", open(f"{tmp}/{name}.log").read()).group(1))
    return rows, statistics.median(r["tokens_per_s"] for r in rows[1:]), mib  # the first step warms up
one, dp, cp = run("one"), run("dp"), run("cp")
worst = max(abs(a["loss"] - b["loss"]) / a["loss"] for other in (dp, cp) for a, b in zip(one[0], other[0]))
print(f"context parallel, model {model}, batch 2 x {seq} tokens, medians over {len(one[0]) - 1} steps")
for label, (_, tps, mib) in (("1 process x 2 threads", one), ("2 data-parallel ranks", dp),
                             ("2 ranks --context-parallel 2", cp)):
    print(f"  {label:30s} {tps:8.0f} tokens/s  {mib:8.1f} MiB allocated per rank")
print(f"  losses agree within {worst:.1e} relative")
PY
