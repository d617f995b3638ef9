#!/usr/bin/env bash
# Packs what the GPU machine needs to run the CUDA checks into build-gpu/ (carried there by the device tool; it has
# CUDA but none of our Debian libraries): the CUDA test and benchmark binaries and the shared libraries they link besides CUDA's own
# and glibc's (fmt, libgomp, libstdc++, libgcc). Run after building (scripts/build.sh, with nvcc present).
set -euo pipefail
cd "$(dirname "$0")/.."
for bin in zaya_cuda_tests zaya_cuda_bench; do
    [[ -x build/$bin ]] || { echo "gpu_bundle: build/$bin missing (build with nvcc installed)" >&2; exit 1; }
done
rm -rf build-gpu
mkdir -p build-gpu/lib
cp build/zaya_cuda_tests build/zaya_cuda_bench build-gpu/
for lib in $(ldd build/zaya_cuda_tests build/zaya_cuda_bench | awk '/=>/ {print $3}' | sort -u); do
    case "$(basename "$lib")" in
        libfmt.so.* | libgomp.so.* | libstdc++.so.* | libgcc_s.so.*) cp -L "$lib" build-gpu/lib/ ;;
    esac
done
du -sh build-gpu | sed 's/^/gpu_bundle: /'
