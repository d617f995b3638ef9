#!/usr/bin/env bash
# Packs what the GPU machine needs to run the CUDA checks into build-gpu/ (carried there by the device tool; it has
# CUDA but none of our Debian libraries): the CUDA test binary and the shared libraries it links besides CUDA's own
# and glibc's (fmt, libgomp, libstdc++, libgcc). Run after building (scripts/build.sh, with nvcc present).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -x build/zaya_cuda_tests ]] || { echo "gpu_bundle: build/zaya_cuda_tests missing (build with nvcc installed)" >&2; exit 1; }
rm -rf build-gpu
mkdir -p build-gpu/lib
cp build/zaya_cuda_tests build-gpu/
for lib in $(ldd build/zaya_cuda_tests | awk '/=>/ {print $3}'); do
    case "$(basename "$lib")" in
        libfmt.so.* | libgomp.so.* | libstdc++.so.* | libgcc_s.so.*) cp -L "$lib" build-gpu/lib/ ;;
    esac
done
du -sh build-gpu | sed 's/^/gpu_bundle: /'
