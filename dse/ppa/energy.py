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

import json
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from .components import COMPONENTS, ComponentTable, component_table
from .names import STREAM_BALLS

# Activity names, each priced as (component, action); DRAM bytes are priced twice: the
# DRAM's energy and the DMA engine's and bus's.
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

    def all_components(self) -> list[dict[str, dict[str, float]]]:
        """Per candidate, per metric of `BY_COMPONENT`, the components it has (area > 0 or
        energy > 0), made at once (a batch has thousands)."""
        out = []
        for a_row, e_row in zip(self.area_by.tolist(), self.energy_by.tolist()):
            kept = [(name, a, e) for name, a, e in zip(COMPONENTS, a_row, e_row) if a > 0 or e > 0]
            out.append({"area_mm2": {name: a for name, a, _ in kept}, "energy_uj": {name: e for name, _, e in kept}})
        return out

    def all_totals(self) -> list[dict[str, float]]:
        """Per candidate, its totals (`METRIC_UNITS` but total SRAM and DRAM footprint)."""
        columns = [(name, getattr(self, name).tolist()) for name in
                   ("area_mm2", "energy_uj", "leakage_energy_uj", "power_mw", "edp", "inferences_per_joule")]
        return [dict(zip([c for c, _ in columns], values)) for values in zip(*(v for _, v in columns))]


