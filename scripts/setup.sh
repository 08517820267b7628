#!/usr/bin/env bash
# Set up prep in the repository's own virtual environment, .venv/ (never the system Python: Debian's is
# externally managed, PEP 668). Works on Debian's Python and on any other Python >= 3.11:
# PYTHON=/path/to/python3.12 picks one, else python3 on PATH.
#
#   bash scripts/setup.sh           prep and its run-time dependencies (what `prep demo` needs; no torch)
#   bash scripts/setup.sh --test    also the test tools, Debian's ffmpeg (for the ffmpeg engine), Debian's
#                                   slurm-wlm and munge (tests/test_slurm.py starts a single-node SLURM; with
#                                   no init system nothing starts them otherwise), Debian's strace (the
#                                   safety tests record every path prep writes) and a CPU build of PyTorch
#                                   with psutil (the dataloader benchmark and its tests)
#
# torch (--test): PREP_TORCH_VERSION (default 2.13.0) from PREP_TORCH_INDEX (default PyTorch's CPU wheel
# index, https://download.pytorch.org/whl/cpu); when that index is unreachable, a CPU build (+cpu) that pip's
# own configured sources offer (a local wheel folder or index); when there is none either, the package
# index's torch (PyPI's is the CUDA build: it runs on CPU, but takes ~5.4 GB against ~1 GB), said in one
# line first. A torch already in .venv (e.g. a CUDA build you installed on purpose) is kept.
# --test also installs gcc and Python's headers (apt) when missing: lerobot 0.3.3, the v2.1 reader of the
# compatibility stage, pulls evdev, which the package index has only as source.
#
# Disk: free space is checked before each large download (one line naming what it needs, then exit 1);
# a full `bash scripts/test.sh` needs ~30 GB (docs/install.md). When pip fails, the last line names
# the package and the likely cause (network, disk, compiler).
#
# Idempotent: does nothing but check a stamp (pyproject.toml's hash, the interpreter, the mode) when
# already set up. Afterwards: .venv/bin/prep, or `source .venv/bin/activate` then prep.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/python.sh
source scripts/python.sh

MODE=run
for arg in "$@"; do
    case "$arg" in
        --test) MODE=test ;;
        *) echo "usage: scripts/setup.sh [--test]" >&2; exit 2 ;;
    esac
done
VENV=.venv
VPY="$VENV/bin/python"
TORCH_VERSION="${PREP_TORCH_VERSION:-2.13.0}"
TORCH_INDEX="${PREP_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"

prep_python
VENV_KEY="$PY $("$PY" -c 'import sys; print(sys.version.split()[0])') $PWD"
INSTALL_KEY="$VENV_KEY $(sha256sum pyproject.toml | cut -c1-16)"

stamp_ok() { [[ -x "$VENV/bin/prep" && -f "$VENV/.prep-setup-$1" && "$(cat "$VENV/.prep-setup-$1")" == "$INSTALL_KEY" ]]; }
if stamp_ok "$MODE" || { [[ $MODE == run ]] && stamp_ok test; }; then
    prep_log "$VENV up to date ($("$VPY" -V), $MODE); run $VENV/bin/prep or: source $VENV/bin/activate"
    exit 0
fi

# pip in .venv: its output kept aside and shown only when it fails, then one line naming package and cause.
pip_q() { local what=$1; shift; prep_pip "$VPY" "$what" "$@"; }

# The environment itself: (re)made when missing, broken, or made by another interpreter or in another folder.
if [[ ! -x "$VPY" || "$(cat "$VENV/.prep-venv" 2>/dev/null)" != "$VENV_KEY" ]] || ! "$VPY" -c '' 2>/dev/null; then
    [[ -e "$VENV" ]] && prep_log "remaking $VENV (made by another interpreter or in another folder, or broken)"
    rm -rf "$VENV"
    prep_log "creating $VENV with $PY ($("$PY" -V 2>&1))"
    "$PY" -m venv "$VENV"
    echo "$VENV_KEY" > "$VENV/.prep-venv"
fi

