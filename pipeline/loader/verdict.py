"""The dataloader verdict, explained: what the training loop needs, what the loader can give, and what
limits data_time. A pure function of one run record (no torch), so it is tested on hand-made records.

- need     = per-GPU batch / step time: samples/s the loop consumes (one batch per step);
- ceiling  = samples/s the workers delivered with no step at all (phase 1 of the run);
- headroom = ceiling / need (1.0 = the loader exactly keeps pace);
- p95      = the data_time percentile the verdict compares with the threshold.

What limits it, in order: failed samples; a ceiling below the need (decode throughput: the loader is
too slow whatever the prefetch); a p95 under the threshold (nothing); a headroom under 2x (slow batches
reach the loop); a median wait already over the threshold with throughput to spare (a cost paid on every
batch: moving a ready batch from a worker to the loop, slowed by CPU contention); else occasional slow
waits with throughput to spare (the machine: other load, too few steps).
"""

from __future__ import annotations

import functools
import math
from typing import Any

# The verdict against the threshold is given only when a distribution-free confidence interval of the p95
# (order statistics of the per-step data_time; no assumption on its distribution) lies on one side of it:
# each side at CONFIDENCE, so a run that keeps up is called "does not keep up" at most 1 time in 100, and the
# other way round. Otherwise it is "inconclusive" with the --steps that can decide. An upper bound of the
# p95 needs at least MIN_STEPS_FOR_UPPER steps (0.95 ** n <= 1 - CONFIDENCE): with fewer, "keeps up" cannot
# be said, however fast the loader looked (10 steps under the threshold happen 4 times in 10 to a loader whose
# p95 is over it).
QUANTILE = 0.95
CONFIDENCE = 0.99
FRAME_BYTES = 224 * 224 * 3  # one uint8 RGB camera frame as both loaders return it
THIN_HEADROOM = 2.0  # below this ceiling / need, a slow batch is not absorbed by the prefetch queue


def _binom_cdf(k: int, n: int, p: float) -> float:
    """P(Bin(n, p) <= k)."""
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(0, min(k, n) + 1)) if k >= 0 else 0.0


@functools.lru_cache(maxsize=256)
def quantile_bounds(n: int, q: float = QUANTILE, confidence: float = CONFIDENCE) -> tuple[int | None, int | None]:
    """1-based ranks (l, u) of the sorted sample whose values bound the q-quantile from below and above, each at
    `confidence` (distribution-free): P(x_(l) <= Q) >= confidence and P(x_(u) >= Q) >= confidence. None where
    n samples cannot give that bound (the upper one needs 1 - q**n >= confidence)."""
    # K = samples at or below Q ~ Bin(n, q); x_(u) >= Q iff K <= u - 1; x_(l) <= Q iff K >= l
    upper = next((u for u in range(1, n + 1) if _binom_cdf(u - 1, n, q) >= confidence), None)
    lower = next((lo for lo in range(n, 0, -1) if 1 - _binom_cdf(lo - 1, n, q) >= confidence), None)
    return lower, upper


MIN_STEPS_FOR_UPPER = next(n for n in range(1, 10_000) if quantile_bounds(n)[1] is not None)


def p95_verdict(values: list[float], threshold: float) -> dict[str, Any]:
    """The p95 interval of per-step data_time and the verdict it allows: keeps_up True (the interval is at or under
    the threshold), False (over it), None (it straddles it, or too few steps to bound it: `rerun_steps`)."""
    xs = sorted(v for v in values if isinstance(v, int | float) and math.isfinite(v))
    lo_rank, hi_rank = quantile_bounds(len(xs)) if xs else (None, None)
    lo = xs[lo_rank - 1] if lo_rank is not None else None
    hi = xs[hi_rank - 1] if hi_rank is not None else None
    keeps_up = True if hi is not None and hi <= threshold else False if lo is not None and lo > threshold else None
    rerun = None if keeps_up is not None else max(MIN_STEPS_FOR_UPPER, 2 * len(xs))
    return {"p95_interval_s": [lo, hi], "confidence": CONFIDENCE, "keeps_up": keeps_up, "rerun_steps": rerun}


