#!/usr/bin/env bash
# Installs every Debian package zaya needs to build, test and run (run as root on a fresh Debian 12 machine).
set -euo pipefail
if [ "$(id -u)" -ne 0 ]; then
    echo "scripts/setup.sh: run as root (it uses apt-get install)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
packages=(
    build-essential cmake ninja-build git pkg-config python3
    # GEMM: oneDNN (fastest here, bf16), OpenBLAS (comparison); OpenMP comes with g++ (libgomp)
    libdnnl-dev libopenblas-dev
    # oneDNN's CMake config asks for OpenCL (Debian builds it with the OpenCL GPU runtime); only recommended by
    # libdnnl-dev, so --no-install-recommends would leave find_package(dnnl) failing
    ocl-icd-opencl-dev
    # JSON, formatting, CLI parsing, hashing, compression, HTTP, tokenizer
    nlohmann-json3-dev libfmt-dev libcli11-dev libxxhash-dev libzstd-dev libcpp-httplib-dev libsentencepiece-dev
    # tokenizer.json: the regex engine of Hugging Face tokenizers (Oniguruma), Unicode normalization
    libonig-dev libutf8proc-dev
    # data parallel across processes and hosts
    libopenmpi-dev openmpi-bin
    # the data-parallel traffic test brings up loopback in a network namespace of its own (ip; unshare is util-linux)
    iproute2
    # tests, benchmarks, fuzzing (clang's libFuzzer runtime)
    libgtest-dev libgmock-dev libbenchmark-dev clang clang-14 libclang-rt-14-dev libomp-dev
    # the server tests talk HTTP with curl and read JSON with jq
    curl jq
    # the default training corpus: Python 3.11 documentation sources (reST)
    python3.11-doc
)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "setup: all ${#packages[@]} packages already installed"
    exit 0
fi
echo "setup: installing ${missing[*]}"
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
