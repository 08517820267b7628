#!/usr/bin/env bash
# Create the three virtual environments that hold the *real* LeRobot readers used by
# the compatibility tests in tests/compat/ (issues 8 and 25):
#
#   $PREP_VENVS/lerobot-v21  lerobot 0.3.3 (reads format v2.1) with openpi's pins:
#                            torch 2.7.1, torchvision 0.22.1, torchcodec 0.4.0, datasets 3.6.0
#   $PREP_VENVS/lerobot-v30  lerobot 0.4.4 (reads format v3.0), dependencies as pip resolves
#                            them for a plain `pip install lerobot==0.4.4` (torch < 2.11)
#   $PREP_VENVS/lerobot-v06  lerobot 0.6.1 (reads format v3.0): `lerobot[dataset]==0.6.1` as pip
#                            resolves it (torch < 2.12, torchcodec < 0.12, av 15.x from its av-dep extra).
#                            0.6.1 needs Python >= 3.12 and Debian 12 has 3.11, so this one lives in a
#                            Debian 13 (trixie) root made with `debootstrap --variant=minbase` from Debian's
#                            archive ($PREP_VENVS/debian13, Debian's python3.13 and FFmpeg inside): the venv is
#                            $PREP_VENVS/debian13/prep-readers/lerobot-v06 and $PREP_VENVS/lerobot-v06/bin/python
#                            is a launcher that runs it through `prep-chroot` (unshare --mount + chroot, root
#                            needed), with /tmp, the current folder and $PREP_CHROOT_BIND bound at the same paths.
#
# Each also gets this repository installed editable (with its test extras), so the
# tests can import `pipeline` and run `prep`. pip keeps no cache by default: the three pin three different
# torch builds (~3 GB of downloads each), so a shared cache would hold ~10 GB that no other venv reuses; set
# PIP_CACHE_DIR to keep one (it is then shared by the three, and bound into the Debian 13 root).
#
# Usage: bash .ci/lerobot_envs.sh [REPO_PATH]      (default: the repo holding this script)
#   PREP_VENVS=/opt/prep-venvs   where the venvs live; in a colon-separated list each env is kept where it
#                                already exists, a missing one is built in the first folder
#   LEROBOT_ENVS="v21 v30 v06"   which ones to build
#   PREP_DEBIAN_MIRROR=URL       Debian archive for the trixie root (default http://deb.debian.org/debian)
#
# Idempotent: an env whose stamp file matches the requested spec and whose lerobot
# imports at the right version is left alone (our package is reinstalled editable, with its
# dependencies, only when REPO_PATH or pyproject.toml changed).  Runs as root on a fresh Debian 12 machine: it
# apt-installs FFmpeg's shared libraries when missing (torchcodec loads them at import).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "${1:-$HERE/..}" && pwd)"
VENVS_PATH="${PREP_VENVS:-/opt/prep-venvs}"
VENVS="${VENVS_PATH%%:*}"  # a missing env is built in the first folder of the list
WANT="${LEROBOT_ENVS:-v21 v30 v06}"
if [[ -z ${PIP_CACHE_DIR:-} ]]; then export PIP_NO_CACHE_DIR=1; fi  # see above
# The interpreter: the same rule as scripts/setup.sh ($PYTHON, else python3 on PATH; >= 3.11; venv works).
PREP_LOG_TAG=lerobot-envs
# shellcheck source=scripts/python.sh
source "$HERE/../scripts/python.sh"

log() { printf '[lerobot-envs] %s\n' "$*"; }

# The specs.  Changing one changes the stamp, which triggers a rebuild of that env.
SPEC_v21="lerobot==0.3.3 torch==2.7.1 torchvision==0.22.1 torchcodec==0.4.0 datasets==3.6.0"
SPEC_v30="lerobot==0.4.4"
SPEC_v06="lerobot[dataset]==0.6.1"
LEROBOT_v21="0.3.3"
LEROBOT_v30="0.4.4"
LEROBOT_v06="0.6.1"
# Envs whose interpreter comes from the Debian 13 root (Python >= 3.12), and what that root holds.
CHROOT_ENVS=" v06 "
DEBIAN_ROOT="$VENVS/debian13"
DEBIAN_SUITE=trixie
DEBIAN_MIRROR="${PREP_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
DEBIAN_PKGS="python3.13,python3-venv,python3-dev,gcc,ffmpeg,ca-certificates"
VENVS_IN_ROOT=/prep-readers

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
    if ! "$v/bin/python" -m pip "$@" >"$v/.prep-pip.log" 2>&1; then
        grep -v 'is ignored' "$v/.prep-pip.log" | tail -40 >&2
        log "pip $* failed in $v"
        prep_pip_cause "$v/.prep-pip.log" "$*"  # one line: the package and the likely cause
        return 1
    fi
}