class Tables:
    """Component tables, made once per distinct content (a sweep over bank counts has many
    chips but few memories to price); looked up per chip object, which a sweep's candidates
    share."""

    KEPT = 8192  # chip objects remembered (each kept alive, so its id names it alone)

    def __init__(self, calibration: Mapping[str, Mapping] | None = None):
        self.calibration = calibration or {}
        self._by_chip: dict[int, tuple[object, tuple]] = {}  # id(chip) -> (chip, content key)
        self._dumps: dict[int, tuple[object, str]] = {}  # id(section) -> (section kept alive, its JSON)
        self._tables: dict[tuple, ComponentTable] = {}
        self._vectors: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        self._prices: dict[tuple, np.ndarray] = {}
        self._parts: dict[tuple, tuple] = {}

    def _factors(self, chip):
        # a core group's chip ("poly.decode") takes its chip's calibration
        return self.calibration.get(chip.name) or self.calibration.get(chip.name.rsplit(".", 1)[0])

    def key(self, chip) -> tuple:
        """What a chip's component table depends on, and which of its components one core has."""
        hit = self._by_chip.get(id(chip))
        if hit is None or hit[0] is not chip:
            if len(self._by_chip) >= self.KEPT:  # a long sweep over chip knobs: start over
                self._by_chip.clear()
                self._dumps.clear()
            balls = tuple((b.kind, b.array_rows, b.array_cols) for b in chip.balls)
            groups = tuple(k for g in chip.cores.groups for k in (g.balls or ()))
            factors = self._factors(chip)
            key = (chip.banks.rows, chip.banks.row_bytes, self._dump(chip.shared_memory), self._dump(chip.cache),
                   self._dump(chip.technology), self._dump(chip.costs),
                   balls, groups, json.dumps(factors, sort_keys=True) if factors else "")
            hit = self._by_chip[id(chip)] = (chip, key)
        return hit[1]

    def _dump(self, section) -> str:
        """A chip section's JSON, once per section object: a sweep's chips share the sections
        no knob sets (`CandidateBuilder.chip_from_sections`)."""
        hit = self._dumps.get(id(section))
        if hit is None or hit[0] is not section:
            hit = self._dumps[id(section)] = (section, section.model_dump_json())
        return hit[1]

    def table(self, chip) -> ComponentTable:
        key = self.key(chip)
        found = self._tables.get(key)
        if found is None:
            found = self._tables[key] = component_table(chip, self._factors(chip))
        return found

    def prices(self, chip) -> np.ndarray:
        """(activity, component) pJ an action of each activity costs each component."""
        key = self.key(chip)
        hit = self._prices.get(key)
        if hit is None:
            table = self.table(chip)
            hit = np.zeros((len(ACTIVITY), C))
            for a, name in enumerate(ACTIVITY):
                for comp, action in PRICES[name]:
                    c = table.components.get(comp)
                    if c is not None:
                        hit[a, INDEX[comp]] = c.actions[action].value
            self._prices[key] = hit
        return hit

    def _core_parts(self, chip) -> tuple:
        """(area, leakage) vectors of one core without its banks, of one private bank, of one
        shared bank, of a tile's cache, and of what a chip has once (bus, DRAM interface)."""
        key = self.key(chip)
        hit = self._parts.get(key)
        if hit is None:
            per = self.table(chip).components

            def vec(*named) -> tuple[np.ndarray, np.ndarray]:
                area, leak = np.zeros(C), np.zeros(C)
                for name, area_mm2, leak_mw in named:
                    area[INDEX[name]] += area_mm2
                    leak[INDEX[name]] += leak_mw
                return area, leak

            def of(name):
                return (name, per[name].area_mm2.value, per[name].leakage_mw.value) if name in per else (name, 0, 0)

            core = vec(of("cores"), of("dma"), *(of(b.kind) for b in chip.balls))
            bus = per["dma"].extra_area_mm2.value
            density = per["dma"].leakage_mw.value / max(per["dma"].area_mm2.value, 1e-30)
            once = vec(("dma", bus, bus * density), of("dram"))
            hit = self._parts[key] = (core, vec(of("private_sram")), vec(of("shared_sram")), vec(of("cache")), once)
        return hit

    def check(self, h: Holdings) -> None:
        """CostError when `h` cannot be priced (a chip of it whose components cannot be had)."""
        for core_chip, _ in h.cores:
            self._core_parts(core_chip)
        self._core_parts(h.chip)
        self.prices(h.chip)

    def holdings_vectors(self, h: Holdings) -> tuple[np.ndarray, np.ndarray]:
        """(area mm2, leakage mW) by component of what `h` holds."""
        key = h.key()
        hit = self._vectors.get(key)
        if hit is None:
            area, leak = self.holdings_matrix([h])
            hit = self._vectors[key] = (area[0], leak[0])
        return hit

    def holdings_matrix(self, held: Sequence[Holdings]) -> tuple[np.ndarray, np.ndarray]:
        """`holdings_vectors` of many holdings as rows, computed together (a sweep's batch has
        hundreds): the same operations, element by element, in the same order."""
        g = len(held)
        area, leak = np.zeros((g, C)), np.zeros((g, C))
        if not g:
            return area, leak
        rows: dict[int, int] = {}  # id(chip) -> its row in `parts` (chips shared by many holdings)
        parts: list[tuple] = []

        def row(chip) -> int:
            at = rows.get(id(chip))
            if at is None:
                at = rows[id(chip)] = len(parts)
                parts.append(self._core_parts(chip))
            return at

        def stacked(i: int, j: int) -> np.ndarray:  # parts' i-th (area, leakage) pair's j-th, as rows
            return np.array([p[i][j] for p in parts])

        # each holdings' j-th core entry, for all that have one, in entry order
        for j in range(max(len(h.cores) for h in held)):
            ks = [k for k, h in enumerate(held) if len(h.cores) > j]
            at = np.array([row(held[k].cores[j][0]) for k in ks])
            count = np.array([held[k].cores[j][1] for k in ks], dtype=np.float64)[:, None]
            banks = np.array([held[k].cores[j][0].banks.count for k in ks], dtype=np.float64)[:, None]
            (ca, cl), (ba, bl) = (stacked(0, 0), stacked(0, 1)), (stacked(1, 0), stacked(1, 1))
            area[ks] += count * (ca[at] + banks * ba[at])
            leak[ks] += count * (cl[at] + banks * bl[at])
        at = np.array([row(h.chip) for h in held])
        shared = np.array([h.tiles * h.shared_banks for h in held], dtype=np.float64)[:, None]
        tiles = np.array([h.tiles for h in held], dtype=np.float64)[:, None]
        (sa, sl), (xa, xl), (oa, ol) = ((stacked(i, 0), stacked(i, 1)) for i in (2, 3, 4))
        area += shared * sa[at] + tiles * xa[at] + oa[at]
        leak += shared * sl[at] + tiles * xl[at] + ol[at]
        return area, leak


