#!/usr/bin/env bash
# The one script to run on the GPU machine (device tool), from the repository root, after scripts/gpu_bundle.sh
# has filled build-gpu/ here and the device tool carried it:  bash scripts/gpu_check.sh
# Runs every CUDA op against its CPU twin and prints a compact table last. (Still to come with the rest of the CUDA
# backend: the 20-step training parity run and the MFU / decode benchmarks; the table says so.)
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
echo
echo "== zaya gpu_check ($(($(date +%s) - start)) s)"
python3 - "$out/cuda_ops.json" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"op tests: no result ({e})"); sys.exit(0)
print(f"{'check':45s} {'result':8s} time")
for suite in r["testsuites"]:
    for t in suite["testsuite"]:
        res = "FAILED" if t.get("failures") else ("skipped" if t.get("result") == "SKIPPED" else "ok")
        print(f"{suite['name'] + '.' + t['name']:45s} {res:8s} {t['time']}")
print(f"{'training parity (20 steps, GPU vs CPU)':45s} {'not yet':8s} -")
print(f"{'MFU / decode benchmarks':45s} {'not yet':8s} -")
PY
exit "$rc"