torch_cpu() {  # a CPU build of torch into .venv if one is reachable, else the package index's (one line says so)
    if "$VPY" -c 'import torch' >/dev/null 2>&1; then
        prep_log "torch $("$VPY" -c 'import torch; print(torch.__version__)') already in $VENV (kept)"
        return 0
    fi
    if "$VPY" - "$TORCH_INDEX/torch/" <<'EOF' >/dev/null 2>&1; then
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=5).close()
EOF
        prep_need_space 3 "$VENV" "torch==$TORCH_VERSION (CPU build, ~1 GB installed)"
        prep_log "installing torch==$TORCH_VERSION, CPU build, from $TORCH_INDEX"
        pip_q "torch==$TORCH_VERSION" install --no-cache-dir --index-url "$TORCH_INDEX" "torch==$TORCH_VERSION"
        return 0
    fi
    # Which builds pip's own configured sources offer (a find-links folder, a local index): `pip index` reads
    # their listings only (a --dry-run resolve would download a 500 MB CUDA wheel just to look at it).
    local versions
    versions="$("$VPY" -m pip --disable-pip-version-check index versions torch 2>/dev/null | sed -n 's/^Available versions: //p' || true)"
    if [[ ", $versions," == *", $TORCH_VERSION+cpu,"* ]]; then
        prep_need_space 3 "$VENV" "torch==$TORCH_VERSION+cpu (~1 GB installed)"
        prep_log "$TORCH_INDEX is not reachable; installing torch==$TORCH_VERSION+cpu from pip's configured sources"
        pip_q "torch==$TORCH_VERSION+cpu" install "torch==$TORCH_VERSION+cpu"
        return 0
    fi
    prep_need_space 9 "$VENV" "torch==$TORCH_VERSION from the package index (CUDA build, ~5.4 GB installed, ~3 GB download)"
    prep_log "no CPU build of torch==$TORCH_VERSION reachable ($TORCH_INDEX unreachable, pip's sources offer no +cpu): installing the package index's torch==$TORCH_VERSION, the CUDA build (runs on CPU; ~5.4 GB installed with its nvidia-* libraries and triton, against ~1 GB for the CPU build; ~3 GB download, minutes). PREP_TORCH_INDEX=<a mirror of $TORCH_INDEX> avoids it"
    pip_q "torch==$TORCH_VERSION" install --no-cache-dir "torch==$TORCH_VERSION"
}

build_tools() {  # gcc and Python's headers (lerobot 0.3.3 pulls evdev: source only on the package index)
    local need=() inc
    command -v gcc >/dev/null 2>&1 || need+=(gcc)
    inc="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
    if [[ ! -f $inc/Python.h ]]; then
        case "$PY" in
            /usr/bin/python3) need+=(python3-dev) ;;
            /usr/bin/*) need+=("$(basename "$PY")-dev") ;;
            *) prep_log "note: no Python.h in $inc: building evdev (lerobot 0.3.3's) will fail; use a Python with its headers" ;;
        esac
    fi
    if ((${#need[@]})); then
        prep_log "lerobot 0.3.3 (the compatibility stage's v2.1 reader) pulls evdev, which the package index has only as source: installing ${need[*]} to build it"
        prep_apt "${need[@]}"
    fi
}

slurm_tools() {  # Debian's slurm-wlm and munge: tests/test_slurm.py starts a single-node SLURM with them (it skips without)
    if [[ -x /usr/sbin/slurmctld && -x /usr/sbin/slurmd && -x /usr/sbin/munged ]]; then
        return 0
    fi
    if command -v apt-get >/dev/null 2>&1 && { [[ $(id -u) -eq 0 ]] || command -v sudo >/dev/null 2>&1; }; then
        prep_apt slurm-wlm munge
    else
        prep_log "note: no slurm-wlm and munge here and no apt-get to install them: tests/test_slurm.py will skip"
    fi
}

# The distribution was named `prep` before (on the package index that name is an unrelated project): an install
# of it by an earlier set-up (its top-level package is `pipeline`) also owns bin/prep, so it goes first.
if "$VPY" -c "import importlib.metadata as m, sys; sys.exit('pipeline' not in (m.distribution('prep').read_text('top_level.txt') or '').split())" 2>/dev/null; then
    prep_log "removing the distribution installed under the former name prep (now lerobot-prep)"
    pip_q "the former prep distribution" uninstall -y prep
fi

if [[ $MODE == test ]]; then
    command -v ffmpeg >/dev/null 2>&1 || prep_apt ffmpeg
    prep_log "$(ffmpeg -version | head -1)"
    slurm_tools
    # strace: tests/test_safety_strace.py records every path prep's processes write (it skips without)
    command -v strace >/dev/null 2>&1 || prep_apt strace
    build_tools
    torch_cpu
    prep_need_space 2 "$VENV" "prep's test dependencies (~1 GB installed)"
    prep_log "installing prep (editable) with its test and bench extras into $VENV"
    pip_q lerobot-prep install -e .  # first alone: its botocore is then held (prep_hold_botocore says why)
    held="$(prep_hold_botocore "$VPY")"
    pip_q "lerobot-prep[test,bench]" install -e '.[test,bench]' -c "$held"
    rm -f "$held"
else
    prep_need_space 2 "$VENV" "prep's dependencies (~0.8 GB installed)"
    prep_log "installing prep (editable) into $VENV"
    pip_q lerobot-prep install -e .
    command -v ffmpeg >/dev/null 2>&1 \
        || prep_log "note: no ffmpeg program: only \`prep reencode --engine ffmpeg\` needs it (apt-get install ffmpeg)"
fi
"$VPY" -c "
import importlib.metadata as md
names = ['lerobot-prep', 'av', 'dask', 'pyarrow', 'datasets'] + (['torch', 'pytest'] if '$MODE' == 'test' else [])
print('[setup] ' + ', '.join(f'{n} {md.version(n)}' for n in names))"
echo "$INSTALL_KEY" > "$VENV/.prep-setup-$MODE"
prep_log "ready: $VENV/bin/prep --help (or: source $VENV/bin/activate, then prep --help)"