def per_holdings(holdings: Sequence[Holdings | None], tables: Tables) -> tuple[np.ndarray, ...]:
    """Per distinct holdings, and a last row of NaN for none: its area and leakage by
    component, the index of its prices in a table of the distinct prices (activity x
    component; its first entry zeros, the last row's), that table, clock, core count and
    idle-cycle price."""
    g = len(holdings)
    area, leak = np.full((g + 1, C), np.nan), np.full((g + 1, C), np.nan)
    price_of = np.zeros(g + 1, dtype=np.int64)
    price_table = [np.zeros((len(ACTIVITY), C))]
    priced: dict[int, int] = {}  # id of a chip's prices (`Tables.prices`, shared by chips alike) -> its entry
    clock, cores, idle = np.full(g + 1, np.nan), np.zeros(g + 1), np.zeros(g + 1)
    by_chip: dict[int, tuple] = {}  # the pricing chip's price entry, clock and idle price (holdings share a few)
    given = [k for k, h in enumerate(holdings) if h is not None]
    area[given], leak[given] = tables.holdings_matrix([holdings[k] for k in given])
    for k, h in enumerate(holdings):
        if h is None:
            continue
        of_chip = by_chip.get(id(h.chip))
        if of_chip is None:
            prices = tables.prices(h.chip)
            entry = priced.get(id(prices))
            if entry is None:
                entry = priced[id(prices)] = len(price_table)
                price_table.append(prices)
            of_chip = by_chip[id(h.chip)] = (
                entry, h.chip.clock_mhz, tables.table(h.chip).components["cores"].actions["idle_cycle"].value)
        price_of[k], clock[k], idle[k] = of_chip
        cores[k] = sum(count for _, count in h.cores)
    return area, leak, price_of, np.stack(price_table), clock, cores, idle


def priced_actions(counts: np.ndarray, price_at: np.ndarray, price_table: np.ndarray) -> np.ndarray:
    """(candidate, component) pJ of `counts` (candidate, activity), candidate i at the prices
    ``price_table[price_at[i]]``: one pass over the activities per distinct prices (a sweep's
    thousands of candidates have a few), with no (candidate, activity, component) array
    (a 2,320-candidate batch's would be 3.6 MB of fresh pages), each element summed over the
    activities in order whatever the batch."""
    out = np.zeros((len(counts), price_table.shape[2]))
    for p in np.unique(price_at).tolist():
        rows = np.flatnonzero(price_at == p)
        got, of_rows = out[rows], counts[rows]
        for a, prices in enumerate(price_table[p]):
            got += of_rows[:, a, None] * prices
        out[rows] = got
    return out


def assess(holdings: Sequence[Holdings | None], activity: Mapping[str, np.ndarray], latency_cycles: np.ndarray,
           tables: Tables | None = None, which: np.ndarray | None = None, parts: tuple | None = None) -> Assessment:
    """Area, energy and power of every candidate. `holdings`: the distinct holdings, and
    `which` per candidate the index of its own in them (-1: not assessed, NaN); without
    `which`, one holdings a candidate. `activity`: `ACTIVITY` name -> per-candidate counts
    (missing names count 0). `parts`: `per_holdings(holdings, tables)`, when made already."""
    tables = tables or Tables()
    which = np.arange(len(holdings)) if which is None else np.asarray(which, dtype=np.int64)
    n = len(which)
    area_g, leak_g, price_of, price_table, clock_g, cores_g, idle_g = parts or per_holdings(holdings, tables)
    at = np.where(which < 0, len(holdings), which)  # the last row: NaN, not assessed
    latency = np.asarray(latency_cycles, dtype=np.float64)
    counts = np.stack([np.asarray(activity.get(name, np.zeros(n)), dtype=np.float64) for name in ACTIVITY], axis=1)
    dynamic = priced_actions(counts, price_of[at], price_table)  # each candidate's actions at its prices (pJ)
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
           "assess", "emulator_activity", "per_holdings"]
