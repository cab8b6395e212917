"""The chip's technology and the cost figures of its components, as config fields.

A chip config may say its technology (``[technology]``: node, SRAM cell type, temperature,
how published figures scale to the node) and override any component's cost figure
(``[costs.<component>]``: area, energy per action, leakage). A figure left out takes its
default, which `dse.ppa.defaults` names with its source (CACTI for SRAM, published tables
for logic and DRAM, marked *assumed* where nobody published one). The emulator does not
read these figures; they live here because the chip schema does (`emulator.chip`).

Fields left at their defaults are left out of a chip's dump, so adding these sections
changes no chip's identity (its hash, its candidates').
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer

# CACTI 7's technology nodes (nm): its tables are 22, 32, 45, 65 and 90 nm and it
# interpolates between them; outside 22..90 the binary ZigZag ships finds no organisation.
NODES = (22, 28, 32, 40, 45, 65, 90)
SRAM_CELLS = ("itrs-hp", "itrs-lstp", "itrs-lop")

# Ranges that catch a typo or a unit slip (an area in um2 written as mm2) rather than
# describe real parts: a die is at most a few hundred mm2, an action at most nanojoules.
MAX_AREA_MM2 = 10_000.0
MAX_AREA_UM2 = MAX_AREA_MM2 * 1e6
MAX_ACTION_PJ = 1e6
MAX_LEAKAGE_MW = 1e6

Area = Annotated[float | None, Field(None, gt=0, le=MAX_AREA_MM2, allow_inf_nan=False)]
AreaUm2 = Annotated[float | None, Field(None, ge=0, le=MAX_AREA_UM2, allow_inf_nan=False)]
Energy = Annotated[float | None, Field(None, ge=0, le=MAX_ACTION_PJ, allow_inf_nan=False)]
Leakage = Annotated[float | None, Field(None, ge=0, le=MAX_LEAKAGE_MW, allow_inf_nan=False)]
Node = Annotated[Literal[NODES] | None, Field(None)]  # type: ignore[valid-type]


class GivenFields(BaseModel):
    """Every field optional: None takes its default (`DEFAULTS`). Dumps keep only the
    fields given a value other than their default, so no default enters a chip's identity."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    @model_serializer(mode="wrap")
    def _only_given(self, handler):
        data = handler(self)
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None and v != {}}
        return data


class _DropsDefaults(GivenFields):
    """A section whose dump also drops the values equal to their `DEFAULTS` (a knob set to
    the default is the default chip)."""

    @model_serializer(mode="wrap")
    def _only_given(self, handler):
        data = handler(self)
        if isinstance(data, dict):
            return _without_defaults(self, data)
        return data


class Technology(_DropsDefaults):
    node_nm: Node = None  # default 22: the node SRAM is priced at and logic figures scale to
    sram_cell: Literal[SRAM_CELLS] | None = None  # type: ignore[valid-type]  # CACTI's cell and periphery type
    temperature_k: Annotated[int | None, Field(None, ge=300, le=400, multiple_of=10)] = None  # CACTI: 300..400 K
    # How a figure published at another node scales to node_nm: area by (node / ref)^a,
    # dynamic energy by (node / ref)^e (the rule the docs state).
    area_exponent: Annotated[float | None, Field(None, ge=0, le=3, allow_inf_nan=False)] = None
    energy_exponent: Annotated[float | None, Field(None, ge=0, le=3, allow_inf_nan=False)] = None
    # Leakage of logic with no figure of its own: its area times this density.
    logic_leakage_mw_per_mm2: Annotated[float | None, Field(None, ge=0, le=1e5, allow_inf_nan=False)] = None


class SramCosts(GivenFields):
    """One SRAM bank (a private bank, a shared-memory bank) or the cache: CACTI's figures
    for its geometry at the chip's node unless given here."""

    area_mm2: Area = None
    read_pj: Energy = None  # one row (a bank's row_bytes) read
    write_pj: Energy = None
    leakage_mw: Leakage = None


class ArrayCosts(GivenFields):
    """A Ball built as an array of multiply-accumulate PEs (matrix: array_rows x array_cols;
    vecmatmul: 16 x 16), figures given at `node_nm` and scaled to the chip's node."""

    node_nm: Node = None
    pe_area_um2: AreaUm2 = None
    mac_pj: Energy = None  # one MAC of the (padded) operands the Ball is given
    fixed_area_um2: AreaUm2 = None  # control and operand buffers beside the PEs
    leakage_mw: Leakage = None


