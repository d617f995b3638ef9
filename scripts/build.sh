#!/usr/bin/env bash
# Configures and builds zaya (Release, tuned for this CPU) into build/. Extra arguments go to cmake's configure.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build
