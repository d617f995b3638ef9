#!/usr/bin/env bash
# Data parallel over MPI: 2 ranks × micro-batch 2 train the same model as 1 rank × micro-batch 4 on the same
# global batches (per-step and validation losses within 1e-5 relative); every rank writes its part of each
# checkpoint (files checked against the manifest); a checkpoint written by 2 ranks resumes on 1, on 4 and on 2
# (bit-exactly, with the asynchronous and the synchronous writer), one of 1 rank on 2, one of 4 on 1, and exports
# as the run's model; a rank whose part fails fails that checkpoint only, named by rank 0; each rank
# holds about 1/N of the optimizer state (ZeRO-1); `zaya eval` on 2 ranks gives their run's val_loss; a NaN gradient
# on one rank skips the step on all; a rank killed with SIGKILL or hanging ends every rank quickly with a message,
# and `zaya train --supervise --launcher mpirun...` restarts the job. Skipped (exit 0, with a note) when mpirun is
# not installed.
#
# Usage: test_dist.sh ZAYA_BINARY SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh" # usage check, $ZAYA and $SRC, temp dir, pass/fail helpers
source "$(dirname "$0")/corpus.sh"
source "$(dirname "$0")/mpi.sh" # skips without mpirun; mpi N ARGS...

make_corpus "$tmp/corpus" 200
"$ZAYA" prepare --input "$tmp/corpus" --out "$tmp/data" --vocab-size 400 >/dev/null
# Newton–Schulz in fp32 for the equivalence checks: the ranks' gradient sums differ from one process's in the last
# bits (summation order), which bf16 Newton–Schulz can turn into a bf16 ulp of an update; the bf16 default is
# checked at its own level below.
common=(--data "$tmp/data" --model tiny --batch 8 --seq 32 --warmup 2 --eval-every 10 --sample-tokens 0 --steps 20
    --ckpt-every 5)
args=("${common[@]}" --ns-precision fp32)


expect_ok "1 rank, micro-batch 4" train "${args[@]}" --micro-batch 4 --out "$tmp/one"
rc=0
mpi 2 "$ZAYA" train "${args[@]}" --micro-batch 2 --out "$tmp/two" >"$tmp/two.out" 2>&1 || rc=$?
[[ $rc -eq 0 ]] && pass "mpirun -np 2: 2 ranks × micro-batch 2" || fail "mpirun -np 2" "exit $rc" "$(tail -5 "$tmp/two.out")"
d=$(max_rel_diff "$tmp/one/metrics.jsonl" "$tmp/two/metrics.jsonl")
within "$d" 1e-5 && pass "2 ranks match 1 rank: losses within $d relative over 20 steps" ||
    fail "2 ranks match 1 rank" "max relative difference $d"
# zaya eval under mpirun splits each batch over the ranks as training's validation does: the 2-rank run's final
# val_loss, bit for bit (--eval-batches 8 of --batch 8 = 16 passes of 2 sequences per rank).
rc=0
mpi 2 "$ZAYA" eval "$tmp/two/model" --data "$tmp/data" --seq 32 --batch 2 --batches 16 --json >"$tmp/eval2.out" \
    2>"$tmp/eval2.err" || rc=$?
want=$(python3 -c 'import json,sys; print(repr([json.loads(l) for l in open(sys.argv[1])][-1]["val_loss"]))' \
    "$tmp/two/metrics.jsonl")
got=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["ranks"] == 2; print(repr(j["loss"]))' \
    "$tmp/eval2.out" 2>/dev/null || true)
[[ $rc -eq 0 && $got == "$want" ]] && pass "mpirun -np 2 zaya eval: the 2-rank run's val_loss, bit for bit ($got)" ||
    fail "mpirun -np 2 zaya eval equals the run's val_loss" "exit $rc, want $want" "$(tail -3 "$tmp/eval2.out")" \
        "$(tail -3 "$tmp/eval2.err")"
