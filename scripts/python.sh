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
    # apt's output is kept aside and shown only when it fails (debconf's "delaying package configuration" is noise)
    local log
    log="$(mktemp "${TMPDIR:-/tmp}/prep-apt.XXXXXX")"
    if ! { "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq \
        && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"; } >"$log" 2>&1; then
        grep -v '^debconf: delaying' "$log" | tail -15 >&2
        rm -f "$log"
        prep_die "apt-get install $* failed (network: Debian's archive not reachable? disk full? the lines above say)"
    fi
    rm -f "$log"
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

# prep_need_space GB PATH WHAT: stop with one line when the file system holding PATH (or its nearest existing
# parent) has less than GB gigabytes free for WHAT (a large download and install). PREP_NEED_SPACE_SCALE
# (default 1) multiplies every figure (0 turns the checks off).
prep_need_space() {
    local gb=$1 path=$2 what=$3 d avail_kb need_kb
    d="$path"
    while [[ ! -e $d ]]; do d="$(dirname "$d")"; done
    need_kb=$(awk -v g="$gb" -v s="${PREP_NEED_SPACE_SCALE:-1}" 'BEGIN { printf "%d", g * s * 1048576 }')
    avail_kb=$(df -Pk "$d" | awk 'NR == 2 { print $4 }')
    if ((avail_kb < need_kb)); then
        prep_die "not enough free disk for $what: it needs ~$gb GB in $(cd "$d" && pwd -P), which has $(awk -v k="$avail_kb" 'BEGIN { printf "%.1f", k / 1048576 }') GB free (a full bash scripts/test.sh needs ~30 GB; docs/install.md says what takes it)"
    fi
}

# prep_pip_cause LOG [WHAT]: one line naming the package a failed pip run (its output in LOG) stopped at and
# the likely cause (network, disk, compiler/headers, no build for this Python); WHAT when no package is named.
prep_pip_cause() {
    local log=$1 what=${2:-the requested packages} pkg cause
    # the package: where pip says it failed, else the last one it was fetching
    pkg="$({ grep -oE "(Failed to build|Failed building wheel for|No matching distribution found for|satisfies the requirement|Getting requirements to build wheel for) [A-Za-z0-9_.-]+" "$log" | grep -v ' installable$' \
        || grep -oE "(Collecting|Downloading) [A-Za-z0-9_.+-]+" "$log"; } 2>/dev/null | tail -1 | awk '{ print $NF }')" || true
    if grep -qiE 'No space left on device|Errno 28|Disk quota exceeded' "$log"; then
        cause="the disk is full (No space left on device): free space (a full test run needs ~30 GB) or set TMPDIR/PIP_CACHE_DIR to a larger disk"
    elif grep -qiE 'CERTIFICATE_VERIFY_FAILED|SSLError|certificate verify failed' "$log"; then
        cause="network: TLS certificates not trusted (a proxy that intercepts TLS needs its CA in /usr/local/share/ca-certificates, then update-ca-certificates)"
    elif grep -qiE 'Failed to establish a new connection|Temporary failure in name resolution|Name or service not known|Network is unreachable|Connection (refused|reset)|Read timed out|ConnectTimeout|ProxyError|RemoteDisconnected|IncompleteRead|Max retries exceeded' "$log"; then
        cause="network: the package index was not reachable or the download broke off (check the connection, proxy settings, or pip's index configuration)"
    elif grep -qiE "command '[^']*(gcc|cc|c\+\+)' failed|gcc: (error|fatal)|Python\.h: No such file|fatal error: [^ ]+\.h: No such file|unable to execute '[^']*gcc|error: command .*not found|Microsoft Visual C|failed-wheel-build|Failed building wheel|Failed to build" "$log"; then
        cause="compiler: it is built from source and the build failed (needs a C compiler and Python's headers: apt-get install gcc python3-dev)"
    elif grep -qiE 'No matching distribution found|Could not find a version that satisfies|ResolutionImpossible|conflicting dependencies' "$log"; then
        cause="no build of it for this Python ($("${VPY:-${PY:-python3}}" -V 2>&1)) and platform on the package index, or conflicting pins"
    else
        cause="unknown (pip's last lines are above)"
    fi
    printf 'pip could not install %s: likely cause: %s\n' "${pkg:-$what}" "$cause"
}

# prep_pip PYTHON WHAT ARGS...: PYTHON -m pip ARGS, its output kept in a log and shown only on failure (the
# last lines), then one line of prep's own (prep_pip_cause) and exit 1.
prep_pip() {
    local py=$1 what=$2 log rc=0
    shift 2
    log="$(mktemp "${TMPDIR:-/tmp}/prep-pip.XXXXXX")"
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$py" -m pip "$@" >"$log" 2>&1 || rc=$?
    if ((rc != 0)); then
        grep -v 'is ignored: it is neither a file nor a directory' "$log" | tail -15 >&2
        local line
        line="$(prep_pip_cause "$log" "$what")"
        rm -f "$log"
        prep_die "$line"
    fi
    rm -f "$log"
}

# prep_hold_botocore PYTHON: prints the path of a pip constraints file holding the botocore that PYTHON's
# environment has (s3fs -> aiobotocore chose it when prep was installed). Given moto (the test extra) and s3fs in
# one resolve, pip pins the newest boto3 first, whose botocore no aiobotocore release allows, then backtracks
# through every aiobotocore, cfn-lint and aws-sam-translator release: over an hour against the package index
# (CI ran out of time in it) and, on this machine, a failed build of a 2015 package. Installing prep first and
# holding that botocore while the test extra is added makes it a ~10 s resolve (measured with pip 26.3).
# The file is under /tmp, which a reader venv in a Debian root sees too; the caller removes it.
prep_hold_botocore() {
    local file
    file="$(mktemp /tmp/prep-constraints.XXXXXX)"
    "$1" -c 'import importlib.metadata as m; print("botocore==" + m.version("botocore"))' >"$file" \
        || { rm -f "$file"; return 1; }
    echo "$file"
}
