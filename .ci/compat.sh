#!/usr/bin/env bash
# Run the real-LeRobot compatibility tests (tests/compat) inside each lerobot venv: three readers,
# lerobot 0.3.3 (v21: format v2.1), 0.4.4 (v30: format v3.0) and 0.6.1 (v06: format v3.0, Python 3.13 in
# a Debian 13 root, see .ci/lerobot_envs.sh).
#
# Usage: bash .ci/compat.sh [REPO_PATH]     (default: the repo holding this script)
#   PREP_VENVS=/opt/prep-venvs   where .ci/lerobot_envs.sh put the venvs (a colon-separated list is searched
#                                in order for each lerobot-NAME)
#   LEROBOT_ENVS="v21 v30 v06"   which readers to test
#   COMPAT_PARALLEL=1            run the envs' suites at the same time (default 1; 0: one after the other)
#   COMPAT_PYTEST_ARGS=...       extra pytest arguments (e.g. "-x")
#   COMPAT_SETUP=1               run .ci/lerobot_envs.sh first (create/verify the venvs)
#   PARITY=0                     skip the LeRobot parity table (bench/parity.py; default 1: run it after the suites)
#   PARITY_STRICT=1              fail when a parity row disagrees that its case does not declare unavoidable
#                                (Expect.cannot_agree, printed with its reason), or cannot be run (default 1;
#                                0: print the table, keep the JSON, pass)
#   PARITY_OUT=PATH              where the parity JSON goes (default $TMPDIR/prep-compat-parity.json; the
#                                committed bench/results/parity.json is written by an explicit bench run)
#   PARITY_ARGS=...              extra bench/parity.py arguments (e.g. "--cases clean-synth,flipped-bytes")
#   PARITY_PYTHON=PATH           the interpreter prep is installed for, which runs prep and the orchestrator
#                                (default REPO/.venv/bin/python as scripts/setup.sh makes it, else python3)
#
# Prints "lerobot X installed" per env, pytest's output, a report of what was read (PSNR,
# frame comparisons, negative control), per-corpus counts and "compat v3.0 (lerobot X): N passed, N failed"
# with each suite's wall and CPU seconds,
# then the parity table (real reader vs prep verify / reencode on the tests/compat/parity_cases).
# Exits non-zero when a venv is missing, any test fails, the parity harness breaks, or (PARITY_STRICT=1, the
# default) a parity row disagrees that its case does not declare unavoidable.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "${1:-$HERE/..}" && pwd)"
VENVS_PATH="${PREP_VENVS:-/opt/prep-venvs}"
WANT="${LEROBOT_ENVS:-v21 v30 v06}"

log() { printf '[compat] %s\n' "$*"; }

if [[ "${COMPAT_SETUP:-0}" == 1 ]]; then
    PREP_VENVS="$VENVS_PATH" LEROBOT_ENVS="$WANT" bash "$HERE/lerobot_envs.sh" "$REPO" || exit 1
fi

work="$(mktemp -d /tmp/prep-compat.XXXXXX)"
trap 'rm -rf "$work"' EXIT
# The test run never rewrites the tracked bench/results/parity.json (an explicit `python bench/parity.py` does).
PARITY_OUT="${PARITY_OUT:-${TMPDIR:-/tmp}/prep-compat-parity.json}"

venv_of() {  # venv_of NAME: the first folder of $PREP_VENVS holding lerobot-NAME (else the first folder's)
    local d
    IFS=: read -ra dirs <<<"$VENVS_PATH"
    for d in "${dirs[@]}"; do [[ -x "$d/lerobot-$1/bin/python" ]] && { echo "$d/lerobot-$1"; return; }; done
    echo "${dirs[0]}/lerobot-$1"
}
fmt_of() { case "$1" in v21) echo v2.1 ;; v06) echo v3.0 ;; *) local f="${1#v}"; echo "v${f:0:1}.${f:1}" ;; esac; }
reader_of() { case "$1" in v21) echo 0.3 ;; v30) echo 0.4 ;; v06) echo 0.6 ;; *) echo "$1" ;; esac; }
# A reader in a Debian root (lerobot-v06) sees only /tmp, the current folder and these: the checkout, the
# folder it sits in and the shared fixtures next to it (tests/compat finds ../shared/fixtures).
shared="$(readlink -f "$REPO/../shared" 2>/dev/null || true)"
export PREP_CHROOT_BIND="$REPO:$(dirname "$REPO")${shared:+:$shared}${PREP_CHROOT_BIND:+:$PREP_CHROOT_BIND}"

