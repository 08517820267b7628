#!/usr/bin/env bash
# One command on a fresh machine: set up .venv/ (no torch), then run `prep demo` end to end on a corpus it
# builds. Arguments go to `prep demo` (e.g. --episodes 2). Its reports and plots are kept in out/demo/ under
# the checkout (git ignores out/), unless an argument names another place (--out, --work, --refresh-manifests).
set -euo pipefail
cd "$(dirname "$0")/.."
unset PYTHONPATH  # run this checkout, through .venv
bash scripts/setup.sh
args=("$@")
kept=""
case " $* " in
    *" --out"* | *" --work"* | *" --refresh-manifests"*) ;;
    *) kept=out/demo; args+=(--out "$kept") ;;
esac
.venv/bin/prep demo "${args[@]}"
if [[ -n "$kept" ]]; then
    echo "[demo] kept in $kept/ (git ignores it): budget/report.md and its plots budget/*.png, the manifests,"
    echo "[demo]   verify.json, comparison.json; a rerun replaces them"
fi
