#!/usr/bin/env bash
# Run the real-LeRobot compatibility tests (tests/compat) inside each lerobot venv.
#
# Usage: bash .ci/compat.sh [REPO_PATH]     (default: the repo holding this script)
#   PREP_VENVS=/opt/prep-venvs   where .ci/lerobot_envs.sh put the venvs
#   LEROBOT_ENVS="v21 v30"       which formats to test
#   COMPAT_PARALLEL=1            run the envs' suites at the same time (default 1; 0: one after the other)
#   COMPAT_PYTEST_ARGS=...       extra pytest arguments (e.g. "-x")
#   COMPAT_SETUP=1               run .ci/lerobot_envs.sh first (create/verify the venvs)
#   PARITY=0                     skip the LeRobot parity table (bench/parity.py; default 1: run it after the suites)
#   PARITY_STRICT=1              fail when any parity row disagrees (default 0: print the table, keep the JSON)
#   PARITY_OUT=PATH              where the parity JSON goes (default REPO/bench/results/parity.json)
#   PARITY_ARGS=...              extra bench/parity.py arguments (e.g. "--cases clean-synth,flipped-bytes")
#   PARITY_PYTHON=PATH           the interpreter prep is installed for, which runs prep and the orchestrator
#                                (default REPO/.venv/bin/python as scripts/setup.sh makes it, else python3)
#
# Prints "lerobot X installed" per env, pytest's output, a report of what was read (PSNR,
# frame comparisons, negative control), per-corpus counts and "compat v3.0: N passed, N failed",
# then the parity table (real reader vs prep verify / reencode on the tests/compat/parity_cases).
# Exits non-zero when a venv is missing, any test fails, or the parity harness breaks (or, with
# PARITY_STRICT=1, any parity row disagrees).
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "${1:-$HERE/..}" && pwd)"
VENVS="${PREP_VENVS:-/opt/prep-venvs}"
WANT="${LEROBOT_ENVS:-v21 v30}"

log() { printf '[compat] %s\n' "$*"; }

if [[ "${COMPAT_SETUP:-0}" == 1 ]]; then
    PREP_VENVS="$VENVS" LEROBOT_ENVS="$WANT" bash "$HERE/lerobot_envs.sh" "$REPO" || exit 1
fi

work="$(mktemp -d /tmp/prep-compat.XXXXXX)"
trap 'rm -rf "$work"' EXIT

fmt_of() { local f="${1#v}"; echo "v${f:0:1}.${f:1}"; }   # v21 -> v2.1

run_suite() {  # run_suite NAME: pytest in that venv; output in $work/pytest-NAME.log, rc in .rc
    local name=$1 py="$VENVS/lerobot-$1/bin/python"
    local t0=$SECONDS
    # Offline: nothing may come from the hub; caches go to the temp folder. PYTHONPATH puts this
    # checkout first, whatever checkout the venv's editable install points at.
    # shellcheck disable=SC2086
    (cd "$REPO" && env HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_HOME="$work/hf-$name" \
        PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" PREP_COMPAT_REPORT="$work/report-$name.txt" \
        "$py" -m pytest tests/compat -k "$name" -p no:cacheprovider -q -rfEsp --durations=12 \
        ${COMPAT_PYTEST_ARGS:-}) > "$work/pytest-$name.log" 2>&1
    echo $? > "$work/pytest-$name.rc"
    echo $((SECONDS - t0)) > "$work/pytest-$name.secs"
}

status=0
names=()
declare -A version
for name in $WANT; do
    py="$VENVS/lerobot-$name/bin/python"
    fmt="$(fmt_of "$name")"
    if [[ ! -x "$py" ]]; then
        log "compat $fmt: no venv at $VENVS/lerobot-$name (run .ci/lerobot_envs.sh)"; status=1; continue
    fi
    if ! version[$name]="$("$py" -c 'import importlib.metadata as m; print(m.version("lerobot"))' 2>/dev/null)"; then
        log "compat $fmt: lerobot does not import in $VENVS/lerobot-$name"; status=1; continue
    fi
    log "lerobot ${version[$name]} installed ($("$py" -c 'import importlib.metadata as m; print(", ".join(f"{p} {m.version(p)}" for p in ("torch","torchcodec","torchvision","datasets","av")))'))"
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
    log "---- pytest in $VENVS/lerobot-$name (lerobot $ver, format $fmt) ----"
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
        [[ $corpus == real && $name == v30 ]] && what="real fixture's official v3.0 conversion (lerobot $ver)"
        log "compat $fmt on $what and its 224 re-encodes: $ok passed, $bad failed"
    done
    # The conversions (issue 15), from the same -rp lines: tests/compat/test_convert_<env>.py.
    ok=$(grep -cE "^PASSED .*test_convert_$name\.py::" "$log" || true)
    bad=$(grep -cE "^(FAILED|ERROR) .*test_convert_$name\.py::" "$log" || true)
    what="v2.1 -> v3.0: prep convert vs lerobot $ver's converter, read by lerobot $ver"
    [[ $name == v21 ]] && what="v3.0 -> v2.1 of lerobot-0.4.4-written corpora (prep convert, prep reencode --format v2.1), read by lerobot $ver"
    log "compat $fmt conversion, $what: $ok passed, $bad failed"
    msg="compat $fmt: $passed passed, $failed failed, $skipped skipped ($(cat "$work/pytest-$name.secs") s, lerobot $ver)"
    log "$msg"
    summary+=("$msg")
    if [[ $rc -ne 0 || $passed -eq 0 ]]; then status=1; fi
done
for msg in "${summary[@]}"; do log "$msg"; done

# The parity table: every parity case through the real readers, prep verify and prep reencode. It
# reports disagreements; only PARITY_STRICT=1 (issue 12, part 2) makes them fail the stage.
if [[ "${PARITY:-1}" == 1 && ${#names[@]} -gt 0 ]]; then
    formats=""
    for name in "${names[@]}"; do formats+="${formats:+,}$(fmt_of "$name")"; done
    log "---- parity table (bench/parity.py, formats $formats) ----"
    t0=$SECONDS
    strict=()
    [[ "${PARITY_STRICT:-0}" == 1 ]] && strict=(--strict)
    parity_py="${PARITY_PYTHON:-}"
    if [[ -z "$parity_py" ]]; then
        parity_py=python3
        [[ -x "$REPO/.venv/bin/python" ]] && parity_py="$REPO/.venv/bin/python"
    fi
    # shellcheck disable=SC2086
    (cd "$REPO" && PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" PREP_VENVS="$VENVS" \
        "$parity_py" bench/parity.py --formats "$formats" --work "$work/parity" \
        --out "${PARITY_OUT:-$REPO/bench/results/parity.json}" "${strict[@]}" ${PARITY_ARGS:-})
    prc=$?
    log "parity: exit $prc ($((SECONDS - t0)) s${strict:+, strict})"
    if [[ $prc -ne 0 ]]; then status=1; fi
fi
exit $status
