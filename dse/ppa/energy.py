"""Area, energy and power of candidates, from what they hold and what they do.

What a candidate holds (`Holdings`): the cores it runs on (each with its private banks, its
Balls, its DMA engine), the shared-memory banks it uses in each tile its cores span (each
whole), each such tile's cache, and once a chip the system bus and the DRAM interface. Its
area is the sum of those instances' areas; its leakage power likewise.

What it does (its activity, `ACTIVITY`): counted twice, like cycles, by the analytical model
from the plan (`dse.analytical.estimate.TOTAL_ACTIVITY`) and by the emulator as counters
(`emulator_activity`). Energy is ``sum(actions x energy an action) + leakage x latency``,
per component; each core is charged its core-op cycles as active and the rest of the run's
cycles as idle. Power is energy over latency.

Every candidate is assessed at once (numpy over candidates); the component tables are made
once per distinct chip (`dse.ppa.components`, CACTI behind them cached by content).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from .components import BALLS, COMPONENTS, ComponentTable, component_table

# Activity names, each priced as (component, action); DRAM bytes are priced twice: the
# DRAM's energy and the DMA engine's and bus's.
STREAM_BALLS = ("im2col", "transpose", "relu", "fp2int", "int2fp", "mxfp2int")
ACTIVITY = ("macs", "vec_macs", "bank_reads", "bank_writes", "shared_reads", "shared_writes", "core_op_cycles",
            "dram_bytes", *(f"{kind}_busy" for kind in STREAM_BALLS))
PRICES: dict[str, tuple[tuple[str, str], ...]] = {
    "macs": (("matrix", "mac"),),
    "vec_macs": (("vecmatmul", "mac"),),
    "bank_reads": (("private_sram", "read"),),
    "bank_writes": (("private_sram", "write"),),
    "shared_reads": (("shared_sram", "read"),),
    "shared_writes": (("shared_sram", "write"),),
    "core_op_cycles": (("cores", "active_cycle"),),
    "dram_bytes": (("dma", "byte"), ("dram", "byte")),
    **{f"{kind}_busy": ((kind, "busy_cycle"),) for kind in STREAM_BALLS},
}
C = len(COMPONENTS)
INDEX = {name: i for i, name in enumerate(COMPONENTS)}

# The metrics an assessment gives, with their units (totals; area and energy also by component).
METRIC_UNITS = {
    "area_mm2": "mm2", "energy_uj": "uJ", "leakage_energy_uj": "uJ", "power_mw": "mW", "edp": "uJ*us",
    "inferences_per_joule": "1/J", "total_sram_bytes": "bytes", "dram_footprint_bytes": "bytes",
}
BY_COMPONENT = ("area_mm2", "energy_uj")


@dataclass(frozen=True)
class Holdings:
    """What one candidate's chip is made of."""

    chip: object  # the chip whose per-action figures price the activity (and whose clock times it)
    cores: tuple  # ((core chip, how many cores of it), ...)
    tiles: int  # tiles of cores its cores span
    shared_banks: int  # shared-memory banks it uses in each of those tiles

    def key(self) -> tuple:
        return (id(self.chip), tuple((id(c), n) for c, n in self.cores), self.tiles, self.shared_banks)


@dataclass
class Assessment:
    """Per candidate (arrays of length n; NaN where a figure is missing, e.g. infeasible)."""

    area_mm2: np.ndarray
    energy_uj: np.ndarray
    leakage_energy_uj: np.ndarray
    power_mw: np.ndarray
    edp: np.ndarray  # energy (uJ) x latency (us)
    inferences_per_joule: np.ndarray
    area_by: np.ndarray  # (n, components) mm2
    energy_by: np.ndarray  # (n, components) uJ
    latency_us: np.ndarray

    def totals(self, i: int) -> dict[str, float]:
        return {"area_mm2": float(self.area_mm2[i]), "energy_uj": float(self.energy_uj[i]),
                "leakage_energy_uj": float(self.leakage_energy_uj[i]), "power_mw": float(self.power_mw[i]),
                "edp": float(self.edp[i]), "inferences_per_joule": float(self.inferences_per_joule[i])}

    def components(self, i: int) -> dict[str, dict[str, float]]:
        """Per metric of `BY_COMPONENT`, the components the candidate has (area > 0 or energy > 0)."""
        out: dict[str, dict[str, float]] = {"area_mm2": {}, "energy_uj": {}}
        for k, name in enumerate(COMPONENTS):
            a, e = float(self.area_by[i, k]), float(self.energy_by[i, k])
            if (a > 0 or e > 0) and not (math.isnan(a) and math.isnan(e)):
                out["area_mm2"][name] = a
                out["energy_uj"][name] = e
        return out


