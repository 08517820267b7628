#!/usr/bin/env bash
# One command on a fresh machine: set up, then run `prep demo` end to end on a corpus it builds.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec prep demo "$@"
