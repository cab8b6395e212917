"""The chip's components and what each costs: area, energy per action, leakage power.

One table a chip (`component_table`), every figure with its source: a value the chip
config gives (``[costs.<component>]``), else its default (`emulator.costs.DEFAULTS`: CACTI
for SRAM, published tables for logic and DRAM, assumed where nobody published one), scaled
from the node it was given at to the chip's (`Technology.area_exponent`,
`energy_exponent`), then multiplied by a calibration's per-component factor when one is
given (`dse calibrate --evidence synth_area|power`).

Figures are per instance: a private bank, a shared-memory bank, a tile's cache, a core's
Ball, a core, a core's DMA engine, the chip's system bus and DRAM interface. What a
candidate holds of each, and what it does with them, is `dse.ppa.energy`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from emulator.costs import CITED, DEFAULTS

from ..errors import InputError
from .cacti import CactiError, SramGeometry, sram_figures
from .names import BALLS, COMPONENTS, INSTANCE

class CostError(Exception):
    """A component's figure cannot be had (CACTI cannot run or organise the memory):
    `field` names the chip config field that would give it, `value` the geometry."""

    def __init__(self, field: str, value, message: str):
        super().__init__(message)
        self.field, self.value = field, value


@dataclass(frozen=True)
class Figure:
    value: float
    unit: str
    source: str


@dataclass
class Component:
    name: str
    area_mm2: Figure  # one instance
    leakage_mw: Figure  # one instance
    actions: dict[str, Figure] = field(default_factory=dict)  # pJ an action
    extra_area_mm2: Figure | None = None  # once a chip beside the instances (the system bus)
    notes: str = ""


@dataclass
class ComponentTable:
    chip: str
    node_nm: int
    sram_cell: str
    temperature_k: int
    components: dict[str, Component]
    sram: dict[str, object] = field(default_factory=dict)  # CACTI's figures of each memory (access and cycle time)

    def rows(self) -> list[dict]:
        """One row a figure: component, figure, value, unit, source (`dse chips costs`)."""
        out = []
        for name in COMPONENTS:
            comp = self.components.get(name)
            if comp is None:
                continue
            figures = [("area_mm2", comp.area_mm2), ("leakage_mw", comp.leakage_mw)]
            figures += [(f"{action}_pj", f) for action, f in comp.actions.items()]
            if comp.extra_area_mm2 is not None:
                figures.append(("bus_area_mm2", comp.extra_area_mm2))
            for what, f in figures:
                out.append({"component": name, "figure": what, "value": f.value, "unit": f.unit, "source": f.source,
                            "instance": INSTANCE[name]})
        return out


def technology(chip) -> dict:
    """The chip's technology with every default filled in."""
    t = chip.technology
    return {k: (getattr(t, k) if getattr(t, k) is not None else d.value) for k, d in DEFAULTS["technology"].items()}


def _given(chip, section: str, name: str):
    return getattr(getattr(chip.costs, section), name)


def _figure(chip, tech: dict, section: str, name: str, unit: str, kind: str, node_field: str = "node_nm",
            scale: float = 1.0) -> Figure:
    """A logic figure: the config's value (given at the chip's node, as is), else the
    default scaled from its node to the chip's. `kind`: "area", "energy" or "none"."""
    given = _given(chip, section, name)
    if given is not None:
        return Figure(float(given) * scale, unit, f"chip config (costs.{section}.{name})")
    default = DEFAULTS[section][name]
    ref = _given(chip, section, node_field) if node_field else None
    ref = ref if ref is not None else (DEFAULTS[section][node_field].value if node_field else tech["node_nm"])
    exponent = {"area": tech["area_exponent"], "energy": tech["energy_exponent"], "none": 0.0}[kind]
    factor = (tech["node_nm"] / ref) ** exponent if kind != "none" else 1.0
    how = CITED[default.source]
    if factor != 1.0:
        how += f"; scaled {ref} -> {tech['node_nm']} nm (x{factor:.3g})"
    return Figure(float(default.value) * factor * scale, unit, how)


def _leakage(chip, tech: dict, section: str, area: Figure, field_name: str = "leakage_mw") -> Figure:
    given = _given(chip, section, field_name)
    if given is not None:
        return Figure(float(given), "mW", f"chip config (costs.{section}.{field_name})")
    density = tech["logic_leakage_mw_per_mm2"]
    return Figure(area.value * density, "mW", f"area x technology.logic_leakage_mw_per_mm2 ({density:g} mW/mm2, assumed)")


def _sram(chip, name: str, section: str, geometry: SramGeometry, field_path: str, value) -> tuple[Component, object]:
    """An SRAM component from CACTI, each figure the config gives taking its place."""
    given = {name: _given(chip, section, name) for name in ("area_mm2", "read_pj", "write_pj", "leakage_mw")}
    cacti = None
    if any(v is None for v in given.values()):
        try:
            cacti = sram_figures(geometry)
        except CactiError as exc:
            raise CostError(field_path, value, str(exc)) from None
    source = f"CACTI 7: {geometry.describe()}"

    def pick(name: str, unit: str) -> Figure:
        if given[name] is not None:
            return Figure(float(given[name]), unit, f"chip config (costs.{section}.{name})")
        return Figure(float(getattr(cacti, name)), unit, source)

    comp = Component(name, pick("area_mm2", "mm2"), pick("leakage_mw", "mW"),
                     {"read": pick("read_pj", "pJ"), "write": pick("write_pj", "pJ")})
    return comp, cacti


