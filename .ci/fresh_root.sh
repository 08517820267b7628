#!/usr/bin/env bash
# The README's two commands on a brand-new Debian 12, as a new user meets them (issue 27): a fresh
# `debootstrap --variant=minbase bookworm` root from Debian's archive, given nothing of this machine but its
# CA certificates (the egress may intercept TLS) and with only git and ca-certificates installed; the project
# copied in as a `git clone` of this checkout (HEAD: uncommitted changes are not in it); then, inside it, as
# root in the clone, with an emptied environment (no PIP_*, no pip configuration, no pyenv, no local wheels):
#
#     bash scripts/demo.sh
#     bash scripts/test.sh
#
# exactly as the README writes them, each timed. This machine runs nothing else (no pip, no Python of ours).
#
#   bash .ci/fresh_root.sh [--keep] [--summary FILE]        (as root; .ci/run calls it)
#     --keep          leave the root (and its venvs) in place afterwards, for a look; default: removed
#     --summary FILE  also write the run's summary (times, exit codes, what the root was given) as JSON
#     --command CMD   run CMD (in the clone) instead of the two commands; repeatable (to try the mechanics)
#   PREP_CI_WORK=/var/tmp          where the root is made (needs PREP_CI_NEED_GB free)
#   PREP_CI_CACHE=/var/cache/prep-ci   the pristine root's cache; "none": debootstrap every run
#   PREP_CI_CACHE_DAYS=7           a cached root older than this is made again (Debian's archive moves on)
#   PREP_CI_NEED_GB=35             free disk required to start (the full test run's venvs and tests: ~30 GB)
#   PREP_CI_MIN_FREE_GB=3          the run is stopped when free disk falls below this (a shared machine is
#                                  never filled up)
#   PREP_DEBIAN_MIRROR=http://deb.debian.org/debian
#
# The cache: right after debootstrap, before anything runs in it, the root is packed into a tarball whose
# sha256 is recorded beside it; a later run uses it only when the tarball still has that sha256 (and is not
# older than PREP_CI_CACHE_DAYS), unpacking it into a new folder. A root a run has touched is never reused:
# each run's root is deleted at its end (mounts checked gone first).
#
# Mounts: the commands run in a private mount namespace (unshare --mount) holding /proc, /dev (rbind), /sys
# and /dev/shm of the root, and /sys/fs/cgroup (rbind: slurmd 22.05, which tests/test_slurm.py starts, refuses
# to run without a cgroup filesystem): they vanish with the namespace, whatever happens; after each command
# and at exit every process still running in the root (a test's SLURM daemons) is stopped, and the EXIT trap
# unmounts anything left under the root and refuses to delete the root while something is still mounted in it.
set -euo pipefail
{  # the whole script is read before it runs: editing the checkout during a run cannot change the run
REPO="$(cd "$(dirname "$0")/.." && pwd)"
KEEP=0
SUMMARY=""
OWN=()
while (($#)); do
    case "$1" in
        --keep) KEEP=1 ;;
        --summary) SUMMARY="$(realpath -m "${2:?--summary FILE}")"; shift ;;
        --command) OWN+=("${2:?--command CMD}"); shift ;;
        *) echo "usage: .ci/fresh_root.sh [--keep] [--summary FILE] [--command CMD]..." >&2; exit 2 ;;
    esac
    shift
