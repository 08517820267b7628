#!/usr/bin/env bash
# One command on a fresh machine: set up .venv/ with the test tools and a CPU torch, lint, type-check,
# run the test suite, then the real-LeRobot compatibility tests in their own virtual environments
# (skip those with --no-lerobot).
set -euo pipefail
cd "$(dirname "$0")/.."
unset PYTHONPATH  # run this checkout, through .venv
WITH_LEROBOT=1
for arg in "$@"; do
    case "$arg" in
        --no-lerobot) WITH_LEROBOT=0 ;;
        *) echo "usage: scripts/test.sh [--no-lerobot]" >&2; exit 2 ;;
    esac
done
bash scripts/setup.sh --test
V=.venv/bin
envs_pid=""
if [ "$WITH_LEROBOT" = 1 ]; then
    # The reader venvs download and unpack (network and disk, ~20 min on a fresh machine) while the suite runs
    # (CPU): the two overlap instead of adding up. Their log is shown once the suite is done.
    envs_log="$(mktemp "${TMPDIR:-/tmp}/prep-lerobot-envs.XXXXXX")"
    echo "[test] the reader venvs (.ci/lerobot_envs.sh) build in the background while the suite runs"
    bash .ci/lerobot_envs.sh "$PWD" >"$envs_log" 2>&1 &
    envs_pid=$!
    trap 'kill "$envs_pid" 2>/dev/null || true' EXIT
fi
echo "[test] ruff"; "$V/ruff" check pipeline tests bench
echo "[test] mypy"; "$V/mypy" pipeline
echo "[test] pytest"
rc=0
"$V/python" -m pytest -q --durations=15 tests --ignore=tests/compat || rc=$?
if [ "$WITH_LEROBOT" = 1 ]; then
    envs_rc=0
    wait "$envs_pid" || envs_rc=$?
    trap - EXIT
    echo "[test] reader venvs (.ci/lerobot_envs.sh, built in the background): exit $envs_rc"
    cat "$envs_log"; rm -f "$envs_log"
    [ "$rc" = 0 ] || exit "$rc"
    [ "$envs_rc" = 0 ] || exit "$envs_rc"
    echo "[test] real LeRobot compatibility (lerobot 0.3.3 reads v2.1; lerobot 0.4.4 and 0.6.1 read v3.0)"
    bash .ci/compat.sh "$PWD"   # the parity table goes to $TMPDIR/prep-compat-parity.json, not bench/results/
    for env in v21 v30 v06; do
        py=""  # PREP_VENVS may list several folders: the first holding lerobot-$env
        IFS=: read -ra dirs <<<"${PREP_VENVS:-/opt/prep-venvs}"
        for d in "${dirs[@]}"; do [ -x "$d/lerobot-$env/bin/python" ] && { py="$d/lerobot-$env/bin/python"; break; }; done
        [ -n "$py" ] || { echo "[test] no lerobot-$env venv (run .ci/lerobot_envs.sh)"; exit 1; }
        echo "[test] our loader's items equal LeRobotDataset's (lerobot-$env)"
        HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONPATH="$PWD" PREP_CHROOT_BIND="$PWD" "$py" \
            -m pytest -q -p no:cacheprovider -m readers tests/test_loader_lerobot.py
    done
fi
exit "$rc"
