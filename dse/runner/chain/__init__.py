"""The runner's stages, as one named chain, one stage a file:

    capture -> frontend -> plan -> analytical -> prune -> emulator -> numerics -> record

Each stage is a plain function with typed inputs and outputs; none knows of samplers or of
the store. CHAIN is the order that runs: `sweep_into_store` runs the SETUP stages once
(capture, frontend, plan: before the store is opened), and `Sweep` drives the rest in
CHAIN's order, each on the output of the one before (see `Sweep._drive`), so inserting,
removing or reordering a stage is a change to CHAIN (or to the chain a sweep is given).
`evaluate_items` (what pool and Dask workers run) calls the evaluation stages, EVALUATION,
for the run stage a work item belongs to. Capture and frontend run once per sweep
(frontend also in a worker, for a quantization granularity not prepared up front), plan
once per graph, analytical once per chunk of a batch, prune once, emulator and numerics
once per emulated candidate, record once per store transaction.
"""

from __future__ import annotations

from .analytical import ANALYTICAL, analytical
from .capture import CAPTURE, capture
from .emulator import EMULATOR, emulator
from .frontend import FRONTEND, frontend
from .numerics import NUMERICS, numerics
from .plan import PLAN, plan
from .prune import PRUNE, Pruning, prune
from .record import RECORD, record
from .stage import Stage, run_stages

CHAIN: tuple[Stage, ...] = (CAPTURE, FRONTEND, PLAN, ANALYTICAL, PRUNE, EMULATOR, NUMERICS, RECORD)

# The stages run once, before the driver's loop (they make the workload the driver's
# executor is built on); the driver runs every other stage of its chain.
SETUP: tuple[Stage, ...] = (CAPTURE, FRONTEND, PLAN)

def evaluation(chain: tuple[Stage, ...]) -> dict[str, tuple[Stage, ...]]:
    """The stages a worker runs for a work item, by the run stage it belongs to (the store's
    `stage` of the run: analytical or emulator): the chain's analytical stage for a batch of
    candidates; for one emulated candidate the chain's stages from the emulator up to the
    record stage, each on the output of the one before (so a stage inserted there runs in
    the worker, per candidate)."""
    names = [stage.name for stage in chain]
    end = names.index(RECORD.name) if RECORD.name in names else len(chain)
    per_candidate = chain[names.index(EMULATOR.name):end] if EMULATOR.name in names else ()
    return {"analytical": tuple(s for s in chain if s.name == ANALYTICAL.name), "emulator": per_candidate}


EVALUATION: dict[str, tuple[Stage, ...]] = evaluation(CHAIN)

__all__ = ["Stage", "CHAIN", "SETUP", "EVALUATION", "evaluation", "CAPTURE", "FRONTEND", "PLAN", "ANALYTICAL", "PRUNE",
           "EMULATOR", "NUMERICS", "RECORD", "Pruning", "run_stages", "capture", "frontend", "plan", "analytical",
           "prune", "emulator", "numerics", "record"]