done
SUITE=bookworm
VARIANT=minbase
INCLUDE=git,ca-certificates
MIRROR="${PREP_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
WORK="${PREP_CI_WORK:-/var/tmp}"
CACHE="${PREP_CI_CACHE:-/var/cache/prep-ci}"
CACHE_DAYS="${PREP_CI_CACHE_DAYS:-7}"
NEED_GB="${PREP_CI_NEED_GB:-35}"
MIN_FREE_GB="${PREP_CI_MIN_FREE_GB:-3}"
RHOME=/root  # root's home inside the fresh root; the clone is $RHOME/prep
SYSPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
COMMANDS=("bash scripts/demo.sh" "bash scripts/test.sh")  # the README's two commands, as written there
((${#OWN[@]})) && COMMANDS=("${OWN[@]}")

log() { printf '[fresh-root %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
die() { log "error: $*"; exit 1; }

[[ $(id -u) -eq 0 ]] || die "needs root (debootstrap, chroot, mounts)"
[[ $(uname -s) == Linux ]] || die "needs Linux"
if ! command -v debootstrap >/dev/null 2>&1; then
    log "installing debootstrap (apt-get, from Debian's archive)"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi
git -C "$REPO" rev-parse --verify -q HEAD >/dev/null || die "$REPO is not a git checkout (the root gets a clone)"
[[ -z "$(git -C "$REPO" status --porcelain --untracked-files=no)" ]] \
    || log "note: $REPO has uncommitted changes; the root gets a clone of HEAD, without them"

free_gb() { df -Pk "$1" | awk 'NR == 2 { printf "%.1f", $4 / 1048576 }'; }
mkdir -p "$WORK"
awk -v f="$(free_gb "$WORK")" -v n="$NEED_GB" 'BEGIN { exit !(f >= n) }' \
    || die "needs ~$NEED_GB GB free in $WORK for the full run (project venv with the package index's torch ~5.4 GB, three LeRobot reader venvs and the Debian 13 root ~22 GB, the tests); $(free_gb "$WORK") GB free there (PREP_CI_WORK=another disk, or PREP_CI_NEED_GB)"

W="$(mktemp -d "$WORK/prep-ci.XXXXXX")"
ROOT="$W/root"
RUN_PID=""
WATCH_PID=""

mounts_under() {  # mount points at or below $1 in this mount namespace, deepest first
    awk -v r="$1" '{ gsub(/\\040/, " ", $5); if ($5 == r || index($5, r "/") == 1) print $5 }' /proc/self/mountinfo | sort -r
}
root_pids() {  # processes whose root directory is the fresh root (chrooted there), by pid
    local p r
    for p in /proc/[0-9]*; do
        r="$(readlink "$p/root" 2>/dev/null)" || continue
        if [[ $r == "$ROOT" || $r == "$ROOT"/* ]]; then printf '%s\n' "${p#/proc/}"; fi
    done
    return 0
}
stop_root_processes() {  # daemons a command left running in the root (a test's munged, slurmctld, slurmd, slurmstepd):
    local pids p  # they live in its mount namespace and keep its mounts; TERM, then KILL (slurmstepd ignores TERM)
    pids="$(root_pids)"
    [[ -n $pids ]] || return 0
    log "stopping what still runs in the root: $(for p in $pids; do printf '%s(%s) ' "$p" "$(cat "/proc/$p/comm" 2>/dev/null)"; done)"
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null || true
    for _ in 1 2 3 4 5 6 7 8 9 10; do [[ -z "$(root_pids)" ]] && return 0; sleep 0.5; done
    pids="$(root_pids)"
    # shellcheck disable=SC2086
    [[ -z $pids ]] || kill -KILL $pids 2>/dev/null || true
}
cleanup() {
    local rc=$?
    trap '' PIPE  # the log's reader may be gone (a signal to the whole group): a failed write must not stop the clean-up
    [[ -n $WATCH_PID ]] && kill "$WATCH_PID" 2>/dev/null
    [[ -n $RUN_PID ]] && kill -TERM -- "-$RUN_PID" 2>/dev/null
    stop_root_processes || true
    local m
    for m in $(mounts_under "$ROOT"); do umount -l "$m" 2>/dev/null || true; done
    if [[ -n "$(mounts_under "$ROOT")" ]]; then
        log "still mounted under $ROOT: $(mounts_under "$ROOT" | paste -sd' '); NOT deleting $W (unmount, then rm -rf it)"
    elif ((KEEP)); then
        log "kept: $ROOT (delete it with: rm -rf $W)"
    else
        rm -rf "$W"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ------------------------------------------------------------------------------------ a pristine root
KEY="$(printf '%s\n' "$SUITE" "$VARIANT" "$INCLUDE" "$MIRROR" "$(dpkg --print-architecture)" | sha256sum | cut -c1-12)"
TARBALL="$CACHE/$SUITE-$VARIANT-$KEY.tar"
ROOT_FROM=""
t_root=$SECONDS
mkdir -p "$ROOT"
if [[ $CACHE != none && -f $TARBALL && -f $TARBALL.sha256 ]]; then
    age_days=$(( ($(date +%s) - $(stat -c %Y "$TARBALL.sha256")) / 86400 ))
    if ((age_days >= CACHE_DAYS)); then
        log "cached root $TARBALL is $age_days days old (>= $CACHE_DAYS): making a new one"
    elif (cd "$CACHE" && sha256sum --quiet -c "$TARBALL.sha256") >/dev/null 2>&1; then
        tar --numeric-owner -xpf "$TARBALL" -C "$ROOT"
        ROOT_FROM="cache: $TARBALL (sha256 $(cut -c1-16 "$TARBALL.sha256")... as recorded at its creation, $(sed -n 's/^created //p' "$TARBALL.info" 2>/dev/null))"
        log "root unpacked from the pristine cache in $((SECONDS - t_root)) s ($ROOT_FROM)"
    else
        log "cached root $TARBALL does not match its recorded sha256: not used (removed)"
        rm -f "$TARBALL" "$TARBALL.sha256" "$TARBALL.info"
    fi
fi
if [[ -z $ROOT_FROM ]]; then
    log "debootstrap --variant=$VARIANT --include=$INCLUDE $SUITE from $MIRROR (minutes)"
    debootstrap --variant="$VARIANT" --include="$INCLUDE" "$SUITE" "$ROOT" "$MIRROR" >"$W/debootstrap.log" 2>&1 \
        || { tail -20 "$W/debootstrap.log"; die "debootstrap failed (log above)"; }
    rm -f "$ROOT/var/cache/apt/archives/"*.deb
    ROOT_FROM="debootstrap --variant=$VARIANT --include=$INCLUDE $SUITE $MIRROR"
    log "root made in $((SECONDS - t_root)) s"
    if [[ $CACHE != none ]]; then  # packed now, before anything runs in it
        mkdir -p "$CACHE" && chmod 700 "$CACHE"
        tar --numeric-owner -cpf "$TARBALL.tmp" -C "$ROOT" .
        mv -f "$TARBALL.tmp" "$TARBALL"
        (cd "$CACHE" && sha256sum "$(basename "$TARBALL")") > "$TARBALL.sha256"
        printf 'created %s\ncommand %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$ROOT_FROM" > "$TARBALL.info"
        log "cached pristine root: $TARBALL ($(du -h "$TARBALL" | cut -f1), sha256 recorded)"
    fi
fi

# ------------------------------------------------------------------------------------ what it is given
GIVEN=()
for crt in /usr/local/share/ca-certificates/*.crt; do  # the CA certificates this machine adds to Debian's
    [[ -f $crt ]] || continue
    cp "$crt" "$ROOT/usr/local/share/ca-certificates/"
    GIVEN+=("CA certificate $(basename "$crt") ($(openssl x509 -noout -subject -in "$crt" 2>/dev/null | sed 's/^subject=//' || echo '?'))")
done
DNS="the machine's DNS settings (/etc/resolv.conf, as debootstrap copies it)"
[[ -s $ROOT/etc/resolv.conf ]] || { cp /etc/resolv.conf "$ROOT/etc/resolv.conf"; DNS="the machine's DNS settings (/etc/resolv.conf)"; }
chroot "$ROOT" /usr/sbin/update-ca-certificates >/dev/null 2>&1 || die "update-ca-certificates failed in the root"
git clone -q "$REPO" "$ROOT$RHOME/prep"
git -C "$ROOT$RHOME/prep" remote remove origin
COMMIT="$(git -C "$ROOT$RHOME/prep" rev-parse --short HEAD)"
log "root given: $(printf '%s; ' "${GIVEN[@]}")$DNS; the project: git clone of $REPO at $COMMIT in $RHOME/prep"

# What the root does NOT have: pip configuration, Python, pyenv, local wheels.
for f in /etc/pip.conf /etc/xdg/pip "$RHOME/.config/pip" "$RHOME/.pip" "$RHOME/.pyenv" "$RHOME/.cache" /usr/bin/python3; do
    [[ ! -e $ROOT$f ]] || die "the fresh root has $f"
done
[[ -z "$(ls -A "$ROOT/opt")" ]] || die "the fresh root's /opt is not empty"
PKGS_BEFORE="$(chroot "$ROOT" dpkg-query -W -f '${Status}\n' | grep -c 'install ok installed')"
log "root checked: no pip configuration, no python3, no pyenv, no local wheels; $PKGS_BEFORE Debian packages"

# ------------------------------------------------------------------------------------ the two commands
# In the root: a private mount namespace (/proc, /dev, /sys, /dev/shm of the root), chroot, an emptied
# environment (HOME, PATH of a fresh Debian, LANG, TERM only), default signal dispositions (a CI runner's,
# whatever started this script), cd to the clone, then the command through bash -c.
inside() {
    env -i --default-signal PATH="$SYSPATH" unshare --mount --propagation private -- /bin/bash -c '
        set -e
        R=$1; H=$2; shift 2
        mount --bind "$R" "$R"  # its / a mount point, as on a machine (unshare --propagation in it needs one)
        mount -t proc proc "$R/proc"
        mount --rbind /dev "$R/dev"
        mount -t sysfs sysfs "$R/sys"
        # slurmd (tests/test_slurm.py) refuses to start without a cgroup filesystem, even with proctrack/linuxproc
        [[ -d /sys/fs/cgroup && -d "$R/sys/fs/cgroup" ]] && mount --rbind /sys/fs/cgroup "$R/sys/fs/cgroup"
        exec chroot "$R" /usr/bin/env -i HOME="$H" USER=root LOGNAME=root SHELL=/bin/bash \
            PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 TERM=dumb \
            /bin/bash -c "cd ~/prep && $*"' inside "$ROOT" "$RHOME" "$@"
}
inside 'env | grep -q "^PIP_" && exit 1; test ! -e /etc/pip.conf' || die "PIP_* or pip configuration inside the root"

watchdog() {  # stop the run (its process group) when free disk falls below MIN_FREE_GB
    while sleep 20; do
        if ! awk -v f="$(free_gb "$W")" -v n="$MIN_FREE_GB" 'BEGIN { exit !(f >= n) }'; then
            log "STOPPING: $(free_gb "$W") GB free on the disk of $W (< $MIN_FREE_GB GB, PREP_CI_MIN_FREE_GB): the run is stopped so that this machine's disk is not filled; $(du -sh "$ROOT" 2>/dev/null | cut -f1) in the root"
            echo disk > "$W/stopped"
            kill -TERM -- "-$1" 2>/dev/null
            return 0
        fi
    done
}

declare -A SECS RCS
overall=0
for cmd in "${COMMANDS[@]}"; do
    log "\$ $cmd      (in the fresh root, $RHOME/prep)"
    t0=$SECONDS
    # each line of its output stamped with the time (this machine's clock): the stages' times in the CI log
    setsid --wait bash -c "$(declare -f inside); SYSPATH='$SYSPATH'; ROOT='$ROOT'; RHOME='$RHOME'; set -o pipefail
        inside \"\$1\" 2>&1 | while IFS= read -r line || [[ -n \$line ]]; do printf '%(%H:%M:%S)T %s\n' -1 \"\$line\"; done" inside "$cmd" &
    RUN_PID=$!
    watchdog "$RUN_PID" &
    WATCH_PID=$!
    rc=0
    wait "$RUN_PID" || rc=$?
    kill "$WATCH_PID" 2>/dev/null; wait "$WATCH_PID" 2>/dev/null || true
    RUN_PID=""; WATCH_PID=""
    stop_root_processes  # the tests stop their SLURM daemons themselves; whatever a killed test left, here
    SECS[$cmd]=$((SECONDS - t0))
    RCS[$cmd]=$rc
    log "$cmd: exit $rc in ${SECS[$cmd]} s ($((SECS[$cmd] / 60)) min $((SECS[$cmd] % 60)) s); root now $(du -sh --exclude=proc --exclude=sys --exclude=dev "$ROOT" 2>/dev/null | cut -f1), $(free_gb "$W") GB free"
    ((rc == 0)) || overall=1
    [[ -f $W/stopped ]] && break
done

PKGS_AFTER="$(chroot "$ROOT" dpkg-query -W -f '${Status}\n' | grep -c 'install ok installed')"
APT_ADDED="$(chroot "$ROOT" sh -c "grep -h '^Commandline: apt-get' /var/log/apt/history.log 2>/dev/null | sed 's/^Commandline: //'" | paste -sd';' -)"
log "summary: commit $COMMIT; root from $ROOT_FROM; given: $(printf '%s; ' "${GIVEN[@]}")$DNS"
for cmd in "${COMMANDS[@]}"; do
    [[ -n ${RCS[$cmd]:-} ]] && log "  $cmd: exit ${RCS[$cmd]}, ${SECS[$cmd]} s"
done
log "  Debian packages: $PKGS_BEFORE at the start, $PKGS_AFTER at the end (the scripts' apt-get: ${APT_ADDED:-none})"
if [[ -n $SUMMARY ]]; then
    js() { local v=${1//\\/\\\\}; v=${v//\"/\\\"}; printf '"%s"' "$v"; }
    {
        printf '{\n  "commit": %s,\n  "root_from": %s,\n  "given": [' "$(js "$COMMIT")" "$(js "$ROOT_FROM")"
        sep=""
        for g in "${GIVEN[@]}"; do printf '%s%s' "$sep" "$(js "$g")"; sep=", "; done
        printf '],\n  "commands": ['
        sep=""
        for cmd in "${COMMANDS[@]}"; do
            [[ -n ${RCS[$cmd]:-} ]] || continue
            printf '%s\n    {"command": %s, "exit": %d, "seconds": %d}' "$sep" "$(js "$cmd")" "${RCS[$cmd]}" "${SECS[$cmd]}"
            sep=","
        done
        printf '\n  ],\n  "debian_packages_before": %d,\n  "debian_packages_after": %d,\n  "apt_get": %s,\n' \
            "$PKGS_BEFORE" "$PKGS_AFTER" "$(js "$APT_ADDED")"
        printf '  "stopped": %s,\n  "machine": {"cpus": %d, "memory_gb": %s}\n}\n' "$(js "$(cat "$W/stopped" 2>/dev/null || true)")" \
            "$(nproc)" "$(awk '/MemTotal/ { printf "%.0f", $2 / 1048576 }' /proc/meminfo)"
    } > "$SUMMARY.tmp"
    mv -f "$SUMMARY.tmp" "$SUMMARY"
    log "summary written: $SUMMARY"
fi
exit "$overall"
}
