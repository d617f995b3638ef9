#!/usr/bin/env bash
# Context parallelism over MPI (`zaya train --context-parallel N`, dist/context_parallel.h): 2 ranks sharing every
# sequence (with and without gradient accumulation, with --doc-mask, --pack documents and loss masks), 4 ranks (on
# packed rows too), and 4 ranks as 2 data-parallel groups of 2 train the same model as one process on the same
# batches (per-step and validation losses within 1e-5 relative); the same job twice gives bit-identical models; a
# checkpoint of a context-parallel run resumes in one process and one process's resumes context-parallel;
# `zaya eval --context-parallel 2` scores as one process does (packed rows too); bad combinations are clear errors.
# Skipped (exit 0, with a note) when mpirun is not installed.
#
# Usage: test_context_parallel.sh ZAYA_BINARY SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh" # usage check, $ZAYA and $SRC, temp dir, pass/fail helpers
source "$(dirname "$0")/corpus.sh"
source "$(dirname "$0")/mpi.sh" # skips without mpirun; mpi N ARGS...

make_corpus "$tmp/corpus" 200
"$ZAYA" prepare --input "$tmp/corpus" --out "$tmp/data" --vocab-size 400 >/dev/null
# Newton–Schulz in fp32: the ranks' gradient sums differ from one process's in the last bits (summation order),
# which bf16 Newton–Schulz could turn into a bf16 ulp of an update (as in test_dist.sh).
base=(--data "$tmp/data" --model tiny --batch 4 --warmup 2 --eval-every 5 --eval-batches 2 --sample-tokens 0 --steps 10
    --ns-precision fp32)
args=("${base[@]}" --seq 32)

# mpi_ok NAME RANKS OUT ARGS...: a zaya train job under mpirun that must succeed
mpi_ok() {
    local name=$1 ranks=$2 out=$3 rc=0
    shift 3
    mpi "$ranks" "$ZAYA" train "$@" --out "$out" >"$out.log" 2>&1 || rc=$?
    [[ $rc -eq 0 ]] && pass "$name" || fail "$name" "exit $rc" "$(tail -5 "$out.log")"
}

expect_ok "1 process" train "${args[@]}" --out "$tmp/one"
mpi_ok "mpirun -np 2 --context-parallel 2: each rank 2 × 8 of every sequence's 32 tokens" 2 "$tmp/cp2" "${args[@]}" \
    --context-parallel 2
grep -q "context parallel: groups of 2 ranks share each sequence, 2 chunks of 8 tokens per rank (1 group data" \
    "$tmp/cp2.log" && pass "the banner names the groups and the chunks" ||
    fail "the banner names the groups and the chunks" "$(grep -m1 'context' "$tmp/cp2.log" || true)"
d=$(max_rel_diff "$tmp/one/metrics.jsonl" "$tmp/cp2/metrics.jsonl")
within "$d" 1e-5 && pass "2 context-parallel ranks match 1 process: losses within $d relative over 10 steps" ||
    fail "2 context-parallel ranks match 1 process" "max relative difference $d"
mpi_ok "mpirun -np 4 --context-parallel 2 --micro-batch 2: 2 data-parallel groups of 2" 4 "$tmp/cp2dp2" "${args[@]}" \
    --context-parallel 2 --micro-batch 2
d=$(max_rel_diff "$tmp/one/metrics.jsonl" "$tmp/cp2dp2/metrics.jsonl")
within "$d" 1e-5 && pass "2 groups × 2 context-parallel ranks match 1 process: losses within $d relative" ||
    fail "2 groups × 2 context-parallel ranks match 1 process" "max relative difference $d"
mpi_ok "mpirun -np 2 --context-parallel 2 --micro-batch 1: 4 micro-batches accumulated per step" 2 "$tmp/cp2acc" \
    "${args[@]}" --context-parallel 2 --micro-batch 1
d=$(max_rel_diff "$tmp/one/metrics.jsonl" "$tmp/cp2acc/metrics.jsonl")
within "$d" 1e-5 && pass "with gradient accumulation too: losses within $d relative" ||
    fail "2 context-parallel ranks with accumulation match 1 process" "max relative difference $d"
# Document masking: each rank's parts cut at every EOS, documents continued across ranks (the corpus's documents are
# ~33 tokens: most rows hold several, most parts begin inside one).
expect_ok "1 process, --doc-mask" train "${args[@]}" --doc-mask --out "$tmp/one_dm"
mpi_ok "mpirun -np 2 --context-parallel 2 --doc-mask" 2 "$tmp/cp2dm" "${args[@]}" --context-parallel 2 --doc-mask
d=$(max_rel_diff "$tmp/one_dm/metrics.jsonl" "$tmp/cp2dm/metrics.jsonl")
within "$d" 1e-5 && pass "with --doc-mask: 2 context-parallel ranks match 1 process within $d relative" ||
    fail "--doc-mask: 2 context-parallel ranks match 1 process" "max relative difference $d"
