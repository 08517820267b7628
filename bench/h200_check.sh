#!/usr/bin/env bash
# Dataloader check for one offline H200 node (1 GPU, 16 cores, Python 3.12 + PyTorch preinstalled,
# no network), before a multi-week job. Under 8 minutes; everything lands in OUT_DIR.
#
#   bash bench/h200_check.sh OUT_DIR [WHEELS_DIR]
#
#   WHEELS_DIR (or $PREP_WHEELS)  wheels brought along: prep, av, dask, pyarrow, datasets, jsonschema,
#                                 matplotlib, psutil, ... (made on a networked machine with
#                                 `pip wheel --no-deps -w wheels .` in this repository, then
#                                 `pip download --only-binary=:all: --python-version 3.12 -d wheels
#                                 wheels/lerobot_prep-*.whl psutil`). Installed into OUT_DIR/venv, a venv that
#                                 sees the node's packages; torch is never installed: the node's own is used.
#   DEMO_CORPUS=PATH   a prepared (224 all-intra) corpus to use instead of a synthetic one
#   PYTHON=python3     the interpreter;  WORKERS=4  workers of the main run;  SWEEP=1,2,4,8,15
#   NATIVE=1           also build a native 480x640 GOP-30 corpus and compare (adds ~2 minutes)
#   DEVICE=cpu BATCH=16 STEP_TIME=0.2 STRESS_MIN=1   a dry run of the script on a machine without a GPU
#
# Steps (each under its own timeout): environment -> demo corpus -> main run (cuda, per-GPU batch 256,
# auto step 7.6 s, 10 timed steps) -> worker sweep (ceiling + 1 step each) -> 2-minute stress with all
# cores. Exit 0 only if every step ran, no sample failed, the stress passed and the main run keeps up.
set -uo pipefail

OUT="${1:?usage: bash bench/h200_check.sh OUT_DIR [WHEELS_DIR]}"
WHEELS="${2:-${PREP_WHEELS:-}}"
PY="${PYTHON:-python3}"
WORKERS="${WORKERS:-4}"
SWEEP="${SWEEP:-1,2,4,8,15}"
BUDGET_S="${BUDGET_S:-470}"
DEVICE="${DEVICE:-cuda}"
BATCH="${BATCH:-256}"
STEP_TIME="${STEP_TIME:-auto}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
exec > >(tee -a "$OUT/h200_check.log") 2>&1
START=$SECONDS
STATUS=0
log() { printf '[h200 %4ds] %s\n' "$((SECONDS - START))" "$*"; }
left() { echo $((BUDGET_S - (SECONDS - START))); }
step() {  # step NAME SECONDS CMD...: run under a timeout capped by the remaining budget
    local name="$1" limit="$2"; shift 2
    local cap; cap="$(left)"
    ((cap < limit)) && limit="$cap"
    if ((limit < 10)); then log "$name: SKIPPED, out of time"; STATUS=1; return 1; fi
    log "$name (limit ${limit}s): $*"
    timeout -k 10 "$limit" "$@"
    local rc=$?
    if ((rc == 124 || rc == 137)); then log "$name: TIMED OUT"; STATUS=1
    elif ((rc != 0)); then log "$name: exit $rc"; STATUS=1
    else log "$name: ok"; fi
    return "$rc"
}

export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
if [[ -n "$WHEELS" ]]; then WHEELS="$(cd "$WHEELS" && pwd)"; fi
if [[ -n "${DEMO_CORPUS:-}" ]]; then DEMO_CORPUS="$(cd "$DEMO_CORPUS" && pwd)"; fi
cd "$OUT"  # never import the checkout by accident from the current folder
if [[ -n "$WHEELS" ]]; then
    # A venv of our own that sees the node's Python packages (its torch), so that the node's Python is left
    # alone (and PEP 668 does not apply); prep is the wheel file itself (a plain install: its schemas
    # ship inside it), its dependencies come from WHEELS or are already on the node; never torch.
    PREP_WHL=("$WHEELS"/lerobot_prep-*.whl)
    [[ -f "${PREP_WHL[0]}" ]] || { log "no lerobot_prep-*.whl in $WHEELS (pip wheel --no-deps -w $WHEELS REPO)"; exit 1; }
    step "venv" 60 "$PY" -m venv --system-site-packages "$OUT/venv" || exit 1
    PY="$OUT/venv/bin/python"
    step "install wheels" 120 "$PY" -m pip install -q --no-index --find-links "$WHEELS" "${PREP_WHL[0]}" psutil || exit 1
    step "package data" 30 "$PY" -c "