def component_table(chip, calibration: Mapping[str, Mapping[str, float]] | None = None) -> ComponentTable:
    """Every component's figures for `chip` (`calibration`: per component, an ``area`` and
    an ``energy`` factor, applied to the figures before they are used). Raises `CostError`
    when an SRAM figure is needed and CACTI cannot give it."""
    tech = technology(chip)
    comps: dict[str, Component] = {}
    sram: dict[str, object] = {}
    node, cell, temp = tech["node_nm"], tech["sram_cell"], tech["temperature_k"]
    b, sm, c = chip.banks, chip.shared_memory, chip.cache
    memories = [  # (component, its cost section, geometry, the field CACTI's refusal names, its value)
        ("private_sram", "banks", SramGeometry(b.rows * b.row_bytes, b.row_bytes, node, cell, temp), "banks.rows",
         {"banks.rows": b.rows, "banks.row_bytes": b.row_bytes})]
    if sm.enabled:
        memories.append(("shared_sram", "shared_memory", SramGeometry(sm.rows * sm.row_bytes, sm.row_bytes, node, cell,
                                                                      temp), "shared_memory.rows",
                         {"shared_memory.rows": sm.rows, "shared_memory.row_bytes": sm.row_bytes}))
    if c.enabled:
        memories.append(("cache", "cache", SramGeometry(c.bytes, 64, node, cell, temp, ways=c.ways), "cache.bytes",
                         {"cache.bytes": c.bytes, "cache.ways": c.ways}))
    for name, section, geometry, field_path, value in memories:
        comps[name], sram[name] = _sram(chip, name, section, geometry, field_path, value)
    if "cache" in comps:  # the emulator models no cache access: area and leakage only
        comps["cache"].actions = {}
        comps["cache"].notes = "area and leakage only: the emulator does not model the cache's accesses"
    for kind in BALLS:
        ball = chip.ball(kind)
        if ball is None and not any(kind in (g.balls or ()) for g in chip.cores.groups):
            continue
        if kind in ("matrix", "vecmatmul"):
            pes = (ball.array_rows * ball.array_cols) if ball is not None else 256
            pe = _figure(chip, tech, kind, "pe_area_um2", "um2", "area")
            fixed = _figure(chip, tech, kind, "fixed_area_um2", "um2", "area")
            area = Figure((pe.value * pes + fixed.value) / 1e6, "mm2",
                          f"{pes} PEs x {pe.value:.4g} um2 ({pe.source}) + {fixed.value:.4g} um2 ({fixed.source})")
            comps[kind] = Component(kind, area, _leakage(chip, tech, kind, area),
                                    {"mac": _figure(chip, tech, kind, "mac_pj", "pJ", "energy")})
        else:
            lane = _figure(chip, tech, kind, "area_um2", "um2", "area")
            area = Figure(lane.value / 1e6, "mm2", lane.source)
            comps[kind] = Component(kind, area, _leakage(chip, tech, kind, area),
                                    {"busy_cycle": _figure(chip, tech, kind, "cycle_pj", "pJ", "energy")})
    core_area = _figure(chip, tech, "core", "area_mm2", "mm2", "area")
    comps["cores"] = Component("cores", core_area, _leakage(chip, tech, "core", core_area),
                               {"active_cycle": _figure(chip, tech, "core", "active_cycle_pj", "pJ", "energy"),
                                "idle_cycle": _figure(chip, tech, "core", "idle_cycle_pj", "pJ", "energy")})
    engine = _figure(chip, tech, "dma", "engine_area_mm2", "mm2", "area")
    comps["dma"] = Component("dma", engine, _leakage(chip, tech, "dma", engine),
                             {"byte": _figure(chip, tech, "dma", "byte_pj", "pJ", "energy")},
                             extra_area_mm2=_figure(chip, tech, "dma", "bus_area_mm2", "mm2", "area"))
    interface = _figure(chip, tech, "dram", "interface_area_mm2", "mm2", "area", node_field="interface_node_nm")
    comps["dram"] = Component("dram", interface, _leakage(chip, tech, "dram", interface, "interface_leakage_mw"),
                              {"byte": _figure(chip, tech, "dram", "byte_pj", "pJ", "none", node_field="")})
    if calibration:
        _calibrated(comps, calibration)
    return ComponentTable(chip.name, node, cell, temp, comps, sram)


def checked_table(chip, source, field_prefix: str = "") -> ComponentTable:
    """`component_table`, a figure that cannot be had an `InputError` naming the chip field
    whose geometry CACTI refuses (or how to give the figure instead)."""
    try:
        return component_table(chip)
    except CostError as exc:
        section = exc.field.split(".")[0]
        costs = {"banks": "banks", "shared_memory": "shared_memory", "cache": "cache"}.get(section, section)
        raise InputError(source, field_prefix + exc.field, exc.value,
                         f"a memory CACTI can organise ({exc}); or give its figures as [costs.{costs}] area_mm2, "
                         "read_pj, write_pj, leakage_mw") from None


def _calibrated(comps: dict[str, Component], calibration: Mapping[str, Mapping[str, float]]) -> None:
    """Each component's figures times its fitted factors (area; energy: dynamic and leakage)."""
    for name, factors in calibration.items():
        comp = comps.get(name)
        if comp is None:
            continue
        a, e = float(factors.get("area", 1.0)), float(factors.get("energy", 1.0))

        def scaled(f: Figure, k: float) -> Figure:
            return f if k == 1.0 else Figure(f.value * k, f.unit, f"{f.source}; calibrated x{k:.4g}")

        comp.area_mm2 = scaled(comp.area_mm2, a)
        if comp.extra_area_mm2 is not None:
            comp.extra_area_mm2 = scaled(comp.extra_area_mm2, a)
        comp.leakage_mw = scaled(comp.leakage_mw, e)
        comp.actions = {k: scaled(f, e) for k, f in comp.actions.items()}


__all__ = ["BALLS", "COMPONENTS", "Component", "ComponentTable", "CostError", "Figure", "checked_table",
           "component_table", "technology"]
