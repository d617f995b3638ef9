#!/usr/bin/env bash
# The one script to run on the GPU machine (device tool), from the repository root, after scripts/gpu_bundle.sh
# has filled build-gpu/ here and the device tool carried it:  bash scripts/gpu_check.sh
# Runs every CUDA op (and the whole model, forward and backward) against its CPU twin, then zaya_cuda_bench (the
# GPU's bf16/fp32 matrix rate and HBM copy bandwidth, and the attention (fp32, bf16), grouped experts (bf16),
# Newton–Schulz and LM-head kernels at ZAYA1-8B shapes), then `zaya train` for 20 steps on the CPU and on the GPU (fp32 and bf16 matmuls) from the same seed and
# data, `zaya bench train --device cuda` on the ~1B preset, `zaya generate --device cuda` against the CPU (the same
# ids, greedy and sampled), and `zaya bench decode --device cuda` (batch-1 decode tokens/s against the HBM bound, then
# batch 1 again without programmatic dependent launch, 8 sequences stepped together, and batch 1 after a 32k-token
# prompt) at ZAYA1-8B shapes with random bf16 weights; prints a compact table last.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp}
[[ -x build-gpu/zaya_cuda_tests ]] || { echo "gpu_check: build-gpu/ missing: run scripts/gpu_bundle.sh here first" >&2; exit 1; }
# cuBLASLt: the CUDA toolkit's, or the one PyTorch's wheels bring.
libs=build-gpu/lib
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do [[ -d $d ]] && libs="$libs:$d"; done
torch_nvidia=$(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null || true)
if [[ -n $torch_nvidia ]]; then
    for d in "$torch_nvidia"/nvidia/*/lib "$torch_nvidia"/nvidia/cu*/lib; do [[ -d $d ]] && libs="$libs:$d"; done
fi
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
start=$(date +%s)
# One deadline for the whole script (GPU_CHECK_SECONDS, default 540: the device tool's call limit is 600), so that the
# table is always printed: each stage's timeout is its own limit or what is left, less 20 s for the table, and a
# stage with under 10 s left is skipped, saying so. Without it a hanging kernel in a few suites (120 s each) would
# use up the call, and the table with it.
deadline=$((start + ${GPU_CHECK_SECONDS:-540}))
# limit SECONDS: prints min(SECONDS, time left before the deadline less 20 s); fails when under 10 s are left.
limit() {
    local left=$((deadline - $(date +%s) - 20))
    ((left >= 10)) || return 1
    echo $((left < $1 ? left : $1))
}
skipped() { echo "gpu_check: out of time, skipped: $1"; rc=1; }
# The op tests one suite per process: a kernel fault leaves its CUDA context unusable (and a crash writes no JSON),
# so it costs that suite alone, not every test after it. Each suite's exit code lands beside its JSON.
rc=0
rm -rf "$out/cuda_ops" && mkdir -p "$out/cuda_ops"
for suite in $(build-gpu/zaya_cuda_tests --gtest_list_tests | grep -E '^[A-Za-z].*\.$'); do
    name=${suite%.}
    name=${name//\//_}
    t=$(limit 120) || { skipped "op tests $suite"; continue; }
    timeout "$t" build-gpu/zaya_cuda_tests --gtest_filter="$suite*" --gtest_brief=1 \
        --gtest_output=json:"$out/cuda_ops/$name.json" 2>&1 | tail -20
    code=${PIPESTATUS[0]}
    echo "$code" >"$out/cuda_ops/$name.rc"
    [[ $code -eq 0 ]] || { rc=1; echo "gpu_check: op tests $suite exited with $code"; }
done
echo "== benchmarks (matrix rate, HBM, kernels at ZAYA1-8B shapes)"
if ! t=$(limit 180); then
    skipped "zaya_cuda_bench"
elif [[ -x build-gpu/zaya_cuda_bench ]]; then
    timeout "$t" build-gpu/zaya_cuda_bench | tee "$out/cuda_bench.jsonl"
    [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
fi
echo "== zaya on the GPU: 20-step training parity (CPU vs CUDA) and training speed (~1B preset)"
if [[ -x build-gpu/zaya && -f build-gpu/zaya-libs.tar.xz ]]; then
    python3 -c 'import tarfile, sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' build-gpu/zaya-libs.tar.xz /tmp
    zaya=(env LD_LIBRARY_PATH="/tmp/zaya-libs:$LD_LIBRARY_PATH" build-gpu/zaya)
    common=(--data build-gpu/data/pydocs --model small --steps 20 --batch 8 --seq 256 --warmup 5 --eval-every 0
            --eval-batches 2 --sample-tokens 0)
    for run in "cpu fp32" "cuda fp32" "cuda bf16"; do
        set -- $run
        rm -rf "$out/parity_$1_$2"
        t=$(limit 150) || { skipped "train $1 $2"; continue; }
        timeout "$t" "${zaya[@]}" train "${common[@]}" --device "$1" --precision "$2" --out "$out/parity_$1_$2" 2>&1 | tail -3
        [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
    done
    # 16 micro-batches of 8 × 2048 tokens a step (262k tokens): Muon's Newton–Schulz on the experts (~34 TFLOP a
    # step at this preset, more than a micro-batch's forward + backward) is paid once per step, as in training with a
    # large global batch (ZAYA1's was 16M tokens), not once per 16k tokens.
    if t=$(limit 240); then
        timeout "$t" "${zaya[@]}" bench train --device cuda --model 1b --batch 128 --micro-batch 8 --seq 2048 \
            --precision bf16 --iters 3 --phases --json | tee "$out/train_bench.json"
        [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
    else
        skipped "bench train"
    fi
    # Generation through the engine on the GPU (greedy: argmax on the device; sampled: logits downloaded) against
    # the CPU, same random f32 weights: the ids should agree (fp32 on both sides).
    for mode in "greedy --temperature 0" "sampled --temperature 0.8 --seed 5"; do
        set -- $mode
        name=$1
        shift
        for dev in cpu cuda; do
            t=$(limit 60) || { skipped "generate $dev $name"; continue; }
            timeout "$t" "${zaya[@]}" generate small --dtype f32 --tokens 2,40,7,99,512 -n 48 --print-ids -q "$@" \
                --device "$dev" >"$out/generate_${dev}_$name.ids" 2>&1 || rc=1
        done
    done
    if t=$(limit 300); then
        timeout "$t" "${zaya[@]}" bench decode --device cuda --model zaya1-8b --dtype bf16 --prompt-tokens 128 \
            --new-tokens 64 --seqs 8 --context-tokens 32768 --json | tee "$out/decode_bench.json"
        [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
    else
        skipped "bench decode"
    fi
fi
echo
echo "== zaya gpu_check ($(($(date +%s) - start)) s)"
python3 scripts/gpu_table.py "$out" || rc=1
exit "$rc"
