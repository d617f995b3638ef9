#!/usr/bin/env bash
# Data parallel over MPI (the data-parallel issue, first part): 2 ranks × micro-batch 2 train the same model as
# 1 rank × micro-batch 4 on the same global batches (per-step and validation losses within 1e-5 relative), and a
# checkpoint written by 2 ranks resumes on 1 and vice versa with the straight run's losses. Skipped (exit 0, with a
# note) when mpirun is not installed.
#
# Usage: test_dist.sh ZAYA_BINARY SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh" # usage check, $ZAYA and $SRC, temp dir, pass/fail helpers
source "$(dirname "$0")/corpus.sh"
if ! command -v mpirun >/dev/null 2>&1; then
    echo "skip    mpirun not installed (scripts/setup.sh installs OpenMPI)"
    exit 0
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpi() { mpirun --oversubscribe -np "$1" -x OMP_NUM_THREADS "${@:2}"; }

make_corpus "$tmp/corpus" 200
"$ZAYA" prepare --input "$tmp/corpus" --out "$tmp/data" --vocab-size 400 >/dev/null
args=(--data "$tmp/data" --model tiny --batch 8 --seq 32 --warmup 2 --eval-every 10 --sample-tokens 0 --steps 20
    --ckpt-every 5)

# max relative difference of every loss and val_loss of two runs' metrics (same steps, same order)
max_rel_diff() {
    python3 - "$1" "$2" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b), (len(a), len(b))
worst = 0.0
for x, y in zip(a, b):
    assert x["step"] == y["step"]
    for k in ("loss", "val_loss"):
        if k in x:
            worst = max(worst, abs(x[k] - y[k]) / abs(x[k]))
print(f"{worst:.3e}")
PY
}
within() { python3 -c "import sys; sys.exit(0 if float('$1') <= float('$2') else 1)"; }

expect_ok "1 rank, micro-batch 4" train "${args[@]}" --micro-batch 4 --out "$tmp/one"
rc=0
mpi 2 "$ZAYA" train "${args[@]}" --micro-batch 2 --out "$tmp/two" >"$tmp/two.out" 2>&1 || rc=$?
[[ $rc -eq 0 ]] && pass "mpirun -np 2: 2 ranks × micro-batch 2" || fail "mpirun -np 2" "exit $rc" "$(tail -5 "$tmp/two.out")"
d=$(max_rel_diff "$tmp/one/metrics.jsonl" "$tmp/two/metrics.jsonl")
within "$d" 1e-5 && pass "2 ranks match 1 rank: losses within $d relative over 20 steps" ||
    fail "2 ranks match 1 rank" "max relative difference $d"
mpi 2 "$ZAYA" train "${args[@]}" --micro-batch 2 --out "$tmp/two_b" >/dev/null 2>&1
cmp -s "$tmp/two/model/model.safetensors" "$tmp/two_b/model/model.safetensors" &&
    pass "same ranks and seed: bit-identical models" || fail "same ranks and seed: bit-identical models"

# Reshaping: a checkpoint of 2 ranks resumes on 1, one of 1 rank on 2.
mpi 2 "$ZAYA" train "${args[@]}" --micro-batch 2 --out "$tmp/r21" --stop-after 10 >/dev/null 2>&1
python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["world_size"] != 2)' \
    "$tmp/r21/checkpoints/step_00000010/manifest.json" && pass "a 2-rank checkpoint records world_size 2" ||
    fail "a 2-rank checkpoint records world_size 2"
expect_ok "resume on 1 rank from a 2-rank checkpoint" train "${args[@]}" --micro-batch 4 --out "$tmp/r21" --resume
d=$(max_rel_diff "$tmp/one/metrics.jsonl" "$tmp/r21/metrics.jsonl")
within "$d" 1e-5 && pass "2 → 1 ranks continues with the straight run's losses ($d)" || fail "2 → 1 ranks" "$d"
"$ZAYA" train "${args[@]}" --micro-batch 4 --out "$tmp/r12" --stop-after 10 >/dev/null 2>&1
rc=0
mpi 2 "$ZAYA" train "${args[@]}" --micro-batch 2 --out "$tmp/r12" --resume >"$tmp/r12.out" 2>&1 || rc=$?
d=$(max_rel_diff "$tmp/one/metrics.jsonl" "$tmp/r12/metrics.jsonl")
[[ $rc -eq 0 ]] && within "$d" 1e-5 && pass "1 → 2 ranks continues with the straight run's losses ($d)" ||
    fail "1 → 2 ranks" "exit $rc, difference $d" "$(tail -3 "$tmp/r12.out")"

rc=0
mpi 2 "$ZAYA" train "${args[@]}" --micro-batch 8 --out "$tmp/bad" >"$tmp/bad.out" 2>&1 || rc=$?
[[ $rc -ne 0 ]] && grep -q "must be a multiple of micro_batch (8) × ranks (2)" "$tmp/bad.out" &&
    pass "a batch that does not split over the ranks is refused" || fail "bad split" "exit $rc" "$(cat "$tmp/bad.out")"

finish
