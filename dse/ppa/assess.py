"""The PPA figures of a batch of candidates' totals (the analytical stage's, or an emulator
run's): area, energy, power, EDP, inferences per joule, total SRAM and DRAM footprint, and
area and energy by component. One implementation for both evidence kinds: only the
activity and latency they are given differ."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from .components import CostError
from .energy import ACTIVITY, COMPONENTS, Assessment, METRIC_UNITS, STREAM_BALLS, Tables, assess, per_holdings
from .holdings import core_chips, holdings

# The figures `assess_totals` adds to a candidate's totals, in this order.
PPA_METRICS = tuple(METRIC_UNITS)


@dataclass
class PpaResult:
    """One candidate's figures: totals (metric -> value, NaN when missing) and, per
    metric of `BY_COMPONENT`, component -> value; `note`: why figures are missing."""

    totals: dict[str, float] = field(default_factory=dict)
    components: dict[str, dict[str, float]] = field(default_factory=dict)
    note: str = ""


@functools.lru_cache(maxsize=16)
def _tables(calibration_json: str) -> Tables:
    return Tables(json.loads(calibration_json))


def tables_for(calibration: Mapping[str, Mapping] | None) -> Tables:
    """The component tables of one calibration (chip name -> component -> factors), kept
    for the process: a sweep's batches share them."""
    return _tables(json.dumps(calibration or {}, sort_keys=True))


def slow_memories(table, clock_mhz: float, held_shared: bool = True) -> str:
    """A note when CACTI's cycle time of a memory the candidate holds is longer than the
    clock period (the emulator assumes one access a cycle), else ""."""
    period = 1e3 / clock_mhz
    slow = [f"{name} cycles in {sram.cycle_ns:.3g} ns" for name, sram in table.sram.items()
            if sram is not None and sram.cycle_ns > period and (held_shared or name != "shared_sram")]
    if not slow:
        return ""
    return (f"by CACTI, {', '.join(slow)}, longer than the {clock_mhz:g} MHz clock's {period:.3g} ns: the "
            "emulator's one access a cycle is optimistic")


