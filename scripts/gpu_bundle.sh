#!/usr/bin/env bash
# Packs what the GPU machine needs to run scripts/gpu_check.sh into build-gpu/ (carried there by the device tool; it
# has CUDA and PyTorch but none of our Debian libraries, and no network):
#   - the CUDA op tests and zaya_cuda_bench (CUDA libraries only) with the few shared libraries they link
#     (fmt, libgomp, libstdc++, libgcc);
#   - `zaya` itself, built for a portable x86-64-v3 CPU, with every shared library it links besides glibc and CUDA's
#     own (oneDNN, OpenBLAS, sentencepiece, MPI, ...) in build-gpu/zaya-libs.tar.xz (~17 MB; Python's tarfile
#     unpacks it there);
#   - a prepared corpus (data/pydocs, made by `zaya prepare` if missing) for the training parity run.
# Run after building (scripts/build.sh, with nvcc present). The whole folder stays under the device tool's 64 MiB.
# Last, scripts/gpu_rehearse.sh runs the bundle on a root holding glibc and CUDA's libraries alone, as the GPU
# machine will: a library left out fails here, not in the lease's minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
for bin in zaya_cuda_tests zaya_cuda_bench zaya; do
    [[ -x build/$bin ]] || { echo "gpu_bundle: build/$bin missing (build with nvcc installed)" >&2; exit 1; }
done
echo "gpu_bundle: portable zaya (x86-64-v3) in build-portable/"
cmake -S . -B build-portable -G Ninja -DCMAKE_BUILD_TYPE=Release -DZAYA_NATIVE=OFF -DZAYA_TESTS=OFF >/dev/null
nice cmake --build build-portable --target zaya -j"${JOBS:-2}" >/dev/null
[[ -f data/pydocs/data.json ]] || build/zaya prepare --out data/pydocs --vocab-size 4096
rm -rf build-gpu
mkdir -p build-gpu/lib build-gpu/data
cp build/zaya_cuda_tests build/zaya_cuda_bench build-gpu/
cp build-portable/zaya build-gpu/
cp -r data/pydocs build-gpu/data/
cp tests/golden/tokenizer/llama3/tokenizer.json build-gpu/data/bytelevel-tokenizer.json # gpu_rehearse: Oniguruma loads
for lib in $(ldd build/zaya_cuda_tests build/zaya_cuda_bench | awk '/=>/ {print $3}' | sort -u); do
    case "$(basename "$lib")" in
        libfmt.so.* | libgomp.so.* | libstdc++.so.* | libgcc_s.so.*) cp -L "$lib" build-gpu/lib/ ;;
    esac
done
stage=$(mktemp -d)
mkdir "$stage/zaya-libs"
for lib in $(ldd build-portable/zaya | awk '/=>/ {print $3}' | sort -u); do
    case "$(basename "$lib")" in
        libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libcuda.so.* | libcublas* | libcudart* | libnccl*) ;;
        *) cp -L "$lib" "$stage/zaya-libs/" ;;
    esac
done
# Oniguruma is loaded with dlopen (tokenizer.json patterns; src/data/onig_regex.cpp), so ldd does not list it.
onig=$(ldconfig -p | awk '/libonig\.so\.5 / {print $NF; exit}')
[[ -n $onig ]] || { echo "gpu_bundle: libonig.so.5 not found (scripts/setup.sh installs libonig-dev)" >&2; exit 1; }
cp -L "$onig" "$stage/zaya-libs/"
tar -C "$stage" -cf - zaya-libs | xz -6 -T2 > build-gpu/zaya-libs.tar.xz
rm -rf "$stage"
du -sh build-gpu | sed 's/^/gpu_bundle: /'
bash scripts/gpu_rehearse.sh