repo_stamp() { echo "$REPO $(sha256sum "$REPO/pyproject.toml" | cut -c1-16)"; }

install_prep() {  # install_prep VENV SPEC: lerobot's pins with prep editable, then prep's test extra
    # Each call names lerobot's pins, so our own dependencies never move them. prep goes in first without its
    # test extra, whose moto would otherwise send pip's resolver through every aiobotocore release; the botocore
    # it brought is then held (scripts/python.sh, prep_hold_botocore, says why).
    local v=$1 spec=$2 held rc=0
    # shellcheck disable=SC2086
    pip_q "$v" install -q $spec -e "$REPO" || return 1
    held="$(prep_hold_botocore "$v/bin/python")" || return 1
    # shellcheck disable=SC2086
    pip_q "$v" install -q $spec -e "$REPO[test]" -c "$held" || rc=1
    rm -f "$held"
    return "$rc"
}

sync_repo() {  # (re)install our package editable + its deps when the checkout or pyproject.toml changed
    local v=$1 spec=$2
    if [[ "$(cat "$v/.prep-repo" 2>/dev/null)" != "$(repo_stamp)" ]]; then
        log "$(basename "$v"): installing $REPO editable with its dependencies (lerobot pins kept)"
        # the distribution's former name, prep (an unrelated project on the package index), owns bin/prep too
        if "$v/bin/python" -c "import importlib.metadata as m, sys; sys.exit('pipeline' not in (m.distribution('prep').read_text('top_level.txt') or '').split())" 2>/dev/null; then
            pip_q "$v" uninstall -y prep
        fi
        # shellcheck disable=SC2086
        install_prep "$v" "$spec"
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
    local need=10  # the venv with its torch (CUDA build: ~7-9 GB installed) and pip's temporary files
    [[ $CHROOT_ENVS == *" $name "* && ! -x $DEBIAN_ROOT/usr/bin/python3.13 ]] && need=11  # + the Debian 13 root
    prep_need_space "$need" "$VENVS" "the lerobot ${!ver_var} reader venv ($(basename "$v"), a CUDA torch build)"
    log "building $v: ${!spec_var} + lerobot-prep[test] (this downloads torch; minutes)"
    local t0=$SECONDS
    rm -rf "$v"
    mkdir -p "$VENVS"
    if [[ $CHROOT_ENVS == *" $name "* ]]; then
        ensure_debian_root
        rm -rf "${DEBIAN_ROOT:?}$VENVS_IN_ROOT/lerobot-$name"
        (cd "$REPO" && "$DEBIAN_ROOT/prep-chroot" python3.13 -m venv "$VENVS_IN_ROOT/lerobot-$name")
        make_launcher "$name"
    else
        "$PY" -m venv "$v"
    fi
    pip_q "$v" install -q --upgrade pip
    install_prep "$v" "${!spec_var}"
    echo "${!spec_var}" > "$v/.prep-stamp"
    repo_stamp > "$v/.prep-repo"
    env_ok "$name" || { log "lerobot ${!ver_var} did not import in $v"; exit 1; }
    local where="$v"
    [[ $CHROOT_ENVS == *" $name "* ]] && where="$DEBIAN_ROOT$VENVS_IN_ROOT/lerobot-$name"
    log "lerobot ${!ver_var} installed in $v in $((SECONDS - t0)) s, $(du -sh "$where" | cut -f1)"
}

# ---------------------------------------------------------------- the Debian 13 root (lerobot >= 0.6)

