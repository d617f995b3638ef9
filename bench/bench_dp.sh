#!/usr/bin/env bash
# Data-parallel throughput on this machine, in one run: the same training (model, global batch, steps) with
# 1 process × 2 OpenMP threads and with 2 MPI ranks × 1 thread, and the share of step time the ranks spend in
# collectives (the gradient sums onto their owners and the broadcasts of each rank's updated parameters, ZeRO-1).
# Prints both side by side, then the bytes the collectives move per step: the 2 ranks run again over TCP on the
# loopback interface, for STEPS and 2·STEPS steps, and the difference of the interface's byte counts over STEPS is
# one step's traffic (start-up, validation and the final save cancel out), also as a multiple of the gradient's bytes
# (ZeRO-1 with sums onto owners: ~2, the sums and the broadcasts; with all-reduced gradients it was ~3).
#
# Usage: bench/bench_dp.sh [MODEL (small)] [STEPS (12)]   — needs build/zaya, mpirun, and data/pydocs
# (scripts/train_demo.sh prepares it).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODEL=${1:-small}
STEPS=${2:-12}
ZAYA=${ZAYA:-$ROOT/build/zaya}
DATA=${DATA:-$ROOT/data/pydocs}
[[ -f $DATA/data.json ]] || { echo "bench_dp: no prepared data in $DATA (run scripts/train_demo.sh first)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
args=(--data "$DATA" --model "$MODEL" --batch 8 --seq 256 --eval-every 0 --eval-batches 1 --sample-tokens 0
    --warmup 1)
OMP_NUM_THREADS=2 "$ZAYA" train "${args[@]}" --steps "$STEPS" --micro-batch 8 --out "$tmp/one" >/dev/null
mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS=1 "$ZAYA" train "${args[@]}" --steps "$STEPS" --micro-batch 4 \
    --out "$tmp/two" >/dev/null
python3 - "$tmp/one/metrics.jsonl" "$tmp/two/metrics.jsonl" "$MODEL" <<'PY'
import json, statistics, sys
def rows(p):
    return [json.loads(l) for l in open(p) if '"loss"' in l][2:]  # the first steps warm up
one, two = rows(sys.argv[1]), rows(sys.argv[2])
t1 = statistics.median(r["tokens_per_s"] for r in one)
t2 = statistics.median(r["tokens_per_s"] for r in two)
share = statistics.median(r["comm_s"] * r["tokens_per_s"] / (8 * 256) for r in two)
print(f"data parallel, model {sys.argv[3]}, global batch 8 x 256 tokens, medians over {len(one)} steps")
print(f"  1 process x 2 threads   {t1:8.0f} tokens/s")
print(f"  2 ranks x 1 thread      {t2:8.0f} tokens/s  ({t2 / t1:.2f}x), {100 * share:.1f}% of step time in collectives")
PY

# One step's bytes over loopback TCP (shared memory off): lo's transmitted bytes around each run.
lo_bytes() { awk '$1 == "lo:" { print $10 }' /proc/net/dev; }
tcp_run() {
    local before after
    before=$(lo_bytes)
    mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS=1 --mca btl tcp,self --mca btl_tcp_if_include lo \
        "$ZAYA" train "${args[@]}" --steps "$1" --micro-batch 4 --out "$tmp/tcp$1" >/dev/null
    after=$(lo_bytes)
    echo $((after - before))
}
short=$(tcp_run "$STEPS")
long=$(tcp_run $((2 * STEPS)))
params=$("$ZAYA" info "$MODEL" | grep -oP '^parameters .*total \(\K[0-9]+' || true)
python3 - "$short" "$long" "$STEPS" "${params:-0}" <<'PY'
import sys
short, long, steps, params = (int(x) for x in sys.argv[1:])
per_step = (long - short) / steps
line = f"  collectives per step (2 ranks, TCP loopback): {per_step / 2**20:.1f} MiB"
if params:
    line += f" = {per_step / (4 * params):.2f} x the {4 * params / 2**20:.1f} MiB of gradients"
print(line)
PY