run_suite() {  # run_suite NAME: pytest in that venv; output in $work/pytest-NAME.log, rc in .rc
    local name=$1 py
    py="$(venv_of "$1")/bin/python"
    local t0=$SECONDS
    # Offline: nothing may come from the hub; caches go to the temp folder. PYTHONPATH puts this
    # checkout first, whatever checkout the venv's editable install points at. The subshell's `times`
    # gives the CPU seconds of everything the suite ran (pytest, its prep commands, their Dask workers).
    # shellcheck disable=SC2086
    (cd "$REPO" && env HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_HOME="$work/hf-$name" \
        PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" PREP_COMPAT_REPORT="$work/report-$name.txt" \
        "$py" -m pytest tests/compat -k "$name" -p no:cacheprovider -q -rfEsp --durations=12 \
        ${COMPAT_PYTEST_ARGS:-} > "$work/pytest-$name.log" 2>&1
        echo $? > "$work/pytest-$name.rc"
        times > "$work/pytest-$name.times")  # not piped: a pipeline's `times` runs in a subshell of its own
    echo $((SECONDS - t0)) > "$work/pytest-$name.secs"
}

cpu_secs() {  # cpu_secs FILE: user + system seconds of the children, from `times` (its 2nd line: "0m1.5s 0m0.2s")
    awk 'NR == 2 { s = 0; for (i = 1; i <= 2; i++) { split($i, a, /m|s/); s += a[1] * 60 + a[2] } printf "%.0f", s }' "$1"
}

status=0
names=()
declare -A version
for name in $WANT; do
    venv="$(venv_of "$name")"
    py="$venv/bin/python"
    fmt="$(fmt_of "$name")"
    if [[ ! -x "$py" ]]; then
        log "compat $fmt: no venv at $venv (run .ci/lerobot_envs.sh)"; status=1; continue
    fi
    if ! version[$name]="$(cd "$REPO" && "$py" -c 'import importlib.metadata as m; print(m.version("lerobot"))' 2>/dev/null)"; then
        log "compat $fmt: lerobot does not import in $venv"; status=1; continue
    fi
    log "lerobot ${version[$name]} installed ($(cd "$REPO" && "$py" -c 'import importlib.metadata as m, sys; print(f"python {sys.version.split()[0]}, " + ", ".join(f"{p} {m.version(p)}" for p in ("torch","torchcodec","torchvision","datasets","av")))'))"
    : > "$work/report-$name.txt"
    names+=("$name")
done

