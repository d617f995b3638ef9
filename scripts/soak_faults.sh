#!/usr/bin/env bash
# Soak test of fault tolerance (the checkpoint issue, item 7): one supervised training run whose trainer is
# killed with SIGKILL KILLS times at random moments — every other kill aimed at the middle of a checkpoint write —
# must complete with final weights bit-identical to an uninterrupted run's.
#
# Usage: scripts/soak_faults.sh [KILLS (default 20)] [STEPS (default 2000)]
# Env:   ZAYA (default build/zaya), SOAK_DIR (default: a temp dir, removed at the end unless KEEP=1).
set -euo pipefail
KILLS=${1:-20}
STEPS=${2:-2000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ZAYA=${ZAYA:-$ROOT/build/zaya}
[[ -x $ZAYA ]] || { echo "soak: $ZAYA not found: build first (scripts/build.sh)" >&2; exit 2; }
dir=${SOAK_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/zaya_soak.XXXXXX")}
[[ ${KEEP:-0} == 1 || -n ${SOAK_DIR:-} ]] || trap 'rm -rf "$dir"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

source "$ROOT/tests/cli/corpus.sh"
make_corpus "$dir/corpus" 400
"$ZAYA" prepare --input "$dir/corpus" --out "$dir/data" --vocab-size 400 >/dev/null
args=(--data "$dir/data" --model tiny --steps "$STEPS" --batch 8 --seq 64 --eval-every 0 --sample-tokens 0
    --ckpt-every 10 --keep 3)

echo "soak: uninterrupted reference run ($STEPS steps) ..."
start=$(date +%s)
"$ZAYA" train "${args[@]}" --out "$dir/straight" >"$dir/straight.log" 2>&1
echo "soak: reference done in $(($(date +%s) - start)) s"

# Saves pause 40 ms between files (ZAYA_FAULT_SLOW_CKPT_MS) so that a kill can be aimed inside one.
echo "soak: supervised run, killing the trainer $KILLS times ..."
ZAYA_FAULT_SLOW_CKPT_MS=40 "$ZAYA" train "${args[@]}" --out "$dir/soak" --supervise --restart-delay 0.05 \
    --max-restarts 50 --heartbeat-timeout 60 >"$dir/soak.log" 2>&1 &
sup=$!
kills=0 mid_write=0 last_pid=
latest_step() { { cat "$dir/soak/checkpoints/latest" 2>/dev/null || true; } | tr -dc 0-9 | sed "s/^0*//"; }
while ((kills < KILLS)) && kill -0 $sup 2>/dev/null; do
    pid=$(cat "$dir/soak/trainer.pid" 2>/dev/null || true)
    if [[ -z $pid || $pid == "$last_pid" ]] || ! kill -0 "$pid" 2>/dev/null; then sleep 0.02; continue; fi
    # Let this trainer make progress first: a checkpoint newer than the one it resumed from.
    start_ck=$(latest_step)
    while kill -0 "$pid" 2>/dev/null && [[ $(latest_step) == "$start_ck" ]]; do sleep 0.02; done
    sleep "0.$((RANDOM % 9 + 1))"
    if ((kills % 2 == 0)); then # aim at a checkpoint write: wait for a temporary checkpoint directory
        for _ in $(seq 1 300); do
            compgen -G "$dir/soak/checkpoints/step_*.tmp" >/dev/null && break
            sleep 0.01
        done
    fi
    in_write=0
    compgen -G "$dir/soak/checkpoints/step_*.tmp" >/dev/null && in_write=1
    if kill -9 "$pid" 2>/dev/null; then
        kills=$((kills + 1))
        mid_write=$((mid_write + in_write))
        echo "soak: kill $kills: pid $pid at checkpoint step $(latest_step)$([[ $in_write == 1 ]] && echo ', during a checkpoint write')"
    fi
    last_pid=$pid
done
rc=0
wait $sup || rc=$?
restarts=$(grep -c "restarting from" "$dir/soak/supervisor.log" || true)
echo "soak: supervised run exited with status $rc after $kills kills ($mid_write during a checkpoint write), $restarts restarts"
if [[ $rc -ne 0 || $kills -lt $KILLS ]]; then
    echo "soak: FAILED (the run did not complete, or finished before $KILLS kills: use more steps)"
    tail -20 "$dir/soak/supervisor.log"
    exit 1
fi
if cmp -s "$dir/straight/model/model.safetensors" "$dir/soak/model/model.safetensors" &&
    cmp -s "$dir/straight/checkpoints/step_$(printf %08d "$STEPS")/optimizer.safetensors" \
        "$dir/soak/checkpoints/step_$(printf %08d "$STEPS")/optimizer.safetensors"; then
    echo "soak: PASSED: final weights and optimizer state bit-identical to the uninterrupted run"
else
    echo "soak: FAILED: final weights differ from the uninterrupted run"
    exit 1
fi
