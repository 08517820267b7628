#!/usr/bin/env bash
# Create the two virtual environments that hold the *real* LeRobot readers used by
# the compatibility tests in tests/compat/ (issue 8):
#
#   $PREP_VENVS/lerobot-v21  lerobot 0.3.3 (reads format v2.1) with openpi's pins:
#                            torch 2.7.1, torchvision 0.22.1, torchcodec 0.4.0, datasets 3.6.0
#   $PREP_VENVS/lerobot-v30  lerobot 0.4.4 (reads format v3.0), dependencies as pip resolves
#                            them for a plain `pip install lerobot==0.4.4` (torch < 2.11)
#
# Each also gets this repository installed editable (with its test extras), so the
# tests can import `pipeline` and run `prep`.
#
# Usage: bash .ci/lerobot_envs.sh [REPO_PATH]      (default: the repo holding this script)
#   PREP_VENVS=/opt/prep-venvs   where the venvs live
#   LEROBOT_ENVS="v21 v30"       which ones to build
#
# Idempotent: an env whose stamp file matches the requested spec and whose lerobot
# imports at the right version is left alone (our package is reinstalled editable, with its
# dependencies, only when REPO_PATH or pyproject.toml changed).  Runs as root on a fresh Debian 12 machine: it
# apt-installs FFmpeg's shared libraries when missing (torchcodec loads them at import).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "${1:-$HERE/..}" && pwd)"
VENVS="${PREP_VENVS:-/opt/prep-venvs}"
WANT="${LEROBOT_ENVS:-v21 v30}"
# The interpreter: the same rule as scripts/setup.sh ($PYTHON, else python3 on PATH; >= 3.11; venv works).
PREP_LOG_TAG=lerobot-envs
# shellcheck source=scripts/python.sh
source "$HERE/../scripts/python.sh"

log() { printf '[lerobot-envs] %s\n' "$*"; }

# The specs.  Changing one changes the stamp, which triggers a rebuild of that env.
SPEC_v21="lerobot==0.3.3 torch==2.7.1 torchvision==0.22.1 torchcodec==0.4.0 datasets==3.6.0"
SPEC_v30="lerobot==0.4.4"
LEROBOT_v21="0.3.3"
LEROBOT_v30="0.4.4"

ensure_system_deps() {
    # torchcodec dlopens FFmpeg's libavutil/libavcodec/libavformat (FFmpeg 4-7 supported);
    # PyAV bundles its own FFmpeg.  (prep_python, below, sees to python3-venv.)
    local need=()
    if ! ldconfig -p | grep -q 'libavcodec\.so\.'; then need+=(ffmpeg); fi
    if ((${#need[@]})); then
        if [[ $(id -u) -ne 0 ]]; then
            log "missing system packages: ${need[*]} (run as root or install them)"; exit 1
        fi
        log "apt-get install ${need[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    fi
}

env_ok() {  # env_ok NAME -> 0 when the venv is complete for its spec
    local name=$1 v="$VENVS/lerobot-$1" spec_var="SPEC_$1" ver_var="LEROBOT_$1"
    [[ -x "$v/bin/python" && -f "$v/.prep-stamp" ]] || return 1
    [[ "$(cat "$v/.prep-stamp")" == "${!spec_var}" ]] || return 1
    "$v/bin/python" - "${!ver_var}" <<'EOF' >/dev/null 2>&1 || return 1
import sys, importlib.metadata as md
import lerobot.datasets.lerobot_dataset  # noqa: F401  (imports torch, datasets, video utils)
assert md.version("lerobot") == sys.argv[1], md.version("lerobot")
EOF
}

pip_q() {  # pip in venv $1, its chatter kept in $1/.prep-pip.log and shown only when it fails
    local v=$1; shift
    if ! "$v/bin/pip" "$@" >"$v/.prep-pip.log" 2>&1; then
        grep -v 'is ignored' "$v/.prep-pip.log" | tail -40 >&2
        log "pip $* failed in $v"
        return 1
    fi
}

repo_stamp() { echo "$REPO $(sha256sum "$REPO/pyproject.toml" | cut -c1-16)"; }

sync_repo() {  # (re)install our package editable + its deps when the checkout or pyproject.toml changed
    local v=$1 spec=$2
    if [[ "$(cat "$v/.prep-repo" 2>/dev/null)" != "$(repo_stamp)" ]]; then
        log "$(basename "$v"): installing $REPO editable with its dependencies (lerobot pins kept)"
        # shellcheck disable=SC2086
        pip_q "$v" install -q --no-cache-dir $spec -e "$REPO[test]"
        repo_stamp > "$v/.prep-repo"
    fi
}

build_env() {
    local name=$1 v="$VENVS/lerobot-$1" spec_var="SPEC_$1" ver_var="LEROBOT_$1"
    if env_ok "$name"; then
        sync_repo "$v" "${!spec_var}"
        log "lerobot ${!ver_var} installed (already) in $v"
        return 0
    fi
    log "building $v: ${!spec_var} + prep[test] (this downloads torch; minutes)"
    local t0=$SECONDS
    rm -rf "$v"
    mkdir -p "$VENVS"
    "$PY" -m venv "$v"
    pip_q "$v" install -q --no-cache-dir --upgrade pip
    # One resolver call so that our own dependencies never move lerobot's pins.
    # shellcheck disable=SC2086
    pip_q "$v" install -q --no-cache-dir ${!spec_var} -e "$REPO[test]"
    echo "${!spec_var}" > "$v/.prep-stamp"
    repo_stamp > "$v/.prep-repo"
    env_ok "$name" || { log "lerobot ${!ver_var} did not import in $v"; exit 1; }
    log "lerobot ${!ver_var} installed in $v in $((SECONDS - t0)) s, $(du -sh "$v" | cut -f1)"
}

ensure_system_deps
prep_python
log "interpreter: $PY ($("$PY" -V 2>&1))"
for name in $WANT; do
    build_env "$name"
    "$VENVS/lerobot-$name/bin/python" - <<'EOF'
import importlib.metadata as md
print("[lerobot-envs]   " + ", ".join(
    f"{p} {md.version(p)}" for p in ("lerobot", "torch", "torchvision", "torchcodec", "datasets", "av")))
EOF
done