class Tables:
    """Component tables by chip, made once per chip object (a sweep's candidates share them)."""

    KEPT = 8192  # chips kept (each keeps its object alive, so its id names it alone)

    def __init__(self, calibration: Mapping[str, Mapping] | None = None):
        self.calibration = calibration or {}
        self._tables: dict[int, tuple[object, ComponentTable]] = {}
        self._vectors: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        self._prices: dict[int, np.ndarray] = {}

    def table(self, chip) -> ComponentTable:
        hit = self._tables.get(id(chip))
        if hit is None or hit[0] is not chip:
            if len(self._tables) >= self.KEPT:  # a long sweep over chip knobs: start over
                self._tables.clear(), self._vectors.clear(), self._prices.clear()
            # a core group's chip ("poly.decode") takes its chip's calibration
            factors = self.calibration.get(chip.name) or self.calibration.get(chip.name.rsplit(".", 1)[0])
            hit = self._tables[id(chip)] = (chip, component_table(chip, factors))
        return hit[1]

    def prices(self, chip) -> np.ndarray:
        """(activity, component) pJ an action of each activity costs each component."""
        hit = self._prices.get(id(chip))
        if hit is None:
            table = self.table(chip)
            hit = np.zeros((len(ACTIVITY), C))
            for a, name in enumerate(ACTIVITY):
                for comp, action in PRICES[name]:
                    c = table.components.get(comp)
                    if c is not None:
                        hit[a, INDEX[comp]] = c.actions[action].value
            self._prices[id(chip)] = hit
        return hit

    def holdings_vectors(self, h: Holdings) -> tuple[np.ndarray, np.ndarray]:
        """(area mm2, leakage mW) by component of what `h` holds."""
        key = h.key()
        hit = self._vectors.get(key)
        if hit is None:
            area, leak = np.zeros(C), np.zeros(C)
            for core_chip, count in h.cores:
                table = self.table(core_chip)
                per = table.components
                for name, n in (("private_sram", core_chip.banks.count), ("cores", 1), ("dma", 1),
                                *((kind, 1) for kind in BALLS if core_chip.ball(kind) is not None)):
                    area[INDEX[name]] += count * n * per[name].area_mm2.value
                    leak[INDEX[name]] += count * n * per[name].leakage_mw.value
            table = self.table(h.chip)
            per = table.components
            if h.shared_banks and "shared_sram" in per:
                n = h.tiles * h.shared_banks
                area[INDEX["shared_sram"]] += n * per["shared_sram"].area_mm2.value
                leak[INDEX["shared_sram"]] += n * per["shared_sram"].leakage_mw.value
            if "cache" in per:
                area[INDEX["cache"]] += h.tiles * per["cache"].area_mm2.value
                leak[INDEX["cache"]] += h.tiles * per["cache"].leakage_mw.value
            bus = per["dma"].extra_area_mm2.value
            density = per["dma"].leakage_mw.value / max(per["dma"].area_mm2.value, 1e-30)
            area[INDEX["dma"]] += bus
            leak[INDEX["dma"]] += bus * density
            area[INDEX["dram"]] += per["dram"].area_mm2.value
            leak[INDEX["dram"]] += per["dram"].leakage_mw.value
            hit = self._vectors[key] = (area, leak)
        return hit


