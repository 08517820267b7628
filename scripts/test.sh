#!/usr/bin/env bash
# One command on a fresh machine: set up, lint, type-check, run the test suite, then the
# real-LeRobot compatibility tests in their own virtual environments (skip those with --no-lerobot).
set -euo pipefail
cd "$(dirname "$0")/.."
WITH_LEROBOT=1
for arg in "$@"; do
    case "$arg" in
        --no-lerobot) WITH_LEROBOT=0 ;;
        *) echo "usage: scripts/test.sh [--no-lerobot]" >&2; exit 2 ;;
    esac
done
bash scripts/setup.sh
echo "[test] ruff"; ruff check pipeline tests bench
echo "[test] mypy"; mypy pipeline
echo "[test] pytest"
python3 -m pytest -q --durations=15 tests --ignore=tests/compat
if [ "$WITH_LEROBOT" = 1 ] && [ -f .ci/lerobot_envs.sh ]; then
    echo "[test] real LeRobot compatibility"
    bash .ci/lerobot_envs.sh
    bash .ci/compat.sh
fi
