# Sourced by scripts/setup.sh and .ci/lerobot_envs.sh: the one rule for which Python builds prep's
# virtual environments, and the Debian packages that make `python -m venv` work.
#
#   prep_python      sets PY to $PYTHON if set, else the python3 found on PATH (installing Debian's
#                    python3 when there is none and we may); refuses Python < 3.11 with one line;
#                    makes sure `$PY -m venv` works (installs Debian's python3.X-venv when missing).
#   prep_apt PKG...  apt-get install as root, or with sudo; one line and exit 1 when neither is possible.

prep_log() { printf '[%s] %s\n' "${PREP_LOG_TAG:-setup}" "$*"; }
prep_die() { printf '[%s] error: %s\n' "${PREP_LOG_TAG:-setup}" "$*" >&2; exit 1; }

prep_apt() {
    local sudo=()
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null 2>&1 || prep_die "need the Debian packages: $* (run as root, or install them: apt-get install $*)"
        sudo=(sudo)
    fi
    command -v apt-get >/dev/null 2>&1 || prep_die "need: $* (no apt-get on this machine: install them with its package manager)"
    prep_log "installing Debian packages: $*"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq \
        && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null \
        || prep_die "apt-get install $* failed"
}

prep_python() {
    PY="${PYTHON:-python3}"
    if ! command -v "$PY" >/dev/null 2>&1; then
        [[ -z "${PYTHON:-}" ]] || prep_die "PYTHON=$PYTHON: no such interpreter"
        prep_apt python3 python3-venv
    fi
    PY="$(command -v "$PY")"
    "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
        || prep_die "prep needs Python >= 3.11; $PY is $("$PY" -V 2>&1) (set PYTHON=/path/to/python3.11-or-newer)"
    if ! "$PY" -c 'import ensurepip, venv' >/dev/null 2>&1; then
        local ver
        ver="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
        case "$PY" in
            /usr/bin/*|/bin/*) prep_apt "python$ver-venv" ;;  # Debian/Ubuntu split venv+ensurepip off their Python
            *) prep_die "$PY cannot make virtual environments (no ensurepip/venv module); use another PYTHON" ;;
        esac
    fi
}
