"""A recorded candidate's program emitted again, and a recorded run replayed.

`emit_recorded` rebuilds what the sweep's emulator stage lowered for a candidate - its
chip and mapping from the store, its experiment's workload through the recipe's frontend
steps (`Workload.emulation_for`, the sweep's own code) - and emits it as the stage does
(`emulation.emit`): `dse show c<ID> --program / --banks` list that program.

`replay` runs a recorded run's stored inputs through that program again and says whether
it reproduces bit for bit: every output's bytes, and the identities the run recorded
(`replay.json`: sha256 of the program, the DRAM image and the weights); which one differs
when one does.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass, field

import numpy as np

import emulator
from emulator.chip import chip_from_dict

from ..errors import InputError
from ..mapping import Candidate, mapping_from_dict
from .emulation import emit, prepare_emulation, prepare_placed
from .stages import Workload


def recorded_work(store, cand: dict):
    """The emulation workload (`Workload.emulation_for`) and the `Candidate` of a stored
    candidate (`store.candidate`'s dict), as the sweep's emulator stage had them."""
    exp = store.experiment(cand["experiment_id"])
    parts = exp.get("workload") or {}
    recipe, params = exp["workload_recipe"], dict(parts.get("params") or {})
    candidate = Candidate(chip_from_dict(cand["config"]), mapping_from_dict(cand["mapping"]))
    work = Workload(graph=None, recipe=recipe, params=params)
    stages = parts.get("stages") or []
    if stages:  # a staged workload: every stage, the experiment's own first
        staged = [(stages[0]["role"], recipe, params)] + [(s["role"], s["recipe"], s["params"]) for s in stages[1:]]
        work.stages = [(role, None) for role, _, _ in staged]
        work.placed_emulation = prepare_placed(staged)
    elif candidate.mapping.quantize_choice is None and not candidate.mapping.workload:
        work.emulation = prepare_emulation(recipe, params)  # what the sweep prepares up front
    return work.emulation_for(candidate.mapping.quantize_choice, candidate.mapping.workload), candidate


def emit_recorded(store, cand: dict, inputs: dict | None = None):
    """The program the emulator stage emits for a stored candidate (`Emitted`), on the
    workload's own inputs or on `inputs` (by name, as a run stored them). Raises `Infeasible`."""
    work, candidate = recorded_work(store, cand)
    return emit(work, candidate, inputs)


def recorded_digests(store, cand_id: int) -> tuple[int | None, dict | None]:
    """The latest emulator run of a candidate that recorded its identities: (run id, its
    `replay.json`), or (None, None)."""
    rows = [a for a in store.artifact_rows(candidate=cand_id) if a["name"] == "replay.json" and a["run_id"] is not None]
    if not rows:
        return None, None
    latest = max(rows, key=lambda a: a["run_id"])
    return int(latest["run_id"]), json.loads(store.artifact_path(latest["sha256"]).read_bytes())


@dataclass
class Replayed:
    run_id: int
    reproduced: bool  # every output and every recorded identity equal
    differing: list[str] = field(default_factory=list)  # what differs: a digest's name, "output <name>"
    digests: dict = field(default_factory=dict)  # the rerun's
    recorded: dict = field(default_factory=dict)  # the run's
    outputs: int = 0
    cycles: int = 0

    def line(self) -> str:
        if self.reproduced:
            return (f"run {self.run_id}: reproduced bit for bit ({self.outputs} output(s); program, DRAM image and "
                    f"weights sha256 equal; {self.cycles:,} cycles)")
        return f"run {self.run_id}: NOT reproduced: {', '.join(self.differing)} differ"


def _npy(store, row: dict) -> np.ndarray:
    return np.load(io.BytesIO(store.artifact_path(row["sha256"]).read_bytes()), allow_pickle=False)


def replay(store, run_id: int) -> Replayed:
    """Re-emulate run `run_id` from its stored inputs (bad input when it has none: exit 2)."""
    run = store.run_row(run_id)
    arts = store.artifact_rows(run=run_id)
    stored_inputs = {a["name"].removeprefix("inputs/").removesuffix(".npy"): a for a in arts if a["role"] == "inputs"}
    manifest_row = next((a for a in arts if a["name"] == "replay.json"), None)
    if not stored_inputs or manifest_row is None:
        raise InputError(store.url, "run", f"r{run_id}",
                         f"a run that stored its inputs (r{run_id}, stage {run['stage']}, status {run['status']}, "
                         "stored none: an emulator run keeps them, within the spec's evidence budget)")
    manifest = json.loads(store.artifact_path(manifest_row["sha256"]).read_bytes())
    missing = [n for n in manifest["inputs"] if n not in stored_inputs]
    if missing:
        raise InputError(store.url, "run", f"r{run_id}", f"a run whose inputs are all stored (missing: {missing})")
    inputs = {name: _npy(store, stored_inputs[name]) for name in manifest["inputs"]}
    emitted = emit_recorded(store, store.candidate(int(run["candidate_id"])), inputs)
    digests = emitted.digests()
    result = emulator.run(emitted.program, emitted.candidate.chip, emitted.image, mode=manifest.get("mode", "overlapped"))
    outputs = emitted.outputs(result.dram)
    recorded = manifest["digests"]
    differing = [name for name, value in recorded.items() if value is not None and digests.get(name) != value]
    stored_outputs = {a["name"].removeprefix("outputs/").removesuffix(".npy"): a for a in arts
                      if a["role"] == "outputs" and a["name"].startswith("outputs/")}
    for name, want in manifest["outputs"].items():
        got = outputs.get(name)
        row = stored_outputs.get(name)
        same = got is not None and list(got.shape) == want["shape"] and str(got.dtype) == want["dtype"]
        if same and row is not None:  # the stored file, byte for byte
            stored = _npy(store, row)
            same = stored.dtype == got.dtype and np.array_equal(stored.view(np.uint8), np.ascontiguousarray(got).view(np.uint8))
        elif same:  # the file is gone (the evidence budget): its recorded digest

            same = hashlib.sha256(np.ascontiguousarray(got).tobytes()).hexdigest() == want["sha256"]
        if not same:
            differing.append(f"output {name}")
    return Replayed(run_id, not differing, differing, digests, recorded, len(outputs), int(result.cycles))


__all__ = ["Replayed", "emit_recorded", "recorded_digests", "recorded_work", "replay"]