if [[ "${COMPAT_PARALLEL:-1}" == 1 && ${#names[@]} -gt 1 ]]; then
    log "running ${names[*]} in parallel"
    for name in "${names[@]}"; do run_suite "$name" & done
    wait
else
    for name in "${names[@]}"; do run_suite "$name"; done
fi

summary=()
for name in "${names[@]}"; do
    fmt="$(fmt_of "$name")"; ver="${version[$name]}"; log="$work/pytest-$name.log"
    log "---- pytest in $(venv_of "$name") (lerobot $ver, format $fmt) ----"
    cat "$log"
    rc=$(cat "$work/pytest-$name.rc")
    line="$(grep -E '[0-9]+ (passed|failed|skipped|errors?)' "$log" | grep -E ' in [0-9.]+s' | tail -1)"
    count() { grep -oE "[0-9]+ $1" <<<"$line" | head -1 | grep -oE '^[0-9]+' || echo 0; }
    passed=$(count passed); failed=$(( $(count failed) + $(count error) )); skipped=$(count skipped)
    log "report ($fmt, lerobot $ver):"
    sed 's/^/[compat]   /' "$work/report-$name.txt"
    # Per corpus, from pytest's -rp lines: "real" is the real fixture (v2.1) or its official v3.0
    # conversion (v3.0); each count covers the corpus and its `prep reencode --dst 224` outputs.
    for corpus in synthetic real; do
        ok=$(grep -cE "^PASSED .*test_lerobot_$name\\.py::[a-z_]+\\[$corpus-" "$log" || true)
        bad=$(grep -cE "^(FAILED|ERROR) .*test_lerobot_$name\\.py::[a-z_]+\\[$corpus-" "$log" || true)
        what="synthetic $fmt corpus"
        [[ $corpus == real && $name == v21 ]] && what="real fixture g1_inspire (v2.1)"
        [[ $corpus == real && $name != v21 ]] && what="real fixture's official v3.0 conversion (lerobot $ver)"
        log "compat $fmt on $what and its 224 re-encodes: $ok passed, $bad failed"
    done
    # The conversions (issue 15), from the same -rp lines: tests/compat/test_convert_<env>.py.
    ok=$(grep -cE "^PASSED .*test_convert_$name\.py::" "$log" || true)
    bad=$(grep -cE "^(FAILED|ERROR) .*test_convert_$name\.py::" "$log" || true)
    what="v2.1 -> v3.0: prep convert vs lerobot $ver's converter, read by lerobot $ver"
    [[ $name == v21 ]] && what="v3.0 -> v2.1 of lerobot-0.4.4-written corpora (prep convert, prep reencode --format v2.1), read by lerobot $ver"
    log "compat $fmt conversion, $what: $ok passed, $bad failed"
    msg="compat $fmt (lerobot $ver): $passed passed, $failed failed, $skipped skipped ($(cat "$work/pytest-$name.secs") s wall, $(cpu_secs "$work/pytest-$name.times") s CPU)"
    log "$msg"
    summary+=("$msg")
    if [[ $rc -ne 0 || $passed -eq 0 ]]; then status=1; fi
done
for msg in "${summary[@]}"; do log "$msg"; done

# The parity table: every parity case through the real readers, prep verify and prep reencode. A row that
# disagrees fails the stage (issue 25) unless its case declares why prep cannot agree (PARITY_STRICT=0: report only).
if [[ "${PARITY:-1}" == 1 && ${#names[@]} -gt 0 ]]; then
    readers=""
    for name in "${names[@]}"; do readers+="${readers:+,}$(reader_of "$name")"; done
    log "---- parity table (bench/parity.py, readers $readers) ----"
    t0=$SECONDS
    strict=()
    [[ "${PARITY_STRICT:-1}" == 1 ]] && strict=(--strict)
    parity_py="${PARITY_PYTHON:-}"
    if [[ -z "$parity_py" ]]; then
        parity_py=python3
        [[ -x "$REPO/.venv/bin/python" ]] && parity_py="$REPO/.venv/bin/python"
    fi
    # shellcheck disable=SC2086
    (cd "$REPO" && PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" PREP_VENVS="$VENVS_PATH" \
        "$parity_py" bench/parity.py --readers "$readers" --work "$work/parity" \
        --out "$PARITY_OUT" "${strict[@]}" ${PARITY_ARGS:-}
        echo $? > "$work/parity.rc"
        times > "$work/parity.times")
    prc=$(cat "$work/parity.rc")
    log "parity: exit $prc ($((SECONDS - t0)) s wall, $(cpu_secs "$work/parity.times") s CPU${strict:+, strict}); JSON $PARITY_OUT"
    if [[ $prc -ne 0 ]]; then status=1; fi
fi
exit $status
