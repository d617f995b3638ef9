#!/usr/bin/env bash
# The one script to run on the GPU machine (device tool), from the repository root, after scripts/gpu_bundle.sh
# has filled build-gpu/ here and the device tool carried it:  bash scripts/gpu_check.sh
# Runs every CUDA op against its CPU twin, then zaya_cuda_bench (the GPU's bf16/fp32 matrix rate and HBM copy
# bandwidth, and the attention, Newton–Schulz and LM-head kernels at ZAYA1-8B shapes), and prints a compact table
# last. (Still to come with the model on the GPU: the 20-step training parity run, training MFU and decode; the
# table says so.)
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
timeout 300 build-gpu/zaya_cuda_tests --gtest_output=json:"$out/cuda_ops.json" 2>&1 | tail -40
rc=${PIPESTATUS[0]}
echo "== benchmarks (matrix rate, HBM, kernels at ZAYA1-8B shapes)"
if [[ -x build-gpu/zaya_cuda_bench ]]; then
    timeout 180 build-gpu/zaya_cuda_bench | tee "$out/cuda_bench.jsonl"
    [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
fi
echo
echo "== zaya gpu_check ($(($(date +%s) - start)) s)"
python3 - "$out/cuda_ops.json" "$out/cuda_bench.jsonl" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
    print(f"{'check':45s} {'result':8s} time")
    for suite in r["testsuites"]:
        for t in suite["testsuite"]:
            res = "FAILED" if t.get("failures") else ("skipped" if t.get("result") == "SKIPPED" else "ok")
            print(f"{suite['name'] + '.' + t['name']:45s} {res:8s} {t['time']}")
except Exception as e:
    print(f"op tests: no result ({e})")
try:
    for line in open(sys.argv[2]):
        b = json.loads(line)
        name = b.pop("bench")
        print(f"{'bench ' + name:45s} " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in b.items()))
except Exception as e:
    print(f"benchmarks: no result ({e})")
print(f"{'training parity (20 steps, GPU vs CPU)':45s} {'not yet':8s} -")
print(f"{'training MFU (~1B preset), decode vs HBM bound':45s} {'not yet':8s} - (needs the model on the GPU)")
PY
exit "$rc"
