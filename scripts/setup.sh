#!/usr/bin/env bash
# Set up prep in the repository's own virtual environment, .venv/ (never the system Python: Debian's is
# externally managed, PEP 668). Works on Debian's Python and on any other Python >= 3.11:
# PYTHON=/path/to/python3.12 picks one, else python3 on PATH.
#
#   bash scripts/setup.sh           prep and its run-time dependencies (what `prep demo` needs; no torch)
#   bash scripts/setup.sh --test    also the test tools, Debian's ffmpeg (for the ffmpeg engine) and a CPU
#                                   build of PyTorch with psutil (the dataloader benchmark and its tests)
#
# torch (--test): PREP_TORCH_VERSION (default 2.13.0) from PREP_TORCH_INDEX (default PyTorch's CPU wheel
# index, https://download.pytorch.org/whl/cpu); when that index is unreachable, from pip's own configured
# sources, but only a CPU build (+cpu) found there: never a CUDA build of several GB by surprise.
# A torch already in .venv (e.g. a CUDA build you installed on purpose) is kept.
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

# pip in .venv; a local file index's "Location ... is ignored" chatter (machines with pip configured so) is dropped.
pip_q() { "$VPY" -m pip --disable-pip-version-check "$@" 2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2); }

# The environment itself: (re)made when missing, broken, or made by another interpreter or in another folder.
if [[ ! -x "$VPY" || "$(cat "$VENV/.prep-venv" 2>/dev/null)" != "$VENV_KEY" ]] || ! "$VPY" -c '' 2>/dev/null; then
    [[ -e "$VENV" ]] && prep_log "remaking $VENV (made by another interpreter or in another folder, or broken)"
    rm -rf "$VENV"
    prep_log "creating $VENV with $PY ($("$PY" -V 2>&1))"
    "$PY" -m venv "$VENV"
    echo "$VENV_KEY" > "$VENV/.prep-venv"
fi

torch_cpu() {  # a CPU build of torch into .venv, or one line saying why not
    if "$VPY" -c 'import torch' >/dev/null 2>&1; then
        prep_log "torch $("$VPY" -c 'import torch; print(torch.__version__)') already in $VENV (kept)"
        return 0
    fi
    if "$VPY" - "$TORCH_INDEX/torch/" <<'EOF' >/dev/null 2>&1; then
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=5).close()
EOF
        prep_log "installing torch==$TORCH_VERSION, CPU build, from $TORCH_INDEX"
        pip_q install -q --index-url "$TORCH_INDEX" "torch==$TORCH_VERSION"
        return 0
    fi
    # Which builds pip's own configured sources offer (a find-links folder, a local index): `pip index` reads
    # their listings only (a --dry-run resolve would download a 500 MB CUDA wheel just to look at it).
    prep_log "$TORCH_INDEX is not reachable; looking for torch==$TORCH_VERSION+cpu in pip's configured sources"
    local versions
    versions="$(pip_q index versions torch 2>/dev/null | sed -n 's/^Available versions: //p' || true)"
    if [[ ", $versions," != *", $TORCH_VERSION+cpu,"* ]]; then
        prep_die "no CPU build of torch==$TORCH_VERSION reachable (pip's sources offer no $TORCH_VERSION+cpu, only builds that may be CUDA ones of several GB). Set PREP_TORCH_INDEX to a mirror of https://download.pytorch.org/whl/cpu, or install the torch you want into $VENV ($VENV/bin/pip install torch==...) and rerun"
    fi
    prep_log "installing torch==$TORCH_VERSION+cpu from pip's configured sources"
    pip_q install -q "torch==$TORCH_VERSION+cpu"
}

if [[ $MODE == test ]]; then
    command -v ffmpeg >/dev/null 2>&1 || prep_apt ffmpeg
    prep_log "$(ffmpeg -version | head -1)"
    torch_cpu
    prep_log "installing prep (editable) with its test and bench extras into $VENV"
    pip_q install -q -e '.[test,bench]'
else
    prep_log "installing prep (editable) into $VENV"
    pip_q install -q -e .
    command -v ffmpeg >/dev/null 2>&1 \
        || prep_log "note: no ffmpeg program: only \`prep reencode --engine ffmpeg\` needs it (apt-get install ffmpeg)"
fi
"$VPY" -c "
import importlib.metadata as md
names = ['prep', 'av', 'dask', 'pyarrow', 'datasets'] + (['torch', 'pytest'] if '$MODE' == 'test' else [])
print('[setup] ' + ', '.join(f'{n} {md.version(n)}' for n in names))"
echo "$INSTALL_KEY" > "$VENV/.prep-setup-$MODE"
prep_log "ready: $VENV/bin/prep --help (or: source $VENV/bin/activate, then prep --help)"