def assess(holdings: Sequence[Holdings | None], activity: Mapping[str, np.ndarray], latency_cycles: np.ndarray,
           tables: Tables | None = None, which: np.ndarray | None = None) -> Assessment:
    """Area, energy and power of every candidate. `holdings`: the distinct holdings, and
    `which` per candidate the index of its own in them (-1: not assessed, NaN); without
    `which`, one holdings a candidate. `activity`: `ACTIVITY` name -> per-candidate counts
    (missing names count 0)."""
    tables = tables or Tables()
    which = np.arange(len(holdings)) if which is None else np.asarray(which, dtype=np.int64)
    n = len(which)
    g = len(holdings)
    # per distinct holdings: its area and leakage by component, its prices, clock, cores, idle price
    area_g, leak_g = np.full((g + 1, C), np.nan), np.full((g + 1, C), np.nan)
    prices_g = np.zeros((g + 1, len(ACTIVITY), C))
    clock_g, cores_g, idle_g = np.full(g + 1, np.nan), np.zeros(g + 1), np.zeros(g + 1)
    for k, h in enumerate(holdings):
        if h is None:
            continue
        area_g[k], leak_g[k] = tables.holdings_vectors(h)
        prices_g[k] = tables.prices(h.chip)
        clock_g[k] = h.chip.clock_mhz
        cores_g[k] = sum(count for _, count in h.cores)
        idle_g[k] = tables.table(h.chip).components["cores"].actions["idle_cycle"].value
    at = np.where(which < 0, g, which)  # row g: NaN, not assessed
    latency = np.asarray(latency_cycles, dtype=np.float64)
    counts = np.stack([np.asarray(activity.get(name, np.zeros(n)), dtype=np.float64) for name in ACTIVITY], axis=1)
    dynamic = np.zeros((n, C))
    for k in np.unique(at):  # one price table a group: (candidates, activities) x (activities, components)
        rows = at == k
        dynamic[rows] = counts[rows] @ prices_g[k]
    # the cores' idle cycles: every core of the run's cycles not spent in core ops
    idle = np.maximum(cores_g[at] * latency - counts[:, ACTIVITY.index("core_op_cycles")], 0)
    dynamic[:, INDEX["cores"]] += idle * idle_g[at]
    area_by, leak_by = area_g[at], leak_g[at]
    latency_us = latency / clock_g[at]
    leakage = leak_by * latency_us[:, None] * 1e3  # mW x us = nJ -> pJ
    energy_by = (dynamic + leakage) / 1e6  # uJ
    energy = energy_by.sum(axis=1)
    area = area_by.sum(axis=1)
    leakage_uj = leakage.sum(axis=1) / 1e6
    with np.errstate(divide="ignore", invalid="ignore"):
        power = energy / latency_us * 1e3  # uJ / us = W
        per_joule = 1e6 / energy
    return Assessment(area, energy, leakage_uj, power, energy * latency_us, per_joule, area_by, energy_by, latency_us)


def emulator_activity(counters) -> dict[str, float]:
    """A run's activity from the emulator's counters (`emulator.counters`)."""
    out = dict.fromkeys(ACTIVITY, 0.0)
    for row in counters:
        name, where = row.name, row.where
        if name in ("rows_read", "rows_written"):
            shared = isinstance(where.get("bank"), str)
            key = ("shared_" if shared else "bank_") + ("reads" if name == "rows_read" else "writes")
            out[key] += row.value
        elif name == "ball_macs":
            out["macs" if where.get("ball") == "matrix" else "vec_macs"] += row.value
        elif name == "ball_busy_cycles" and where.get("ball") in STREAM_BALLS:
            out[f"{where['ball']}_busy"] += row.value
        elif name == "core_op_cycles":
            out["core_op_cycles"] += row.value
        elif name in ("dma_bytes_in", "dma_bytes_out"):
            out["dram_bytes"] += row.value
    return out


__all__ = ["ACTIVITY", "Assessment", "BY_COMPONENT", "Holdings", "METRIC_UNITS", "PRICES", "STREAM_BALLS", "Tables",
           "assess", "emulator_activity"]