class LaneCosts(GivenFields):
    """An elementwise Ball: one bank row (16 bytes) a busy cycle, figures at `node_nm`."""

    node_nm: Node = None
    area_um2: AreaUm2 = None
    cycle_pj: Energy = None  # one busy cycle (`ball_busy_cycles` counts them)
    leakage_mw: Leakage = None


class CoreCosts(GivenFields):
    """The scalar core beside each Buckyball unit (with its L1 caches)."""

    node_nm: Node = None
    area_mm2: Area = None
    active_cycle_pj: Energy = None  # a cycle running a core op
    idle_cycle_pj: Energy = None  # any other cycle of the run (issuing, waiting: the clock runs)
    leakage_mw: Leakage = None


class DmaCosts(GivenFields):
    """Each core's DMA engine and the system bus the tiles share."""

    node_nm: Node = None
    engine_area_mm2: Area = None  # one core's engine
    bus_area_mm2: Area = None  # the system bus, once a chip
    byte_pj: Energy = None  # a byte moved between DRAM and a bank, over the bus
    leakage_mw: Leakage = None  # one engine's


class DramCosts(GivenFields):
    """The off-chip DRAM and the chip's interface to it (controller and PHY)."""

    byte_pj: Energy = None  # a byte read or written (device and I/O); not scaled with the node
    interface_node_nm: Node = None
    interface_area_mm2: Area = None
    interface_leakage_mw: Leakage = None


class Costs(_DropsDefaults):
    banks: SramCosts = SramCosts()
    shared_memory: SramCosts = SramCosts()
    cache: SramCosts = SramCosts()
    matrix: ArrayCosts = ArrayCosts()
    vecmatmul: ArrayCosts = ArrayCosts()
    im2col: LaneCosts = LaneCosts()
    transpose: LaneCosts = LaneCosts()
    relu: LaneCosts = LaneCosts()
    fp2int: LaneCosts = LaneCosts()
    int2fp: LaneCosts = LaneCosts()
    mxfp2int: LaneCosts = LaneCosts()
    core: CoreCosts = CoreCosts()
    dma: DmaCosts = DmaCosts()
    dram: DramCosts = DramCosts()


@dataclass(frozen=True)
class Default:
    value: float | int | str
    unit: str
    source: str  # a key of SOURCES


# Where every default comes from. Figures of logic are given at the node named beside them
# and scaled to the chip's (`Technology.area_exponent`, `energy_exponent`).
SOURCES = {
    "cacti": "CACTI 7 (the binary and sources zigzag-dse ships), run on the geometry at the chip's node, cell type "
             "and temperature",
    "zigzag": "ZigZag's CACTI defaults (zigzag/cacti/cacti_master/cacti_config_creator.py)",
    "horowitz": "M. Horowitz, 'Computing's energy problem (and what we can do about it)', ISSCC 2014: 45 nm, 0.9 V "
                "energy and area of arithmetic and memory",
    "rocket": "K. Asanovic, D. Patterson, 'Instruction Sets Should Be Free: The Case For RISC-V', UCB/EECS-2014-146: "
              "Rocket (RV64, in-order) in TSMC 40GPLUS, 0.39 mm2 with 16 KiB caches, 0.034 mW/MHz",
    "scaling": "constant-voltage (post-Dennard) scaling: area with the square of the feature size, switched "
               "capacitance (dynamic energy) with the feature size",
    "assumed": "assumed (nobody published it for this family): set it from your synthesis or power report, or "
               "fit it with dse calibrate --evidence synth_area|power",
}


# How a source is named in a table (`dse chips costs`); SOURCES gives it in full.
CITED = {"cacti": "CACTI 7", "zigzag": "ZigZag's CACTI default", "horowitz": "Horowitz ISSCC 2014",
         "rocket": "Asanovic & Patterson 2014 (Rocket)", "scaling": "constant-voltage scaling", "assumed": "assumed"}


_d = Default
# a PE: an 8-bit multiplier (282 um2, 0.2 pJ) and a 32-bit adder (137 um2, 0.1 pJ)
_PE_ARRAY = {"node_nm": _d(45, "nm", "horowitz"), "pe_area_um2": _d(419.0, "um2", "horowitz"),
             "mac_pj": _d(0.3, "pJ", "horowitz"), "fixed_area_um2": _d(20000.0, "um2", "assumed")}