# Other processes' share of the machine's CPU while data_time is measured above which no verdict is given: a loader
# waits for the CPU it shares with them, and identical runs a minute apart on a machine whose load changes got
# opposite verdicts (bench/verdict_stability.py under a load of 4-6 on 2 cores: p95 0.003 s in one run, 0.045 s in
# the next). The verdict is about the loader on a machine of its own, as a training node is.
BUSY_SHARE = 0.25


def busy_guard(decided: dict[str, Any], other_share: float | None) -> dict[str, Any]:
    """`decided` (`p95_verdict`) with no verdict when other processes used more than `BUSY_SHARE` of the machine's
    CPU during the measurement (`other_share`; None: not measurable, the verdict stands)."""
    busy = other_share is not None and other_share > BUSY_SHARE
    withheld = busy and decided["keeps_up"] is not None  # undecided already: its --steps advice stands
    out = {**decided, "other_cpu_share": other_share, "busy": busy, "withheld": withheld}
    if withheld:
        out["keeps_up"] = None
    return out


def verdict_word(keeps_up: bool | None, rerun_steps: int | None, busy_share: float | None = None) -> str:
    if busy_share is not None:
        return (f"inconclusive: other processes used {busy_share:.0%} of this machine's CPU while data_time was "
                "measured; rerun on a quiet machine")
    if keeps_up is None:
        return f"inconclusive: rerun with --steps {rerun_steps}"
    return "keeps up" if keeps_up else "does not keep up"


def interval_text(interval: list[float | None], steps: int) -> str:
    """What the p95 is known to be: `p95 between A and B s at 99% each side, 90 steps`, or the side it lacks."""
    lo, hi = interval
    where = f"at {CONFIDENCE:.0%} each side, {plural(steps, 'step')}"
    if lo is not None and hi is not None:
        return f"p95 between {lo:.4f} and {hi:.4f} s {where}"
    if lo is not None:
        return (f"p95 at least {lo:.4f} s at {CONFIDENCE:.0%}; {plural(steps, 'step')} cannot bound it from above, "
                f"{MIN_STEPS_FOR_UPPER} can")
    return f"{plural(steps, 'step')} cannot bound the p95"


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'s' * (n != 1)}"


