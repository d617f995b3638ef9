#!/usr/bin/env bash
# Rehearses build-gpu/ (scripts/gpu_bundle.sh) here, on a root that holds what the GPU machine is sure to have and
# nothing else: glibc (libc, libm, libpthread, libdl, librt, the loader) and CUDA's own libraries
# (/usr/local/cuda/lib64). None of our Debian libraries is there, as on the GPU machine, so a library the bundle
# forgot, or a symbol no carried library defines (LD_BIND_NOW resolves every one at start), fails here and not in
# the lease's few minutes of device time. Without a GPU the CUDA parts skip or refuse, saying why; that they run that
# far shows they load. Runs each binary as gpu_check.sh does (the same LD_LIBRARY_PATH order), and the CPU work `zaya`
# does there: training on the carried corpus and generation. Needs root (chroot, and mounts in a private namespace).
#
# First, the binaries hold no AVX-512 instruction (zmm or mask registers, xmm/ymm 16–31, or an instruction only
# AVX-512 has): they are built for x86-64-v3 (AVX2), which the GPU machine's CPU has; whether it has AVX-512 is not
# known.
#
# Usage: scripts/gpu_rehearse.sh   (from anywhere; gpu_bundle.sh runs it last)
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -x build-gpu/zaya && -f build-gpu/zaya-libs.tar.xz ]] || { echo "gpu_rehearse: build-gpu/ missing: run scripts/gpu_bundle.sh" >&2; exit 1; }
for bin in build-gpu/zaya build-gpu/zaya_cuda_tests build-gpu/zaya_cuda_bench; do
    n=$(objdump -d --no-show-raw-insn "$bin" |
        grep -cE 'zmm|%k[0-7]|[xy]mm(1[6-9]|2[0-9]|3[01])|vpternlog|vpermt2|vpermi2|vpro[lr]|vcvtne2?ps2bf16|vdpbf16ps' || true)
    [[ $n -eq 0 ]] || { echo "gpu_rehearse: FAIL  $bin holds $n AVX-512 instructions: build it for x86-64-v3" >&2; exit 1; }
done
echo "gpu_rehearse: ok    no AVX-512 instruction in the three binaries"
if [[ $(id -u) -ne 0 ]]; then
    echo "gpu_rehearse: skipped (needs root for chroot)"
    exit 0
fi
cuda=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do [[ -d $d ]] && { cuda=$(readlink -f "$d"); break; }; done
[[ -n $cuda ]] || { echo "gpu_rehearse: no /usr/local/cuda/lib64 here" >&2; exit 1; }
root=$(mktemp -d /tmp/gpu_rehearse.XXXXXX)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{lib64,lib/x86_64-linux-gnu,cuda,b,proc,sys,dev,tmp}
cp -L /lib64/ld-linux-x86-64.so.2 "$root/lib64/"
for lib in libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1; do cp -L "/lib/x86_64-linux-gnu/$lib" "$root/lib/x86_64-linux-gnu/"; done
python3 -c 'import tarfile, sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' build-gpu/zaya-libs.tar.xz "$root/tmp"

# In a mount namespace of its own: the bind mounts vanish with it, whatever happens.
unshare --mount --propagation private bash -s "$root" "$cuda" "$PWD/build-gpu" <<'IN_NAMESPACE'
set -uo pipefail
root=$1
mount --bind "$2" "$root/cuda"
mount --bind -o ro "$3" "$root/b"
for d in proc sys dev; do mount --bind "/$d" "$root/$d"; done
failed=0
chroot=$(command -v chroot)
# name, expected exit code, what the output must hold, LD_LIBRARY_PATH, command
check() {
    local name=$1 want=$2 expect=$3 libs=$4 out code
    shift 4
    out=$(env -i PATH=/b LD_BIND_NOW=1 LD_LIBRARY_PATH="$libs" OMP_NUM_THREADS=2 "$chroot" "$root" "$@" 2>&1)
    code=$?
    if [[ $code -eq $want && $out == *"$expect"* ]]; then
        echo "gpu_rehearse: ok    $name"
    else
        echo "gpu_rehearse: FAIL  $name (exit $code, wanted $want and output holding '$expect'):"
        tail -5 <<<"$out" | sed 's/^/    /'
        failed=1
    fi
}
tests=/b/lib:/cuda
zaya=/tmp/zaya-libs:/b/lib:/cuda
check "zaya_cuda_tests runs, skipping without a GPU" 0 "PASSED" "$tests" /b/zaya_cuda_tests --gtest_brief=1
check "zaya_cuda_bench starts" 0 '"bench"' "$tests" /b/zaya_cuda_bench
check "zaya trains 2 steps on the carried corpus (cpu)" 0 "final val_loss" "$zaya" /b/zaya train \
    --data /b/data/pydocs --model small --steps 2 --batch 2 --seq 64 --warmup 1 --eval-every 0 --eval-batches 1 \
    --sample-tokens 0 --device cpu --out /tmp/train
check "zaya generates (cpu)" 0 "," "$zaya" /b/zaya generate small --dtype f32 --tokens 2,40,7 -n 4 --print-ids -q \
    --temperature 0 --device cpu
check "zaya loads Oniguruma for a byte-level tokenizer.json" 0 "tokens for 11 bytes" "$zaya" /b/zaya tokenize \
    /b/data/bytelevel-tokenizer.json --text "Hello world"
check "zaya --device cuda refuses without a GPU, saying why" 1 "no usable CUDA device" "$zaya" /b/zaya bench train \
    --device cuda --model tiny --batch 1 --seq 16 --iters 1
exit $failed
IN_NAMESPACE
echo "gpu_rehearse: build-gpu/ runs with glibc and CUDA's libraries alone"