ensure_debian_root() {  # a trixie root with Debian's python3.13, venv, FFmpeg; and its prep-chroot tool
    if [[ -x "$DEBIAN_ROOT/usr/bin/python3.13" && "$(cat "$DEBIAN_ROOT/.prep-root" 2>/dev/null)" == "$DEBIAN_PKGS" ]]; then
        write_chroot_tool
        sync_ca_certs
        return 0
    fi
    [[ $(id -u) -eq 0 ]] || { log "the Debian 13 root needs root (debootstrap, chroot)"; exit 1; }
    command -v debootstrap >/dev/null 2>&1 || prep_apt debootstrap
    log "debootstrap --variant=minbase $DEBIAN_SUITE $DEBIAN_ROOT from $DEBIAN_MIRROR (python3.13, FFmpeg; minutes)"
    local t0=$SECONDS
    rm -rf "$DEBIAN_ROOT"
    mkdir -p "$DEBIAN_ROOT"
    debootstrap --variant=minbase --include="$DEBIAN_PKGS" "$DEBIAN_SUITE" "$DEBIAN_ROOT" "$DEBIAN_MIRROR" \
        >"$VENVS/.prep-debootstrap.log" 2>&1 \
        || { tail -20 "$VENVS/.prep-debootstrap.log" >&2; log "debootstrap failed"; exit 1; }
    rm -f "$DEBIAN_ROOT/var/cache/apt/archives/"*.deb
    echo "$DEBIAN_PKGS" > "$DEBIAN_ROOT/.prep-root"
    write_chroot_tool
    sync_ca_certs
    log "Debian 13 root ready in $((SECONDS - t0)) s: $(cd "$REPO" && "$DEBIAN_ROOT/prep-chroot" python3.13 -V 2>&1)"
}

sync_ca_certs() {  # the CA certificates this machine adds to Debian's (/usr/local/share/ca-certificates)
    # hold inside the root too: where the egress intercepts TLS, pip inside the root trusts what pip here
    # trusts (pip's `cert` setting, copied below, names the root's own bundle). Idempotent.
    local crt dst changed=0
    for crt in /usr/local/share/ca-certificates/*.crt; do
        [[ -f $crt ]] || continue
        dst="$DEBIAN_ROOT/usr/local/share/ca-certificates/$(basename "$crt")"
        if ! cmp -s "$crt" "$dst"; then
            mkdir -p "$(dirname "$dst")"
            cp -f "$crt" "$dst"
            changed=1
        fi
    done
    if [[ $changed == 1 || ! -s $DEBIAN_ROOT/etc/ssl/certs/ca-certificates.crt ]]; then
        # TMPDIR as the root sees it: a TMPDIR of this machine (/tmp/x) is not there, and its mktemp fails
        TMPDIR=/tmp chroot "$DEBIAN_ROOT" /usr/sbin/update-ca-certificates >/dev/null 2>&1 \
            || { log "update-ca-certificates failed in $DEBIAN_ROOT"; exit 1; }
        log "Debian 13 root trusts this machine's CA certificates: $(cd /usr/local/share/ca-certificates && ls -- *.crt 2>/dev/null | paste -sd' ' -)"
    fi
}

write_chroot_tool() {  # $DEBIAN_ROOT/prep-chroot CMD...: CMD inside the root, this machine's folders bound
    mkdir -p "$DEBIAN_ROOT$VENVS_IN_ROOT"
    # pip's configuration on this machine (a local index or wheel folder) holds inside the root too.
    local conf
    for conf in /etc/pip.conf /etc/xdg/pip/pip.conf /etc/xdg/pip/constraints.txt; do
        if [[ -f $conf ]]; then mkdir -p "$DEBIAN_ROOT$(dirname "$conf")"; cp -f "$conf" "$DEBIAN_ROOT$conf"; fi
    done
    {
        cat <<HEAD
#!/bin/bash
# Run a command inside the Debian 13 root $DEBIAN_ROOT (made by prep's .ci/lerobot_envs.sh):
#   prep-chroot CMD [ARG...]
# In a private mount namespace (unshare --mount): binds /proc, /dev, /dev/shm, /sys, /tmp, the current
# folder and each folder of \$PREP_CHROOT_BIND (colon-separated) at the same paths inside the root, then
# chroot, cd to the current folder and exec CMD with this environment (PATH reset to the system folders;
# LD_*/PYTHONHOME dropped). The mounts live only in that namespace: they vanish when CMD ends, fails or is
# killed, and nothing is mounted on this machine.
set -euo pipefail
ROOT=$DEBIAN_ROOT
VENVS_IN_ROOT=$VENVS_IN_ROOT
HEAD
        cat <<'BODY'
if [[ "${1:-}" != --prep-in-namespace ]]; then
    if [[ $(id -u) -ne 0 ]]; then echo "prep-chroot: needs root (unshare --mount, chroot)" >&2; exit 1; fi
    exec unshare --mount --propagation private -- "$0" --prep-in-namespace "$@"