# Packed documents: a row's padding is not fed, so a part holds fewer inputs than a chunk, or none. At --seq 32 a row
# is one document (most end inside rank 0's last chunk).
args_p=("${base[@]}" --seq 32 --pack documents)
expect_ok "1 process, --pack documents" train "${args_p[@]}" --out "$tmp/one_p"
mpi_ok "mpirun -np 2 --context-parallel 2 --pack documents" 2 "$tmp/cp2p" "${args_p[@]}" --context-parallel 2
d=$(max_rel_diff "$tmp/one_p/metrics.jsonl" "$tmp/cp2p/metrics.jsonl")
within "$d" 1e-5 && pass "with --pack documents: 2 context-parallel ranks match 1 process within $d relative" ||
    fail "--pack documents: 2 context-parallel ranks match 1 process" "max relative difference $d"
# Rows with no tokens on some rank: documents of ~115 tokens fill rows of 129 one each, leaving gaps too small for the
# one short document (~40 tokens), which gets a row of its own; over 4 ranks (chunks of 16) the last rank's parts
# of that row (chunks 3 and 4) are padding. One row per micro-batch: that rank runs passes with no tokens at all.
mkdir -p "$tmp/long"
for i in $(seq 1 11); do
    for k in 1 2 3 4; do
        printf 'Document %d. The quick brown fox jumps over the lazy dog %d times.\nPython is a language number %d.\n' \
            "$i" $((i + k)) $((i * 7 + k))
    done >"$tmp/long/doc$i.txt"
done
printf 'Document 0. The quick brown fox jumps over the lazy dog 3 times.\n%s\n' \
    'Python is a language number 7. The lazy dog sleeps.' >"$tmp/long/short.txt"
"$ZAYA" prepare --input "$tmp/long" --out "$tmp/long_data" --tokenizer "$tmp/data/tokenizer.model" >/dev/null 2>&1
args_p4=(--data "$tmp/long_data" "${base[@]:2}" --seq 128 --pack documents --doc-mask --micro-batch 1) # base's but data
expect_ok "1 process, --seq 128 --pack documents --doc-mask" train "${args_p4[@]}" --out "$tmp/one_p4"
[[ $out =~ packing:\ ([0-9]+)\ whole\ documents\ into\ ([0-9]+)\ rows && ${BASH_REMATCH[1]} == "${BASH_REMATCH[2]}" ]] &&
    pass "a row per document (the short one alone): ${BASH_REMATCH[0]}" ||
    fail "a row per document (the short one alone)" "$(grep packing <<<"$out")"
mpi_ok "mpirun -np 4 --context-parallel 4 --pack documents --doc-mask, one row per micro-batch" 4 "$tmp/cp4p" \
    "${args_p4[@]}" --context-parallel 4
d=$(max_rel_diff "$tmp/one_p4/metrics.jsonl" "$tmp/cp4p/metrics.jsonl")
within "$d" 1e-5 && pass "packed rows, a rank with none of some row's tokens: 4 ranks match 1 process within $d" ||
    fail "packed rows over 4 context-parallel ranks match 1 process" "max relative difference $d"
# Loss masks (prompt/completion records): a rank whose parts hold no answer still runs its backward pass (the other
# ranks' answers read its keys).
python3 - "$tmp/sft.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(200):
        f.write(json.dumps({"prompt": f"Document {i}. The quick brown fox jumps over the lazy dog {i} times and",
                            "completion": f" runs {i % 7}."}) + "\n")
PY
"$ZAYA" prepare --input "$tmp/sft.jsonl" --out "$tmp/sft" --tokenizer "$tmp/data/tokenizer.model" >/dev/null 2>&1
args_m=(--data "$tmp/sft" "${base[@]:2}" --seq 32 --pack documents) # base's but the data
expect_ok "1 process, prompt/completion data" train "${args_m[@]}" --out "$tmp/one_m"
mpi_ok "mpirun -np 2 --context-parallel 2 on prompt/completion data" 2 "$tmp/cp2m" "${args_m[@]}" --context-parallel 2
d=$(max_rel_diff "$tmp/one_m/metrics.jsonl" "$tmp/cp2m/metrics.jsonl")
within "$d" 1e-5 && pass "with loss masks: 2 context-parallel ranks match 1 process within $d relative" ||
    fail "loss masks: 2 context-parallel ranks match 1 process" "max relative difference $d"
mpi_ok "mpirun -np 4 --context-parallel 4: chunks of 4 tokens" 4 "$tmp/cp4" "${args[@]}" --context-parallel 4
d=$(max_rel_diff "$tmp/one/metrics.jsonl" "$tmp/cp4/metrics.jsonl")
within "$d" 1e-5 && pass "4 context-parallel ranks match 1 process: losses within $d relative" ||
    fail "4 context-parallel ranks match 1 process" "max relative difference $d"
