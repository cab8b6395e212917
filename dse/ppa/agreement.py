"""The model's energy against the emulator's on the calibration set, as its cycles are.

For every point of the calibration set (`dse.analytical.calibration.CALIBRATION_SET`: each
shipped recipe at a size the emulator runs in seconds, 1 and 4 workers, both mapping
policies) the analytical stage's figures and an emulator run's, priced by the one function
both use (`dse.ppa.assess_totals`): energy in total, without leakage (the actions alone,
where the two counts can differ apart from latency), and each activity count.
"""

from __future__ import annotations

from typing import Iterable

import emulator

from ..frontend import run_pipeline
from ..mapping import Candidate, Mapping
from ..plan.graph_plan import dram_footprint
from ..workload.recipes import instantiate, load_recipe
from .assess import assess_candidates, assess_totals
from .energy import ACTIVITY, emulator_activity
from .holdings import core_chips


def agreement_points(chip, recipes: Iterable[str] | None = None, workers: Iterable[int] = (1, 4),
                     policies: Iterable[str] = ("framework", "search")) -> tuple[list[dict], list[str]]:
    """One row a point: label, model and emulator latency, energy, leakage energy and
    activity; and the points that could not be made (why)."""
    from ..analytical.calibration import CALIBRATION_SET
    from ..lower import Infeasible, lower
    from ..analytical import estimate, summarize

    rows, skipped = [], []
    for recipe in list(recipes or CALIBRATION_SET):
        params = CALIBRATION_SET.get(recipe, {})
        pipe = run_pipeline(recipe, params)
        _, inputs = instantiate(load_recipe(recipe), **params)
        for w in [w for w in workers if w <= chip.cores.count]:
            for policy in policies:
                label = f"{recipe} {chip.name} w{w} {policy}"
                cand = Candidate(chip, Mapping(policy=policy, workers=w))
                (model,) = summarize(estimate(pipe.graph, [cand]), [cand]).to_dict("records")
                if not model["feasible"]:
                    skipped.append(f"{label}: {model['reason']}")
                    continue
                ((components,), _) = assess_candidates([model], [cand], [float(dram_footprint(pipe.graph))], {})
                # (assess_candidates adds the ops' workspace to the plan's footprint, in `model`)
                try:
                    lowered = lower(pipe.graph, cand, inputs)
                except Infeasible as exc:
                    skipped.append(f"{label}: {exc}")
                    continue
                res = emulator.run(lowered.program, chip, lowered.image, functional=False)
                counted = emulator_activity(res.counters)
                shared = float(max((r.value for r in res.counters.find("shared_bytes_used")), default=0))
                totals = {"latency_cycles": float(res.cycles), **counted, "dma_bytes": counted["dram_bytes"],
                          "shared_sram_bytes": shared}
                (emu,) = assess_totals([chip], [core_chips(chip, cand.mapping)], [totals], [float(res.dram.size)])
                row = {"label": label, "model_cycles": model["latency_cycles"], "emulator_cycles": float(res.cycles),
                       "model_energy_uj": model["energy_uj"], "emulator_energy_uj": emu.totals["energy_uj"],
                       "model_leakage_uj": model["leakage_energy_uj"],
                       "emulator_leakage_uj": emu.totals["leakage_energy_uj"],
                       "model_footprint": model["dram_footprint_bytes"], "emulator_footprint": float(res.dram.size),
                       "model_components": components.get("energy_uj", {}),
                       "emulator_components": emu.components.get("energy_uj", {})}
                for name in ACTIVITY:
                    row[f"emulator_{name}"] = counted[name]
                rows.append(row)
    return rows, skipped


def relative_error(model: float, measured: float) -> float:
    return (model - measured) / measured if measured else (0.0 if model == measured else float("inf"))


__all__ = ["agreement_points", "relative_error"]
