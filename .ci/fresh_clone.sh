#!/usr/bin/env bash
# The README's first command as a new user meets it on plain Debian: a fresh clone of HEAD (nothing of
# this checkout's .venv or ignored files), run with PATH reduced to a fresh Debian's system folders, so the
# python3 found is Debian's own /usr/bin/python3 (externally managed, PEP 668), not a private build.
#
#   bash .ci/fresh_clone.sh [DEMO_ARGS...]      (default demo arguments: --episodes 2 --no-progress)
#
# Checks: scripts/demo.sh exits 0; its .venv is built on that python3; the demo installed no torch.
# The environment is emptied (env -i) but for HOME (pip's cache and this machine's registry settings),
# proxy and certificate settings, and PIP_* (the registry configuration of this workplace's machines).
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
SYSPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ARGS=("$@")
((${#ARGS[@]})) || ARGS=(--episodes 2 --no-progress)
log() { printf '[fresh-clone] %s\n' "$*"; }

TMP="$(mktemp -d /tmp/prep-fresh.XXXXXX)"
trap 'rm -rf "$TMP"' EXIT
if git -C "$REPO" rev-parse --verify -q HEAD >/dev/null 2>&1; then
    git clone -q "$REPO" "$TMP/prep"
    log "cloned $REPO at $(git -C "$TMP/prep" rev-parse --short HEAD) into $TMP/prep"
else  # not a git checkout: copy it, leaving what a clone would not have
    mkdir "$TMP/prep"
    tar -C "$REPO" --exclude=./.venv --exclude='./.venv-*' --exclude=./build --exclude='*.egg-info' \
        --exclude=__pycache__ -cf - . | tar -C "$TMP/prep" -xf -
    log "copied $REPO (not a git checkout) into $TMP/prep"
fi

keep=(HOME="$HOME" PATH="$SYSPATH" LANG=C.UTF-8 TERM=dumb)
while IFS='=' read -r name value; do
    case "$name" in
        http_proxy|https_proxy|no_proxy|HTTP_PROXY|HTTPS_PROXY|NO_PROXY|SSL_CERT_FILE|SSL_CERT_DIR|REQUESTS_CA_BUNDLE|PIP_*)
            keep+=("$name=$value") ;;
    esac
done < <(env)
fresh() { (cd "$TMP/prep" && env -i "${keep[@]}" "$@"); }

py="$(fresh bash -c 'command -v python3')" || { log "no python3 on $SYSPATH"; exit 1; }
log "python3 on the system PATH: $py, $(fresh python3 -V 2>&1), $(fresh python3 -c '
import os, sysconfig
marker = os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")
print("externally managed (PEP 668)" if os.path.exists(marker) else "not externally managed")')"
if [[ -n "${PYTHON:-}" ]]; then keep+=(PYTHON="$PYTHON"); log "PYTHON=$PYTHON"; fi

log "bash scripts/demo.sh ${ARGS[*]}"
t0=$SECONDS
fresh bash scripts/demo.sh "${ARGS[@]}"
log "demo.sh passed in $((SECONDS - t0)) s"

base="$(fresh .venv/bin/python -c 'import sys; print(sys._base_executable)')"
log ".venv made by $base; $(fresh .venv/bin/prep --version)"
if fresh .venv/bin/python -c 'import torch' >/dev/null 2>&1; then
    log "FAILED: the demo's setup installed torch"; exit 1
fi
log "no torch in .venv (the demo needs none)"