mpi_ok "the 2-rank job again" 2 "$tmp/cp2b" "${args[@]}" --context-parallel 2
cmp -s "$tmp/cp2/model/model.safetensors" "$tmp/cp2b/model/model.safetensors" &&
    pass "same ranks and seed: bit-identical models" || fail "same ranks and seed: bit-identical models"

# Checkpoints stay logical: a context-parallel run's resumes in one process, and one process's context-parallel.
mpi_ok "context-parallel run stopped after 5 steps" 2 "$tmp/r" "${args[@]}" --context-parallel 2 --ckpt-every 5 \
    --stop-after 5
expect_ok "resumed in one process" train "${args[@]}" --ckpt-every 5 --out "$tmp/r" --resume
d=$(max_rel_diff "$tmp/one/metrics.jsonl" "$tmp/r/metrics.jsonl")
within "$d" 1e-5 && pass "context parallel → 1 process: losses within $d of the uninterrupted run" ||
    fail "context parallel → 1 process" "max relative difference $d"
expect_ok "one process stopped after 5 steps" train "${args[@]}" --ckpt-every 5 --stop-after 5 --out "$tmp/s"
mpi_ok "resumed with --context-parallel 2" 2 "$tmp/s" "${args[@]}" --ckpt-every 5 --context-parallel 2 --resume
d=$(max_rel_diff "$tmp/one/metrics.jsonl" "$tmp/s/metrics.jsonl")
within "$d" 1e-5 && pass "1 process → context parallel: losses within $d of the uninterrupted run" ||
    fail "1 process → context parallel" "max relative difference $d"

# zaya eval --context-parallel: a 2-rank group scores the validation split as one process does, by position too.
"$ZAYA" eval "$tmp/cp2/model" --data "$tmp/data" --seq 32 --batch 4 --by-position 4 --json >"$tmp/eval1.json"
rc=0
mpi 2 "$ZAYA" eval "$tmp/cp2/model" --data "$tmp/data" --seq 32 --batch 4 --by-position 4 --context-parallel 2 \
    --json >"$tmp/eval2.json" 2>"$tmp/eval2.err" || rc=$?
d=$(python3 - "$tmp/eval1.json" "$tmp/eval2.json" <<'PY' 2>&1 || true
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
assert b["context_parallel"] == 2 and a["tokens"] == b["tokens"], (a, b)
worst = abs(a["loss"] - b["loss"]) / a["loss"]
for x, y in zip(a["by_position"], b["by_position"]):
    assert x["tokens"] == y["tokens"], (x, y)
    worst = max(worst, abs(x["loss"] - y["loss"]) / x["loss"])
print(f"{worst:.3e}")
PY
)
[[ $rc -eq 0 ]] && within "$d" 1e-6 &&
    pass "mpirun -np 2 zaya eval --context-parallel 2 matches 1 process: loss and 4 position ranges within $d" ||
    fail "zaya eval --context-parallel 2 matches 1 process" "exit $rc, $d" "$(tail -3 "$tmp/eval2.err")"
"$ZAYA" eval "$tmp/cp2/model" --data "$tmp/data" --seq 32 --batch 4 --pack documents --json >"$tmp/eval1p.json"
rc=0
mpi 2 "$ZAYA" eval "$tmp/cp2/model" --data "$tmp/data" --seq 32 --batch 4 --pack documents --context-parallel 2 \
    --json >"$tmp/eval2p.json" 2>"$tmp/eval2p.err" || rc=$?
d=$(python3 - "$tmp/eval1p.json" "$tmp/eval2p.json" <<'PY' 2>&1 || true
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
assert a["tokens"] == b["tokens"], (a, b)
print(f"{abs(a['loss'] - b['loss']) / a['loss']:.3e}")
PY
)
[[ $rc -eq 0 ]] && within "$d" 1e-6 && pass "zaya eval --pack documents --context-parallel 2 matches 1 process: $d" ||
    fail "zaya eval --pack documents --context-parallel 2 matches 1 process" "exit $rc, $d" \
        "$(tail -3 "$tmp/eval2p.err")"

# Clear errors.
expect_error "--seq not divisible" "needs --seq divisible by 4 \(2 equal chunks per rank\)" train "${base[@]}" \
    --seq 30 --context-parallel 2 \
    --out "$tmp/e1"
expect_error "one process cannot make a group of 2" "ranks \(1\) to divide into groups of 2" train "${args[@]}" \
    --context-parallel 2 --out "$tmp/e3"
expect_error "chunks shorter than the conv's reach" "shorter than the CCA conv's reach" train "${base[@]}" --seq 8 \
    --context-parallel 4 --out "$tmp/e4"

finish