fi
shift
cwd="$(pwd -P)"
bind() {  # bind DIR: DIR at the same path inside the root (skipped: missing, /, or hiding the venvs)
    local d=$1
    [[ -d $d && $d == /* && $d != / ]] || return 0
    d="$(cd "$d" && pwd -P)"
    case "$VENVS_IN_ROOT/" in "$d"/*) return 0 ;; esac
    case "$d/" in "$ROOT"/*) return 0 ;; esac
    mkdir -p "$ROOT$d"
    mount --bind "$d" "$ROOT$d"
}
mount -t proc proc "$ROOT/proc"
bind /dev
bind /dev/shm
bind /sys
bind /tmp
if [[ -f /etc/resolv.conf ]]; then
    touch "$ROOT/etc/resolv.conf"
    mount --bind "$(readlink -f /etc/resolv.conf)" "$ROOT/etc/resolv.conf"
fi
bind "$cwd"
IFS=: read -ra extra <<<"${PREP_CHROOT_BIND:-}"
for d in "${extra[@]}"; do bind "$d"; done
unset LD_LIBRARY_PATH LD_PRELOAD PYTHONHOME PYTHONSTARTUP
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
exec chroot "$ROOT" /bin/sh -c 'cd "$1" && shift && exec "$@"' prep-chroot "$cwd" "$@"
BODY
    } > "$DEBIAN_ROOT/prep-chroot.tmp"
    chmod 755 "$DEBIAN_ROOT/prep-chroot.tmp"
    mv -f "$DEBIAN_ROOT/prep-chroot.tmp" "$DEBIAN_ROOT/prep-chroot"
}

make_launcher() {  # $VENVS/lerobot-NAME/bin/python: the root's venv python, run through prep-chroot
    local name=$1 v="$VENVS/lerobot-$1"
    mkdir -p "$v/bin"
    cat > "$v/bin/python.tmp" <<LAUNCHER
#!/bin/sh
# lerobot-$name lives in the Debian 13 root $DEBIAN_ROOT (Debian's python3.13; made by prep's
# .ci/lerobot_envs.sh): run its python there (the current folder, /tmp and \$PREP_CHROOT_BIND are visible).
exec $DEBIAN_ROOT/prep-chroot $VENVS_IN_ROOT/lerobot-$name/bin/python "\$@"
LAUNCHER
    chmod 755 "$v/bin/python.tmp"
    mv -f "$v/bin/python.tmp" "$v/bin/python"
    echo "$DEBIAN_ROOT" > "$v/.prep-root"
}

pip_binds() {  # folders pip's configuration names (a local index, wheel folder, constraints), colon-separated
    pip config list 2>/dev/null | grep -oE "(file://)?/[^' ]+" | sed 's|^file://||' | while read -r p; do
        if [[ -d $p ]]; then echo "$p"; elif [[ -e $p ]]; then dirname "$p"; fi
    done | sort -u | paste -sd: -
}

ensure_system_deps
prep_python
# pip and prep's editable install inside the root see the checkout, pip's cache (when kept) and local sources.
[[ -n ${PIP_CACHE_DIR:-} ]] && mkdir -p "$PIP_CACHE_DIR"
export PREP_CHROOT_BIND="$REPO${PIP_CACHE_DIR:+:$PIP_CACHE_DIR}:$(pip_binds)${PREP_CHROOT_BIND:+:$PREP_CHROOT_BIND}"
cd "$REPO"  # the launchers bind the current folder
log "interpreter: $PY ($("$PY" -V 2>&1))"
venvs_of() {  # venvs_of NAME: the first folder of the list holding lerobot-NAME, else the first folder
    local d
    IFS=: read -ra dirs <<<"$VENVS_PATH"
    for d in "${dirs[@]}"; do [[ -x "$d/lerobot-$1/bin/python" ]] && { echo "$d"; return; }; done
    echo "${dirs[0]}"
}

for name in $WANT; do
    VENVS="$(venvs_of "$name")"
    DEBIAN_ROOT="$VENVS/debian13"
    build_env "$name"
    "$VENVS/lerobot-$name/bin/python" - <<'EOF'
import importlib.metadata as md
print("[lerobot-envs]   " + ", ".join(
    f"{p} {md.version(p)}" for p in ("lerobot", "torch", "torchvision", "torchcodec", "datasets", "av")))
EOF
done
