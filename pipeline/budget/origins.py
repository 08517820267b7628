"""Which of the report's figures are measured and which come from the seed's defaults (pi05-pretraining-sizing's
figures, prep's built-in parameters): report.json `figure_origins`, report.md's "Measured or seed default" table.

A figure's origin is the least certain of its inputs' (`ORDER`): one seed-default input makes it a seed-default
figure, said with the inputs that made it so. The GPU step times (a, c) are seed defaults until a device run
measures them (`--anchor B=N,wall=S`).
"""

from __future__ import annotations

from typing import Any

from pipeline.budget.config import BudgetConfig

SEED = "seed default"
ORDER = ("document default", "estimated", "config", "cli", "measured")  # least certain first
SHOWN = {"document default": SEED, "estimated": "estimated", "config": "config file", "cli": "command line",
         "measured": "measured"}

FIGURES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("target timesteps T", ("pi0_steps", "pi0_batch"),
     "pi0's 700k steps are published; its batch is not: the two targets bracket it"),
    ("target episodes and hours", ("pi0_steps", "pi0_batch", "frames_per_episode", "fps"), ""),
    ("storage, native", ("pi0_steps", "pi0_batch", "fps", "gb_per_hour_native"), ""),
    ("storage, prepared", ("pi0_steps", "pi0_batch", "fps", "gb_per_hour_prepared"), ""),
    ("GPU step time and node throughput", ("step_a_s", "step_c_s", "anchors", "gpus_per_node", "train_batch"),
     "GPU step times are seed defaults until a device run measures them: pass --anchor B=N,wall=S"),
    ("GPU memory per GPU and the largest batch", ("mem_fixed_gb", "mem_per_sample_gb", "mem_usable_gb",
                                                  "gpus_per_node", "train_batch"), ""),
    ("days to the target", ("pi0_steps", "pi0_batch", "step_a_s", "step_c_s", "anchors", "gpus_per_node",
                            "train_batch", "nodes", "efficiency", "efficiency_low", "efficiency_high"), ""),
)


def _input_origin(cfg: BudgetConfig, name: str) -> str:
    if name == "anchors" and not cfg.anchors:
        return "measured"  # no anchor given: the step model is (a, c), whose own origins count
    if name in ("step_a_s", "step_c_s") and cfg.anchors:
        return cfg.origin("anchors")  # refitted from the anchors
    return cfg.origin(name)


def figure_origins(cfg: BudgetConfig, mixture: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    out = []
    for figure, names, note in FIGURES:
        inputs = [{"name": n, "origin": SHOWN[_input_origin(cfg, n)], "source": cfg.source(n)} for n in names
                  if not (n == "anchors" and not cfg.anchors)]
        worst = min((_input_origin(cfg, n) for n in names), key=ORDER.index)
        out.append({"figure": figure, "origin": SHOWN[worst], "inputs": inputs,
                    "seed_inputs": [i["name"] for i in inputs if i["origin"] == SEED], "note": note})
    if mixture is not None:
        seed = [n for n in ("pi0_steps", "pi0_batch") if cfg.origin(n) == "document default"]
        out.append({"figure": "mixture: each dataset's samples and epochs at T",
                    "origin": SEED if seed else "measured",
                    "inputs": [{"name": "weights", "origin": "config file" if mixture["weights"] == "given" else
                                "equal weights", "source": mixture["corpus"]},
                               {"name": "timesteps", "origin": "measured", "source": mixture["corpus"]},
                               *({"name": n, "origin": SHOWN[cfg.origin(n)], "source": cfg.source(n)}
                                 for n in ("pi0_steps", "pi0_batch"))],
                    "seed_inputs": seed, "note": "the datasets' timesteps are measured; T is pi0's"})
        out.append({"figure": "re-encode CPU-hours and wall time", "origin": "measured",
                    "inputs": [{"name": "cpu_ms_per_frame", "origin": "measured",
                                "source": mixture["reencode"]["source"]},
                               {"name": "camera frames", "origin": "measured", "source": mixture["corpus"]}],
                    "seed_inputs": [], "note": mixture["reencode"]["note"]})
    return out
