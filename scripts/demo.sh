#!/usr/bin/env bash
# One command on a fresh machine: set up .venv/ (no torch), then run `prep demo` end to end on a corpus it
# builds. Arguments go to `prep demo` (e.g. --episodes 2).
set -euo pipefail
cd "$(dirname "$0")/.."
unset PYTHONPATH  # run this checkout, through .venv
bash scripts/setup.sh
exec .venv/bin/prep demo "$@"