# 4 fp32 lanes, each a 32-bit FP multiplier (7700 um2, 3.7 pJ) and an FP adder for the
# rounding conversion (4184 um2, 0.9 pJ)
_FP_LANES = {"node_nm": _d(45, "nm", "horowitz"), "area_um2": _d(47536.0, "um2", "horowitz"),
             "cycle_pj": _d(18.4, "pJ", "horowitz")}
# register arrays and muxes: no published figure
_SHUFFLE = {"node_nm": _d(45, "nm", "assumed"), "area_um2": _d(10000.0, "um2", "assumed"),
            "cycle_pj": _d(1.0, "pJ", "assumed")}

DEFAULTS: dict[str, dict[str, Default]] = {
    "technology": {
        "node_nm": _d(22, "nm", "assumed"),
        "sram_cell": _d("itrs-hp", "", "zigzag"),
        "temperature_k": _d(360, "K", "zigzag"),
        "area_exponent": _d(2.0, "", "scaling"),
        "energy_exponent": _d(1.0, "", "scaling"),
        "logic_leakage_mw_per_mm2": _d(25.0, "mW/mm2", "assumed"),
    },
    # SRAM: every figure from CACTI unless given (no default value)
    "banks": {}, "shared_memory": {}, "cache": {},
    "matrix": _PE_ARRAY, "vecmatmul": _PE_ARRAY,
    # 16 int8 lanes, each an 8-bit compare (an 8-bit adder: 36 um2, 0.03 pJ)
    "relu": {"node_nm": _d(45, "nm", "horowitz"), "area_um2": _d(576.0, "um2", "horowitz"),
             "cycle_pj": _d(0.48, "pJ", "horowitz")},
    "fp2int": _FP_LANES, "int2fp": _FP_LANES,
    "transpose": _SHUFFLE, "im2col": _SHUFFLE,
    "mxfp2int": {"node_nm": _d(45, "nm", "assumed"), "area_um2": _d(1000.0, "um2", "assumed"),
                 "cycle_pj": _d(0.24, "pJ", "assumed")},
    "core": {"node_nm": _d(40, "nm", "rocket"), "area_mm2": _d(0.39, "mm2", "rocket"),
             "active_cycle_pj": _d(34.0, "pJ", "rocket"), "idle_cycle_pj": _d(10.2, "pJ", "assumed")},
    "dma": {"node_nm": _d(45, "nm", "assumed"), "engine_area_mm2": _d(0.02, "mm2", "assumed"),
            "bus_area_mm2": _d(0.05, "mm2", "assumed"), "byte_pj": _d(0.8, "pJ", "assumed")},
    # DRAM: 1.3 nJ a 64-bit access (the low end of Horowitz's 1.3-2.6 nJ), 162.5 pJ a byte
    "dram": {"byte_pj": _d(162.5, "pJ", "horowitz"), "interface_node_nm": _d(40, "nm", "assumed"),
             "interface_area_mm2": _d(1.0, "mm2", "assumed")},
}


def default_at(path: str):
    """The default of a chip field under ``technology.`` or ``costs.`` (None: CACTI's or
    derived); KeyError when `path` names no such field."""
    section, *rest = path.split(".")
    if section == "technology" and len(rest) == 1 and rest[0] in Technology.model_fields:
        return DEFAULTS["technology"][rest[0]].value
    if section == "costs" and len(rest) == 2 and rest[0] in Costs.model_fields:
        model = Costs.model_fields[rest[0]].annotation
        if rest[1] in model.model_fields:
            found = DEFAULTS.get(rest[0], {}).get(rest[1])
            return None if found is None else found.value
    raise KeyError(path)


def _without_defaults(model: BaseModel, data: dict) -> dict:
    if isinstance(model, Technology):
        table = DEFAULTS["technology"]
        return {k: v for k, v in data.items() if v is not None and not (k in table and v == table[k].value)}
    out = {}
    for section, given in data.items():  # Costs: each section against its own defaults
        table = DEFAULTS.get(section, {})
        kept = {k: v for k, v in (given or {}).items() if v is not None and not (k in table and v == table[k].value)}
        if kept:
            out[section] = kept
    return out


__all__ = ["CITED", "DEFAULTS", "NODES", "SOURCES", "SRAM_CELLS", "ArrayCosts", "CoreCosts", "Costs", "Default",
           "DmaCosts", "DramCosts", "GivenFields", "LaneCosts", "SramCosts", "Technology", "default_at"]