def _finite(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else None


def explain(run: dict[str, Any], load: float | None = None, cores: int | None = None) -> dict[str, Any]:
    """The numbers behind `run["keeps_up"]` and one sentence naming what limits data_time."""
    step_s, batch = run["step_s"], run["batch"]
    need = batch / step_s if step_s > 0 else None
    ceiling = _finite(run["ceiling"]["samples_per_s"])
    per_cpu = _finite(run["ceiling"].get("samples_per_cpu_s"))
    d = run["train"]["data_time_s"]
    p50, p95, worst = _finite(d["p50"]), _finite(d["p95"]), _finite(d["max"])
    threshold = run["threshold_s"]
    headroom = ceiling / need if need and ceiling is not None else None
    batch_mb = batch * run["cameras"] * FRAME_BYTES / 2**20
    steps = run["train"]["steps"]
    machine = f"load average {load:.1f} on {cores} cores" if load is not None and cores else "the machine's load"

    if run["errors"]:
        limit = f"failed samples: {run['errors']} raised (see the errors), so the timings do not count"
    elif ceiling is None or p95 is None:
        limit = "no measurement: no batch was timed"
    elif need is not None and ceiling < need:
        cores_needed = math.ceil(need / per_cpu) if per_cpu else None
        if cores_needed is not None and cores_needed <= max(run["workers"], 1):
            why = (f"; at {per_cpu:,.1f} samples per worker CPU-second that is {plural(cores_needed, 'busy core')}, "
                   f"no more than the {plural(run['workers'], 'worker')} it has, so the workers wait for I/O or "
                   f"for a CPU ({machine})")
        elif cores_needed is not None:
            why = (f"; at {per_cpu:,.1f} samples per worker CPU-second that takes about "
                   f"{plural(cores_needed, 'busy core')}")
        else:
            why = ""
        limit = (f"decode throughput: the workers deliver {ceiling:,.1f} samples/s, the loop needs {need:,.1f}{why}. "
                 "Add workers (--workers) if the cores exist, or make frames cheaper to decode (a 224 all-intra "
                 "copy, prep reencode --dst 224, if it is not one already)")
    elif p95 <= threshold:
        limit = (f"nothing: the loader has {headroom:,.1f}x the samples/s the loop needs and p95 is under the "
                 "threshold" if headroom is not None else "nothing: p95 is under the threshold")
    elif headroom is not None and headroom < THIN_HEADROOM:
        limit = (f"thin headroom: the workers are only {headroom:,.2f}x faster than the loop needs, so any slow batch "
                 f"(a long seek to a keyframe, a busy CPU: {machine}) reaches the loop. Add workers (--workers) "
                 "or make frames cheaper to decode (prep reencode --dst 224)")
    elif p50 is not None and p50 > threshold:
        pinning = ", pinning" if run["device"] == "cuda" else ""
        busy = load is not None and cores is not None and load > cores
        limit = (f"a cost paid on every batch, not decoding (the workers are {headroom or float('inf'):,.1f}x faster "
                 f"than needed): even the median wait ({p50:.4f} s) is over the threshold, i.e. handing a ready "
                 f"batch (~{batch_mb:,.1f} MB: {plural(batch, 'sample')} x {plural(run['cameras'], 'camera')} x "
                 f"224x224x3) from a worker to the loop (shared memory, unpickling{pinning})"
                 + (f", slowed here by an oversubscribed CPU ({machine}): rerun on a quieter machine before acting "
                    "on it" if busy else f" ({machine})"))
    else:
        median = "-" if p50 is None else f"{p50:.4f} s"
        limit = (f"occasional slow waits, not throughput: the median wait ({median}) is under the threshold and "
                 f"the workers are {headroom or float('inf'):,.1f}x faster than needed; the slowest of "
                 f"{plural(steps, 'step')} set p95 ({machine}): rerun on a quieter machine or with more --steps "
                 "before acting on it")
    return {
        "need_samples_per_s": need,
        "ceiling_samples_per_s": ceiling,
        "headroom": headroom,
        "p50_s": p50, "p95_s": p95, "max_s": worst,
        "threshold_s": threshold,
        "steps": steps,
        "batch_mb": batch_mb,
        "loadavg": load,
        "cores": cores,
        "limit": limit,
    }


def explain_lines(run: dict[str, Any]) -> list[str]:
    """The verdict line, then what it rests on (printed under it)."""
    e = run.get("explain")
    if not e:
        return [run["verdict"]]
    need = (f"{e['need_samples_per_s']:,.1f} samples/s (batch {run['batch']} per {run['step_s']:.2f} s step)"
            if e["need_samples_per_s"] is not None else "none (no step time)")
    ceiling = f"{e['ceiling_samples_per_s']:,.1f} samples/s" if e["ceiling_samples_per_s"] is not None else "-"
    head = f"{e['headroom']:,.1f}x the need" if e["headroom"] is not None else "-"
    p95 = "-" if e["p95_s"] is None else f"{e['p95_s']:.4f} s"
    p50 = "-" if e["p50_s"] is None else f"{e['p50_s']:.4f} s"
    worst = "-" if e["max_s"] is None else f"{e['max_s']:.4f} s"
    return [
        f"{run['label']}: {run['verdict']}",
        f"  need      {need}",
        f"  ceiling   {ceiling} with {plural(run['workers'], 'worker')}, no step",
        f"  headroom  {head}",
        f"  p95       {p95} vs threshold {e['threshold_s']:g} s (p50 {p50}, max {worst}, "
        f"over {plural(e['steps'], 'step')})",
        f"  limit     {e['limit']}",
    ]
