#!/usr/bin/env bash
# Set up a fresh Debian machine (as root) or an existing one for prep: system FFmpeg for the
# ffmpeg engine, the package with its test extras, and a CPU build of PyTorch for the dataloader
# benchmark. Idempotent: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v ffmpeg >/dev/null 2>&1; then
    echo "[setup] installing Debian ffmpeg"
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ffmpeg >/dev/null
    else
        sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ffmpeg >/dev/null
    fi
fi
echo "[setup] $(ffmpeg -version | head -1)"

python3 -m pip install -q --disable-pip-version-check -e '.[test]'
# PyTorch for the dataloader benchmark: the CPU build (a plain 'torch' requirement may pull a CUDA build).
if ! python3 -c "import torch" >/dev/null 2>&1; then
    echo "[setup] installing torch (CPU build) and psutil"
    python3 -m pip install -q --disable-pip-version-check "torch==2.13.0" || \
        python3 -m pip install -q --disable-pip-version-check torch
fi
python3 -m pip install -q --disable-pip-version-check psutil
python3 -c "import av, dask, distributed, pyarrow, torch; print('[setup] PyAV', av.__version__, '| dask', dask.__version__, '| pyarrow', pyarrow.__version__, '| torch', torch.__version__)"