# Benchmarks under mpirun: the ranks take turns with the items and sum the counts, so 2 ranks report what 1 process
# does (zaya eval --choices and --generate).
python3 - "$tmp/mc.jsonl" "$tmp/gen.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as mc, open(sys.argv[2], "w") as gen:
    for i in range(1, 10):
        mc.write(json.dumps({"context": f"Document {i}. The quick brown", "choices": [" fox", " dog jumps", " Python"],
                             "answer": i % 3}) + "\n")
        gen.write(json.dumps({"prompt": f"Document {i}. The quick", "answer": "brown"}) + "\n")
PY
for task in "--choices $tmp/mc.jsonl" "--generate $tmp/gen.jsonl --max-tokens 4"; do
    # shellcheck disable=SC2086 # the task's words are its arguments
    one=$("$ZAYA" eval "$tmp/two/model" $task --json 2>&1 | python3 -c 'import json, sys; j = json.load(sys.stdin)
print({k: v for k, v in j.items() if k not in ("seconds", "ranks")})' 2>&1)
    # shellcheck disable=SC2086
    two=$(mpi 2 "$ZAYA" eval "$tmp/two/model" $task --json 2>&1 | python3 -c 'import json, sys; j = json.load(sys.stdin)
assert j["ranks"] == 2, j
print({k: v for k, v in j.items() if k not in ("seconds", "ranks")})' 2>&1)
    [[ -n $one && $one == "$two" && $one == *"'items': 9"* ]] &&
        pass "mpirun -np 2 zaya eval ${task%% *}: the counts of 1 process (${one:0:90}…)" ||
        fail "mpirun -np 2 zaya eval ${task%% *}: the counts of 1 process" "1: $one" "2: $two"
done
"$ZAYA" train "${common[@]}" --micro-batch 4 --out "$tmp/one_bf16" >/dev/null 2>&1
mpi 2 "$ZAYA" train "${common[@]}" --micro-batch 2 --out "$tmp/two_bf16" >/dev/null 2>&1
d=$(max_rel_diff "$tmp/one_bf16/metrics.jsonl" "$tmp/two_bf16/metrics.jsonl")
within "$d" 5e-3 && pass "with bf16 Newton–Schulz (the default) 2 ranks match 1 at the bf16 level: $d" ||
    fail "2 ranks match 1 rank, bf16 Newton–Schulz" "max relative difference $d"
mpi 2 "$ZAYA" train "${args[@]}" --micro-batch 2 --out "$tmp/two_b" >/dev/null 2>&1
cmp -s "$tmp/two/model/model.safetensors" "$tmp/two_b/model/model.safetensors" &&
    pass "same ranks and seed: bit-identical models" || fail "same ranks and seed: bit-identical models"

# Reshaping: a checkpoint of 2 ranks resumes on 1, one of 1 rank on 2.
mpi 2 "$ZAYA" train "${args[@]}" --micro-batch 2 --out "$tmp/r21" --stop-after 10 >/dev/null 2>&1
python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["world_size"] != 2)' \
    "$tmp/r21/checkpoints/step_00000010/manifest.json" && pass "a 2-rank checkpoint records world_size 2" ||
    fail "a 2-rank checkpoint records world_size 2"
# Each rank writes its own files: ZeRO-1's optimizer state where it lies, the parameters shared out.
if out=$(python3 "$SRC/tests/cli/check_manifest.py" "$tmp/r21/checkpoints/step_00000010" 10 2 2>&1) &&
    [[ $out =~ largest\ rank\ part\ 0\.5[0-9]+ ]]; then
    pass "2 ranks write a checkpoint's files at once, each about half of it ($out)"
else
    fail "2 ranks write a checkpoint's files at once, each about half of it" "$out"
fi
expect_ok "info on a 2-rank checkpoint" info "$tmp/r21/checkpoints/step_00000010"
[[ $out == *"training checkpoint, step 10, written by 2 ranks: 4 files"* ]] &&
    pass "info on a 2-rank checkpoint names its ranks and files" ||
    fail "info on a 2-rank checkpoint names its ranks and files" "$out"
expect_ok "resume on 1 rank from a 2-rank checkpoint" train "${args[@]}" --micro-batch 4 --out "$tmp/r21" --resume
d=$(max_rel_diff "$tmp/one/metrics.jsonl" "$tmp/r21/metrics.jsonl")
within "$d" 1e-5 && pass "2 → 1 ranks continues with the straight run's losses ($d)" || fail "2 → 1 ranks" "$d"
"$ZAYA" train "${args[@]}" --micro-batch 4 --out "$tmp/r12" --stop-after 10 >/dev/null 2>&1
rc=0
mpi 2 "$ZAYA" train "${args[@]}" --micro-batch 2 --out "$tmp/r12" --resume >"$tmp/r12.out" 2>&1 || rc=$?
d=$(max_rel_diff "$tmp/one/metrics.jsonl" "$tmp/r12/metrics.jsonl")
[[ $rc -eq 0 ]] && within "$d" 1e-5 && pass "1 → 2 ranks continues with the straight run's losses ($d)" ||
    fail "1 → 2 ranks" "exit $rc, difference $d" "$(tail -3 "$tmp/r12.out")"

# 2 → 4 ranks (micro-batch 1: the same global batch of 8).
mpi 2 "$ZAYA" train "${args[@]}" --micro-batch 2 --out "$tmp/r24" --stop-after 10 >/dev/null 2>&1
rc=0
mpi 4 "$ZAYA" train "${args[@]}" --micro-batch 1 --out "$tmp/r24" --resume >"$tmp/r24.out" 2>&1 || rc=$?
d=$(max_rel_diff "$tmp/one/metrics.jsonl" "$tmp/r24/metrics.jsonl")
[[ $rc -eq 0 ]] && within "$d" 1e-5 && pass "2 → 4 ranks continues with the straight run's losses ($d)" ||
    fail "2 → 4 ranks" "exit $rc, difference $d" "$(tail -3 "$tmp/r24.out")"

# 4 → 1: the checkpoints the 4 ranks wrote after resuming (their parts, 4 files of optimizer state) resume on one.
out=$(python3 "$SRC/tests/cli/check_manifest.py" "$tmp/r24/checkpoints/step_00000015" 15 4 2>&1) &&
    pass "4 ranks write 8 files of one checkpoint ($out)" || fail "4 ranks write 8 files of one checkpoint" "$out"
rc=0
cp -r "$tmp/r24" "$tmp/r41" # its metrics, cut back to step 15 by the resume
"$ZAYA" train "${args[@]}" --micro-batch 4 --out "$tmp/r41" --resume --from "$tmp/r41/checkpoints/step_00000015" \
    >"$tmp/r41.out" 2>&1 || rc=$?
d=$(max_rel_diff "$tmp/one/metrics.jsonl" "$tmp/r41/metrics.jsonl")
[[ $rc -eq 0 ]] && grep -q "resumed from .*step_00000015 (step 15)" "$tmp/r41.out" && within "$d" 1e-5 &&
    pass "4 → 1 ranks continues with the straight run's losses ($d)" ||
    fail "4 → 1 ranks" "exit $rc, difference $d" "$(tail -3 "$tmp/r41.out")"

# One rank's part failing (as a full disk would) fails that checkpoint only: rank 0 names the rank, removes the
# temporary directory, keeps the earlier checkpoints, and training goes on to the straight run's model.
for async in true false; do
    rc=0
    ZAYA_FAULT_CKPT_PART=10 mpi 2 -x ZAYA_FAULT_CKPT_PART "$ZAYA" train "${args[@]}" --micro-batch 2 \
        --ckpt-async $async --out "$tmp/part$async" >"$tmp/part.out" 2>&1 || rc=$?
    ls=$(ls "$tmp/part$async/checkpoints" | tr '\n' ' ')
    want="step    10  checkpoint FAILED, training goes on, earlier checkpoints are intact: rank 1: injected fault"
    [[ $rc -eq 0 ]] && grep -qF "$want" "$tmp/part.out" &&
        [[ $ls == "latest step_00000005 step_00000015 step_00000020 " ]] &&
        cmp -s "$tmp/two/model/model.safetensors" "$tmp/part$async/model/model.safetensors" &&
        pass "a rank's failed part (--ckpt-async $async): that checkpoint fails naming rank 1, training goes on" ||
        fail "a rank's failed part (--ckpt-async $async)" "exit $rc; checkpoints: $ls" \
            "$(grep -i checkpoint "$tmp/part.out")"
done

# Same process count: resuming from the sharded checkpoint is bit-exact, whichever writer wrote it.
for async in true false; do
    mpi 2 "$ZAYA" train "${args[@]}" --micro-batch 2 --ckpt-async $async --out "$tmp/r22$async" --stop-after 10 \
        >/dev/null 2>&1
    mpi 2 "$ZAYA" train "${args[@]}" --micro-batch 2 --ckpt-async $async --out "$tmp/r22$async" --resume \
        >"$tmp/r22.out" 2>&1 || true
    cmp -s "$tmp/two/model/model.safetensors" "$tmp/r22$async/model/model.safetensors" &&
        pass "2 → 2 ranks (--ckpt-async $async): bit-identical to the straight run" ||
        fail "2 → 2 ranks (--ckpt-async $async)" "$(tail -3 "$tmp/r22.out")"
done
# zaya export reads the model's tensors from the ranks' files: the last checkpoint is the run's final model.
expect_ok "zaya export of a 2-rank checkpoint" export "$tmp/r22true/checkpoints/step_00000020" --out "$tmp/exported"
cmp -s "$tmp/r22true/model/model.safetensors" "$tmp/exported/model.safetensors" &&
    pass "the exported 2-rank checkpoint is the run's final model, byte for byte" ||
    fail "the exported 2-rank checkpoint is the run's final model, byte for byte"

# What the collectives move per step, measured: 2 ranks over TCP on the loopback of a network namespace of their own
# (no other test's traffic there), 3 and 6 steps, the difference of lo's byte count over 3 steps. It must be what the
# trainer's banner says (2·(N−1) × the trainable parameters' bytes: gradient sums onto owners, updated parameters),
# within TCP's headers; gradients all-reduced instead of summed onto owners would be 1.5× that.
if unshare -n true 2>/dev/null && command -v ip >/dev/null; then
    cat >"$tmp/traffic.sh" <<'SH'
set -euo pipefail
ip link set lo up
lo_bytes() { awk '$1 == "lo:" { print $10 }' /proc/net/dev; }
for steps in 3 6; do
    before=$(lo_bytes)
    mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS --mca btl tcp,self --mca btl_tcp_if_include lo \
        --mca oob_tcp_if_include lo "$@" --steps $steps --out "$OUT/traffic$steps" >"$OUT/traffic$steps.out" 2>&1
    echo $(($(lo_bytes) - before))
done
SH
    bytes=$(OUT=$tmp unshare -n bash "$tmp/traffic.sh" "$ZAYA" train --data "$tmp/data" --model small --batch 8 --seq 32 \
        --micro-batch 4 --sample-tokens 0 --eval-every 0 || true)
    claimed=$(grep -oP "collectives move \K[0-9.]+(?= MiB per step)" "$tmp/traffic3.out" 2>/dev/null || true)
    verdict=$(python3 - "$claimed" $bytes <<'PY'
import sys
try:
    claimed, short, long = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
except (IndexError, ValueError):
    sys.exit("no measurement")
per_step = (long - short) / 3 / 2**20
print(f"{'ok' if 0.99 * claimed <= per_step <= 1.05 * claimed else 'off'} {per_step:.1f}")
PY
    ) || true
    [[ $verdict == ok* ]] &&
        pass "collectives per step over loopback TCP: ${verdict#ok } MiB measured, the banner says $claimed MiB" ||
        fail "collectives per step over loopback TCP" "measured '${verdict}', the banner says '$claimed' MiB" \
            "$(tail -3 "$tmp/traffic3.out" 2>/dev/null)"
else
    echo "skip    collectives per step: no network namespace here (unshare -n) or no ip (iproute2)"
fi

long=(--data "$tmp/data" --model tiny --batch 8 --seq 32 --sample-tokens 0 --eval-every 0 --steps 100000)
# ZeRO-1: the optimizer state each rank allocates, as the trainer reports it, is about 1/N of one process's.
declare -A state nan_rc
for n in 1 2 4; do
    mpi $n "$ZAYA" train "${long[@]/100000/1}" --micro-batch $((8 / n)) --out "$tmp/mem$n" >"$tmp/mem$n.out" 2>&1 || true
    state[$n]=$(grep -oP "optimizer state( per rank \(ZeRO-1\):)? \K[0-9. /]+(?= MiB)" "$tmp/mem$n.out" || true)
done
python3 - "${state[1]}" "${state[2]}" "${state[4]}" <<'PY' && pass "optimizer state per rank ≈ 1/N: ${state[1]} | ${state[2]} | ${state[4]} MiB" ||
import sys
one = float(sys.argv[1])
for n, text in ((2, sys.argv[2]), (4, sys.argv[3])):
    ranks = [float(x) for x in text.split("/")]
    assert len(ranks) == n, (n, text)
    assert abs(sum(ranks) - one) <= 0.02 * one, (n, ranks, one)   # sharded, not replicated
    assert max(ranks) <= 1.1 * one / n, (n, ranks, one)            # and balanced
PY
    fail "optimizer state per rank ≈ 1/N" "1: '${state[1]}', 2: '${state[2]}', 4: '${state[4]}'"

# A NaN gradient on one rank alone: it lands in a sum that rank owns, so the global gradient norm every rank's guard
# judges is NaN and all skip step 3 together (ranks that disagreed would deadlock in the broadcasts after it), the
# same run as with the NaN on every rank, bit for bit.
for who in one both; do
    rank=(); [[ $who == one ]] && rank=(-x ZAYA_FAULT_RANK)
    rc=0
    ZAYA_FAULT_NAN_GRAD=3 ZAYA_FAULT_RANK=1 timeout 120 mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS \
        -x ZAYA_FAULT_NAN_GRAD "${rank[@]}" "$ZAYA" train "${long[@]/100000/6}" --micro-batch 2 --out "$tmp/nan_$who" \
        >"$tmp/nan_$who.out" 2>&1 || rc=$?
    nan_rc[$who]=$rc
done
[[ ${nan_rc[one]} -eq 0 && ${nan_rc[both]} -eq 0 ]] && grep -q "step     3/6.*SKIPPED (non-finite" "$tmp/nan_one.out" &&
    cmp -s "$tmp/nan_one/model/model.safetensors" "$tmp/nan_both/model/model.safetensors" &&
    pass "a NaN gradient on rank 1 alone: every rank skips step 3, the model bit-identical to a NaN on both" ||
    fail "a NaN gradient on one rank" "exit ${nan_rc[one]} / ${nan_rc[both]}" "$(grep -E 'step +3/|error' "$tmp/nan_one.out")"

# Faults. mpirun ends the job when a rank is killed; a hung rank leaves the others in a collective until the
# watchdog (--comm-timeout) aborts the job.
mpi 2 "$ZAYA" train "${long[@]}" --micro-batch 2 --out "$tmp/kill" >"$tmp/kill.out" 2>&1 &
job=$!
for _ in $(seq 100); do grep -q "step     3/" "$tmp/kill.out" 2>/dev/null && break; sleep 0.1; done
victim=$(pgrep -f -- "--out $tmp/kill" | while read -r p; do [[ $(ps -o comm= -p "$p") == zaya ]] && echo "$p"; done | tail -1)
t0=$(date +%s.%N)
kill -9 "$victim"
rc=0
timeout 60 tail --pid=$job -f /dev/null || true
wait $job || rc=$?
dt=$(python3 -c "print(f'{$(date +%s.%N) - $t0:.1f}')")
left=$(pgrep -f -- "--out $tmp/kill" || true)
[[ $rc -ne 0 && -z $left ]] && within "$dt" 30 && grep -q "exited on signal 9" "$tmp/kill.out" &&
    pass "kill -9 of one rank: every rank gone in $dt s, exit $rc, the launcher names the rank" ||
    fail "kill -9 of one rank" "exit $rc after $dt s, left: '$left'" "$(tail -5 "$tmp/kill.out")"

t0=$(date +%s.%N)
rc=0
ZAYA_FAULT_HANG=3 ZAYA_FAULT_RANK=1 timeout 120 mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS -x ZAYA_FAULT_HANG \
    -x ZAYA_FAULT_RANK "$ZAYA" train "${long[@]}" --micro-batch 2 --out "$tmp/hang" --comm-timeout 3 >"$tmp/hang.out" 2>&1 || rc=$?
dt=$(python3 -c "print(f'{$(date +%s.%N) - $t0:.1f}')")
left=$(pgrep -f -- "--out $tmp/hang" || true)
[[ $rc -ne 0 && $rc -ne 124 && -z $left ]] && within "$dt" 30 &&
    grep -Eq "rank 0: MPI .* has not completed after 3 s \(--comm-timeout\)" "$tmp/hang.out" &&
    pass "a hung rank (--comm-timeout 3): every rank gone in $dt s, exit $rc, rank 0 names the collective" ||
    fail "a hung rank" "exit $rc after $dt s, left: '$left'" "$(grep -v ORTE_ERROR "$tmp/hang.out" | tail -5)"

# The supervisor restarts the whole job (--launcher): a rank hangs at step 12 (once per supervised run); the job
# ends by the watchdog, or by the supervisor's heartbeat timeout with the watchdog off, and resumes from step 10 on
# the same 2 ranks: the final model is bit-identical to the straight run's.
for how in "--comm-timeout 3" "--comm-timeout 0 --heartbeat-timeout 3"; do
    rc=0
    ZAYA_FAULT_HANG=12 ZAYA_FAULT_RANK=1 timeout 120 "$ZAYA" train --supervise \
        --launcher "mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS" --restart-delay 0.2 $how "${args[@]}" \
        --micro-batch 2 --out "$tmp/sup" >"$tmp/sup.out" 2>&1 || rc=$?
    [[ $rc -eq 0 ]] && grep -q "restarting from checkpoint step 10" "$tmp/sup.out" &&
        cmp -s "$tmp/two/model/model.safetensors" "$tmp/sup/model/model.safetensors" &&
        pass "supervised 2-rank job ($how): a hung rank, restarted from step 10, bit-identical result" ||
        fail "supervised 2-rank job ($how)" "exit $rc" "$(grep supervisor "$tmp/sup.out" | tail -4)"
    rm -rf "$tmp/sup"
done

# A stop request to the supervisor reaches every rank (as SIGUSR1, which mpirun forwards): a checkpoint of the
# step, then every rank exits; the checkpoint resumes (here on 1 rank).
"$ZAYA" train --supervise --launcher "mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS" "${long[@]}" --micro-batch 2 \
    --ckpt-every 100000 --out "$tmp/stop" >"$tmp/stop.out" 2>&1 &
job=$!
for _ in $(seq 100); do grep -q "step     3/" "$tmp/stop.out" 2>/dev/null && break; sleep 0.1; done
kill -TERM $job
rc=0
wait $job || rc=$?
step=$(grep -oP "stopped by User defined signal 1 after step \K[0-9]+" "$tmp/stop.out" || true)
[[ $rc -eq 138 && -n $step && -d $tmp/stop/checkpoints/$(printf step_%08d "${step:-0}") ]] &&
    pass "SIGTERM to a supervised 2-rank job: every rank stops after a checkpoint of step $step (exit $rc)" ||
    fail "SIGTERM to a supervised 2-rank job" "exit $rc, step '$step'" "$(grep -v '^.step' "$tmp/stop.out" | tail -5)"
expect_ok "it resumes on 1 rank" train "${long[@]}" --micro-batch 8 --ckpt-every 100000 --out "$tmp/stop" --resume \
    --stop-after 2

rc=0
mpi 2 "$ZAYA" train "${args[@]}" --micro-batch 8 --out "$tmp/bad" >"$tmp/bad.out" 2>&1 || rc=$?
[[ $rc -ne 0 ]] && grep -q "must be a multiple of micro_batch (8) × ranks (2)" "$tmp/bad.out" &&
    pass "a batch that does not split over the ranks is refused" || fail "bad split" "exit $rc" "$(cat "$tmp/bad.out")"

finish