from pipeline.schemas import load_schema
import pipeline
load_schema('bench')
print('prep', pipeline.__version__, 'from', pipeline.__file__)" || exit 1
fi
# Prefer this checkout when the package is not installed.
if ! "$PY" -c "import pipeline.commands.bench" 2>/dev/null; then export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"; fi

step "environment" 60 "$PY" - "$OUT/environment.json" "$DEVICE" <<'PY' || exit 1
import json, os, platform, subprocess, sys
import av, torch
import pipeline
info = {"python": sys.version.split()[0], "platform": platform.platform(), "cpu_count": os.cpu_count(),
        "cores_available": len(os.sched_getaffinity(0)), "loadavg": os.getloadavg(), "torch": torch.__version__,
        "cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(), "av": av.__version__,
        "prep": pipeline.__version__}
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    info.update(gpu=p.name, gpu_mem_gib=round(p.total_memory / 2**30, 1), gpu_count=torch.cuda.device_count())
try:
    info["nvidia_smi"] = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
except (OSError, subprocess.SubprocessError):
    pass
json.dump(info, open(sys.argv[1], "w"), indent=2)
print(json.dumps(info, indent=2))
sys.exit(0 if info["cuda_available"] or sys.argv[2] != "cuda" else "no CUDA device visible to torch")
PY

CORPUS="${DEMO_CORPUS:-$OUT/corpus/intra224}"
if [[ -z "${DEMO_CORPUS:-}" && ! -f "$CORPUS/meta/info.json" ]]; then
    step "demo corpus" 120 "$PY" -c "
import sys
from pipeline.synth import SynthSpec, write_synthetic
write_synthetic(sys.argv[1], SynthSpec(version='v3.0', episodes=40, height=224, width=224, gop=1))
" "$CORPUS" || exit 1
fi
BENCH=("$PY" -m pipeline.commands.bench dataloader "$CORPUS" --device "$DEVICE" --batch "$BATCH"
       --step-time "$STEP_TIME" --label intra224)

step "main run" 150 "${BENCH[@]}" --workers "$WORKERS" --steps 10 --out "$OUT" --name main --require-keeps-up
step "worker sweep" 150 "${BENCH[@]}" --sweep "workers=$SWEEP" --steps 1 --warmup 1 --out "$OUT" --name sweep

if [[ "${NATIVE:-0}" == 1 ]]; then
    NATIVE_CORPUS="$OUT/corpus/native"
    [[ -f "$NATIVE_CORPUS/meta/info.json" ]] || step "native corpus" 150 "$PY" -c "
import sys
from pipeline.synth import SynthSpec, write_synthetic
write_synthetic(sys.argv[1], SynthSpec(version='v3.0', episodes=10))
" "$NATIVE_CORPUS"
    step "native compare" 120 "${BENCH[@]}" --compare "$NATIVE_CORPUS" --compare-label native \
        --workers "$WORKERS" --steps 2 --warmup 1 --out "$OUT" --name compare
fi

STRESS_MIN="${STRESS_MIN:-2}"
step "stress" $((STRESS_MIN * 60 + 60)) "${BENCH[@]}" --stress "$STRESS_MIN" --out "$OUT" --name stress

log "files: $(cd "$OUT" && ls *.json *.png 2>/dev/null | tr '\n' ' ')"
log "$( ((STATUS == 0)) && echo 'H200 CHECK PASSED' || echo 'H200 CHECK FAILED (see above)') in $((SECONDS - START)) s"
exit "$STATUS"