def total_sram_bytes(chip, cores: Mapping[int, object], shared_bytes: float) -> float:
    """Private banks of every core held, the shared memory used in each tile they span (its
    banks whole), and each such tile's cache."""
    private = sum(c.private_sram_bytes for c in cores.values())
    tiles = len({c // chip.cores.tile_size for c in cores})
    shared = 0.0 if np.isnan(shared_bytes) else float(shared_bytes)
    cache = chip.cache.bytes if chip.cache.enabled else 0
    return float(private + tiles * (shared + cache))


@dataclass
class PpaColumns:
    """A batch's PPA figures as columns (one entry a candidate): `totals`, metric ->
    values (`PPA_METRICS`, NaN where not assessed); `area_by` / `energy_by` (n, components);
    `held`, whether each was assessed; `notes`, why figures are missing ("" when none)."""

    totals: dict[str, np.ndarray]
    area_by: np.ndarray
    energy_by: np.ndarray
    held: np.ndarray
    notes: list[str]

    def kept(self) -> np.ndarray:
        """(n, components): the components a candidate has (area > 0 or energy > 0)."""
        return self.held[:, None] & ((self.area_by > 0) | (self.energy_by > 0))

    def components(self, index: int) -> dict[str, dict[str, float]]:
        """One candidate's area and energy by component (`PpaResult.components`)."""
        if not self.held[index]:
            return {}
        kept = [(name, a, e) for name, a, e in zip(COMPONENTS, self.area_by[index].tolist(),
                                                   self.energy_by[index].tolist()) if a > 0 or e > 0]
        return {"area_mm2": {name: a for name, a, _ in kept}, "energy_uj": {name: e for name, _, e in kept}}

    def result(self, index: int) -> PpaResult:
        return PpaResult({m: float(self.totals[m][index]) for m in PPA_METRICS}, self.components(index),
                         self.notes[index])


def assess_columns(chips: Sequence[object], cores: Sequence[Mapping[int, object] | None],
                   totals: Mapping[str, np.ndarray], footprints: Sequence[float],
                   calibration: Mapping[str, Mapping] | None = None, per_op=None,
                   keys: Sequence[object] | None = None) -> PpaColumns:
    """Per candidate (`chips[i]` its chip, `cores[i]` the cores it runs on with their chips,
    None when it cannot be placed; `totals`: name -> per-candidate values of
    ``latency_cycles``, ``dma_bytes``, ``shared_sram_bytes`` and the `ACTIVITY` counts, NaN
    or missing for an infeasible one; `footprints[i]` its DRAM footprint in bytes), its PPA
    figures, as columns. `keys[i]`: a value equal for candidates whose chip and cores are
    the same (their holdings are then made once); `per_op`: a per-op frame given each op's
    energy (``energy_uj``, `op_energy`)."""
    tables = tables_for(calibration)
    n = len(chips)
    distinct: dict = {}  # (key, shared bytes) -> index in `held`
    held: list = []
    why: list[str] = []  # per distinct holdings, why it cannot be priced ("" when it can)
    slow: dict[tuple, str] = {}  # `slow_memories` by (pricing chip, shared banks held)
    notes = [""] * n
    found = [-1] * n  # each candidate's index in `held` (-1: none), as `which` below

    def column(name: str, missing: float = 0.0) -> np.ndarray:
        values = np.asarray(totals[name], dtype=np.float64) if name in totals else np.full(n, missing)
        return values if missing != 0.0 else np.nan_to_num(values, nan=0.0)

    latency = column("latency_cycles", np.nan)
    shared = column("shared_sram_bytes").tolist()
    priced = ~np.isnan(latency)
    for i, (chip, used, ok, own, shared_i) in enumerate(zip(chips, cores, priced.tolist(),
                                                            keys if keys is not None else cores, shared)):
        if used is None or not ok:
            continue
        key = ((own if keys is not None else id(used)), shared_i)
        k = distinct.get(key)
        if k is None:
            h, reason = holdings(chip, used, shared_i), ""
            try:
                tables.check(h)
            except CostError as exc:
                h, reason = None, f"no area or energy: {exc} (chip field {exc.field})"
            else:  # the note reads the pricing chip and whether shared banks are held: once per such pair
                slow_key = (id(h.chip), h.shared_banks > 0)
                if slow_key not in slow:
                    slow[slow_key] = slow_memories(tables.table(h.chip), h.chip.clock_mhz, held_shared=slow_key[1])
                reason = slow[slow_key]
            k = distinct[key] = len(held)
            held.append(h)
            why.append(reason)
        found[i] = k if held[k] is not None else -1
        notes[i] = why[k]
    which = np.array(found, dtype=np.int64)
    activity = {name: column(name) for name in ACTIVITY if name != "dram_bytes"}
    activity["dram_bytes"] = column("dma_bytes")
    parts = per_holdings(held, tables)  # read by the totals and the per-op energy alike
    a: Assessment = assess(held, activity, latency, tables, which, parts)
    if per_op is not None and "candidate" in per_op and len(per_op["candidate"]):
        per_op["energy_uj"] = op_energy(tables, held, which, per_op, parts)
    assessed = which >= 0
    out = {name: np.where(assessed, getattr(a, name), np.nan)
           for name in ("area_mm2", "energy_uj", "leakage_energy_uj", "power_mw", "edp", "inferences_per_joule")}
    # once per distinct holdings (its key holds the shared bytes), read at its first candidate
    at = np.flatnonzero(assessed)
    ks, first = np.unique(which[at], return_index=True)
    sram = np.full(len(held) + 1, np.nan)  # the last entry: none (which -1)
    for k, i in zip(ks.tolist(), at[first].tolist()):
        sram[k] = total_sram_bytes(chips[i], cores[i], shared[i])
    out["total_sram_bytes"] = np.where(assessed, sram[which], np.nan)
    out["dram_footprint_bytes"] = np.where(assessed, np.asarray(footprints, dtype=np.float64), np.nan)
    return PpaColumns({m: out[m] for m in PPA_METRICS}, a.area_by, a.energy_by, assessed, notes)


def assess_totals(chips: Sequence[object], cores: Sequence[Mapping[int, object] | None],
                  totals: Sequence[Mapping[str, float]], footprints: Sequence[float],
                  calibration: Mapping[str, Mapping] | None = None, per_op=None,
                  keys: Sequence[object] | None = None) -> list[PpaResult]:
    """`assess_columns` of candidates whose totals are one mapping each (`totals[i]`), as
    one `PpaResult` a candidate."""
    given = {name for t in totals for name in t}
    columns = {name: np.array([t.get(name, np.nan) for t in totals], dtype=np.float64)
               for name in ("latency_cycles", "shared_sram_bytes", "dma_bytes", *ACTIVITY) if name in given}
    got = assess_columns(chips, cores, columns, footprints, calibration, per_op, keys)
    return [got.result(i) for i in range(len(chips))]


def candidate_cores(cands: list, feasible: Sequence[bool], n_ops: int | None = None,
                    roles: list[str] | None = None) -> tuple[list, list]:
    """Each candidate's cores (`dse.ppa.holdings.core_chips`; None where infeasible), placed
    once per distinct chip and placement, and those keys."""
    parts: dict[int, tuple] = {}  # what of a mapping places it, by mapping object

    def part(m) -> tuple:
        found = parts.get(id(m))
        if found is None:
            found = parts[id(m)] = (m.workers, m.placement, m.requests, m.cuts, m.weights)
        return found

    keys = [(id(c.chip), *part(c.mapping)) for c in cands]
    placed: dict = {}
    cores = []
    for c, ok, key in zip(cands, feasible, keys):
        if key not in placed:
            placed[key] = core_chips(c.chip, c.mapping, n_ops, roles)
        cores.append(placed[key] if ok else None)
    return cores, keys


def assess_candidates(rows: list[dict], cands: list, footprints, ppa_calibration=None, n_ops: int | None = None,
                      roles: list[str] | None = None, per_op=None) -> tuple[list[dict], list[str]]:
    """Each totals row (`summarize`'s, with the activity) given its area, energy and power
    (`dse.ppa.assess_totals`, in place); returns per row its components and a note when a
    figure cannot be had (it is then absent). `cands`: the candidates as costed (placement
    "auto" resolved); `n_ops` / `roles`: what places them (`dse.ppa.holdings.core_chips`)."""
    # candidates of one chip and placement hold the same cores: placed once
    cores, keys = candidate_cores(cands, [r["feasible"] for r in rows], n_ops, roles)
    # the plan's tensors and what the lowering lays out for the products beside them
    footprints = [f + float(r.get("workspace_bytes", 0.0) or 0.0) for f, r in zip(footprints, rows)]
    got = assess_totals([c.chip for c in cands], cores, rows, footprints, ppa_calibration, per_op, keys)
    for row, p in zip(rows, got):
        row.update(p.totals)
    return [p.components for p in got], [p.note for p in got]


def assess_frame(totals, cands: list, footprints, ppa_calibration=None, per_op=None) -> PpaColumns:
    """`assess_candidates` of a totals frame (`summarize`'s, or its columns) as columns: what
    a batch of thousands reads, without a dict a candidate."""
    feasible = np.asarray(totals["feasible"], dtype=bool)
    cores, keys = candidate_cores(cands, feasible.tolist())
    # the plan's tensors and what the lowering lays out for the products beside them
    workspace = np.asarray(totals["workspace_bytes"], dtype=np.float64) if "workspace_bytes" in totals else 0.0
    footprints = np.asarray(footprints, dtype=np.float64) + workspace
    columns = {name: np.asarray(totals[name]) for name in totals}
    return assess_columns([c.chip for c in cands], cores, columns, footprints, ppa_calibration, per_op, keys)


# A per-op frame's columns (`dse.analytical.estimate.OP_COLUMNS`) for each activity.
OP_ACTIVITY = {"macs": "ball_macs", "bank_reads": "bank_reads", "bank_writes": "bank_writes",
               "shared_reads": "shared_reads", "shared_writes": "shared_writes", "core_op_cycles": "core_busy",
               "dram_bytes": "dma_bytes"}


def op_energy(tables, held: Sequence, which: np.ndarray, per_op, parts: tuple | None = None) -> np.ndarray:
    """Each op's energy (uJ) in a per-op frame (its ``candidate`` column indexing `which`,
    each candidate's index in the distinct `held`, -1: none): its actions priced as the
    totals are, plus the candidate's leakage and its cores' idle energy over the op's cycles
    (NaN where the candidate has no holdings). Summed over an SPMD candidate's ops this is
    its energy; a placement whose stages run at once overlaps their ops' cycles, so there
    the sum exceeds the total. `parts`: `per_holdings(held, tables)`, when made already."""
    _, leak_by, price_of, price_table, clock, cores, idle_pj = parts or per_holdings(held, tables)
    leak = leak_by.sum(axis=1)
    price = price_table.sum(axis=2)[price_of]  # an action's price over every component
    at = np.asarray(which, dtype=np.int64)
    rows = np.asarray(per_op["candidate"])  # a frame's column or `estimate_columns`' array alike
    cand = np.where(at < 0, len(held), at)[rows]  # the last row: none
    unit = np.asarray(per_op["unit"])
    pj = np.zeros(len(rows))
    for a, name in enumerate(ACTIVITY):
        if name in OP_ACTIVITY:
            counts = np.asarray(per_op[OP_ACTIVITY[name]], dtype=np.float64)
        elif name.endswith("_busy") and name[:-5] in STREAM_BALLS:
            counts = np.where(unit == name[:-5], np.asarray(per_op["stream_busy"], dtype=np.float64), 0.0)
        else:
            continue
        pj += counts * price[cand, a]
    cycles = np.asarray(per_op["cycles"], dtype=np.float64)
    pj += np.maximum(cores[cand] * cycles - np.asarray(per_op["core_busy"], dtype=np.float64), 0) * idle_pj[cand]
    pj += leak[cand] * cycles / clock[cand] * 1e3
    return pj / 1e6


__all__ = ["PPA_METRICS", "PpaColumns", "PpaResult", "assess_candidates", "assess_columns", "assess_frame",
           "assess_totals", "candidate_cores", "op_energy", "tables_for", "total_sram_bytes"]
