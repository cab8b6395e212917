"""The chip description: every figure of the hardware as a validated config field.

The emulator owns this schema because it must run without `dse` (it takes a program, a
chip config and a DRAM image); `dse.chips` loads the TOML files, names and hashes them.
Defaults are the figures of the framework's public configs; ones nobody published are
marked *assumed* and stay fields so a sweep can move them.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import (BaseModel, ConfigDict, Field, PositiveInt, NonNegativeInt, field_validator, model_serializer,
                      model_validator)
from pydantic_core import PydanticCustomError

from .ball_kinds import LATENCY_VARIABLES
from .costs import Costs, Technology
from .dma import transfer_cycles
from .formula import Formula, FormulaError


# Every float of a chip is a finite number (TOML has inf and nan).
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]


def fields_error(reason: str, values: dict[str, Any]) -> PydanticCustomError:
    """A check over several fields, naming them: `values` maps each field's dotted path
    (relative to the model checked) to its value. `dse.chips` shows them, not the whole model."""
    return PydanticCustomError("chip_fields", "{reason}", {"reason": reason, "fields": values})


class _Strict(BaseModel):
    # Unknown keys are errors (a typo must not silently fall back to a default), and
    # "16" is not 16: config values keep the type they were written with.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class CoreGroup(_Strict):
    """Cores of one kind on a heterogeneous chip (poly: prefill and decode cores), with the
    hardware where they differ from the chip's. A field left out (None) is the chip's; the
    group's effective config is `ChipConfig.group_chip` (the emulator, the lowering and the
    model all read it there)."""

    role: str
    count: PositiveInt
    # The group's bank fields that differ from the chip's (`BanksOverride.applied`).
    banks: "BanksOverride | None" = None
    # The chip's Balls these cores have (kinds of the chip's [[balls]]), and this group's own
    # config of some of them (its latency, array size, ports), in place of the chip's.
    balls: "tuple[BallKind, ...] | None" = None
    ball_configs: "tuple[Ball, ...] | None" = None
    op_cycles_per_element: FiniteFloat | None = Field(None, gt=0)
    # Per core-op kind cycles, on top of (overriding) the chip's cores.op_cycles.
    op_cycles: dict[str, FiniteFloat] | None = None

    @field_validator("op_cycles")
    @classmethod
    def _op_cycles_positive(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        bad = {k: x for k, x in (v or {}).items() if not x > 0}
        if bad:
            raise ValueError(f"op_cycles must be > 0, got {bad}")
        return v

    @model_serializer(mode="wrap")
    def _without_unset_hardware(self, handler):
        # A field left to the chip's is left out of the dump, so a chip's identity (its hash,
        # its candidates') is what it was before groups could override hardware.
        data = handler(self)
        if isinstance(data, dict):
            for f in GROUP_HARDWARE:
                if data.get(f) is None:
                    data.pop(f, None)
        return data

    @property
    def overrides(self) -> bool:
        """Whether the group's hardware differs from the chip's in any field."""
        return any(getattr(self, f) is not None for f in GROUP_HARDWARE)


# The fields of a CoreGroup that override the chip's hardware.
GROUP_HARDWARE = ("banks", "balls", "ball_configs", "op_cycles_per_element", "op_cycles")


class Cores(_Strict):
    count: PositiveInt = Field(1, le=1024)
    kind: str = "rocket"
    tile_size: PositiveInt = 1  # cores sharing one tile (shared memory, barrier domain)
    groups: tuple[CoreGroup, ...] = ()
    # assumed: a scalar in-order core runs work with no Ball at ~1 element per 4 cycles
    op_cycles_per_element: FiniteFloat = Field(4.0, gt=0)
    # Per core-op kind overrides of op_cycles_per_element (e.g. {softmax = 12.0}); kinds not
    # named here cost op_cycles_per_element.
    op_cycles: dict[str, FiniteFloat] = {}

    @field_validator("op_cycles")
    @classmethod
    def _op_cycles_positive(cls, v: dict[str, float]) -> dict[str, float]:
        bad = {k: x for k, x in v.items() if not x > 0}
        if bad:
            raise ValueError(f"op_cycles must be > 0, got {bad}")
        return v

    @model_validator(mode="after")
    def _groups_cover_cores(self) -> "Cores":
        if self.groups and sum(g.count for g in self.groups) != self.count:
            raise fields_error(
                f"core groups add up to {sum(g.count for g in self.groups)} cores, but count is {self.count}",
                {"groups": [g.count for g in self.groups], "count": self.count})
        roles = [g.role for g in self.groups]
        for i, role in enumerate(roles):
            if role in roles[:i]:  # a placement names a group by its role
                raise fields_error(f"core group role {role!r} is given twice; allowed: one group a role",
                                   {f"groups[{i}].role": role})
        return self

    def group_of(self, core: int) -> int | None:
        """The index of the group core `core` belongs to (groups take consecutive core ids in
        order), None on a chip without groups."""
        first = 0
        for i, g in enumerate(self.groups):
            if core < first + g.count:
                return i
            first += g.count
        return None

    def group_cores(self, i: int) -> list[int]:
        """The core ids of group `i`."""
        first = sum(g.count for g in self.groups[:i])
        return list(range(first, first + self.groups[i].count))


class Banks(_Strict):
    count: PositiveInt = 16
    rows: PositiveInt = 1024
    row_bytes: PositiveInt = 16
    channels: PositiveInt = 7  # shared by DMA and every Ball port
    read_latency: PositiveInt = 1
    acc_col: PositiveInt = 4  # physical banks in an accumulator virtual bank (64-byte rows)
    max_col: PositiveInt = 32
    virtual_ids: PositiveInt = 16  # virtual bank ids 0..15 (8 on the small variant)
    rename_aliases: NonNegativeInt = 16

    @property
    def bytes_per_bank(self) -> int:
        return self.rows * self.row_bytes

    @property
    def bytes_total(self) -> int:
        return self.count * self.bytes_per_bank


class BanksOverride(_Strict):
    """The bank fields of a core group that differ from the chip's ``[banks]``: a field left
    out (None) is the chip's, so ``banks = { count = 12 }`` keeps the chip's rows."""

    count: PositiveInt | None = None
    rows: PositiveInt | None = None
    row_bytes: PositiveInt | None = None
    channels: PositiveInt | None = None
    read_latency: PositiveInt | None = None
    acc_col: PositiveInt | None = None
    max_col: PositiveInt | None = None
    virtual_ids: PositiveInt | None = None
    rename_aliases: NonNegativeInt | None = None

    @model_serializer(mode="wrap")
    def _only_given(self, handler):
        data = handler(self)
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data

    def applied(self, banks: Banks) -> Banks:
        """The chip's `banks` with this group's fields set."""
        return banks.model_copy(update={k: v for k, v in self if v is not None})


class Dma(_Strict):
    beat_bytes: PositiveInt = 16
    burst_max_bytes: PositiveInt = 1024
    bursts_in_flight: PositiveInt = 1
    outstanding: PositiveInt = 8
    inflight_requests: PositiveInt = 16
    latency_cycles: NonNegativeInt = 100  # assumed: DRAM latency per burst
    addr_bits: PositiveInt = 39
    # The coherent system bus the tiles share: bytes it moves a cycle, for every core together
    # (128 bits). Each DMA beat of every core takes its turn on it.
    system_bus_bytes: PositiveInt = 16

    @model_validator(mode="after")
    def _burst_is_whole_beats(self) -> "Dma":
        if self.burst_max_bytes % self.beat_bytes:
            raise fields_error(f"burst_max_bytes {self.burst_max_bytes} is not a multiple of beat_bytes {self.beat_bytes}",
                               {"burst_max_bytes": self.burst_max_bytes, "beat_bytes": self.beat_bytes})
        return self


class FrontEnd(_Strict):
    rob_entries: PositiveInt = 16
    issue_per_cycle: PositiveInt = 1
    ball_queue_depth: PositiveInt = 4
    # Cycle costs of the front end (all assumed; the framework publishes none). The emulator's
    # `overlapped` timing uses them; `serial` charges only the instruction costs.
    issue_delay: NonNegativeInt = 1  # cycles from entering the reorder buffer to the earliest issue
    mset_cycles: NonNegativeInt = 1  # an MSET allocating or freeing a virtual bank
    fence_cycles: NonNegativeInt = 0  # a FENCE, on top of draining the reorder buffer
    barrier_cycles: NonNegativeInt = 1  # a BARRIER, after the last core of the tile arrives


BallKind = Literal[tuple(LATENCY_VARIABLES)]  # the kinds of `emulator.ball_kinds`

# Operand limits a Ball enforces (HARDWARE.md); `Ball.limits` overrides them.
BALL_LIMITS: dict[str, dict[str, int]] = {
    "im2col": {"input": 34, "kernel": 7, "pad": 3},
}
# Timing modes a Ball's latency table may name: matrix dataflows, or one default.
LATENCY_MODES: dict[str, frozenset[str]] = {"matrix": frozenset({"ws", "os"})}


class Ball(_Strict):
    kind: BallKind
    read_ports: PositiveInt = 1
    write_ports: PositiveInt = 1
    array_rows: PositiveInt = 16
    array_cols: PositiveInt = 16
    # Issue-to-done cycles, one formula per mode ("ws"/"os" for the matrix Ball, else "default").
    latency: dict[str, str]
    # Matrix Ball timing source: the latency formula above, or a generic systolic array.
    timing: Literal["formula", "systolic"] = "formula"
    # Operand limits of the Ball (im2col: input, kernel, pad); a name not given here takes the
    # HARDWARE.md figure in BALL_LIMITS.
    limits: dict[str, int] = {}

    @field_validator("limits")
    @classmethod
    def _limits_known(cls, v: dict[str, int], info) -> dict[str, int]:
        kind = info.data.get("kind")
        allowed = BALL_LIMITS.get(kind, {})
        unknown = sorted(set(v) - set(allowed))
        if unknown:
            raise ValueError(f"unknown limits {unknown} for a {kind} Ball; allowed: {sorted(allowed)}")
        return v

    @model_validator(mode="after")
    def _latency_formulas_parse(self) -> "Ball":
        modes = LATENCY_MODES.get(self.kind, frozenset({"default"}))
        if set(self.latency) != set(modes):
            raise fields_error(f"latency of a {self.kind} Ball needs exactly the modes {sorted(modes)}, "
                               f"got {sorted(self.latency)}", {"latency": sorted(self.latency)})
        for mode, text in self.latency.items():
            try:
                formula = Formula(text, LATENCY_VARIABLES[self.kind])
            except FormulaError as exc:
                raise fields_error(f"{self.kind} Ball latency.{mode}: {exc}", {f"latency.{mode}": text}) from None
            # A dry run at a typical operand (every variable 16): a division by zero or a
            # result that is not a finite number of cycles is the config's error, found now.
            try:
                with np.errstate(all="ignore"):
                    cycles = formula(**{name: 16 for name in LATENCY_VARIABLES[self.kind]})
                ok = math.isfinite(float(cycles)) and float(cycles) >= 0
            except (ArithmeticError, ValueError, TypeError) as exc:
                cycles, ok = f"{type(exc).__name__}: {exc}", False
            if not ok:
                raise fields_error(f"{self.kind} Ball latency.{mode}: with every variable 16 it gives {cycles}; "
                                   "allowed: a formula giving a finite number of cycles >= 0",
                                   {f"latency.{mode}": text})
        return self

    def latency_formula(self, mode: str = "default") -> Formula:
        return Formula(self.latency[mode], LATENCY_VARIABLES[self.kind])

    def limit(self, name: str) -> int:
        """An operand limit: the config's value, else the HARDWARE.md figure."""
        return self.limits.get(name, BALL_LIMITS[self.kind][name])


# An instruction field lives in one of RoCC's two 64-bit source registers.
FieldBits = Annotated[int, Field(gt=0, le=64)]


CoreGroup.model_rebuild()
Cores.model_rebuild()


class IsaFields(_Strict):
    """Instruction field widths: addressability is a constraint separate from SRAM depth."""

    bank_id_bits: FieldBits = 10
    iter_bits: FieldBits = 34
    row_addr_bits: FieldBits = 10
    matrix_base_row_bits: FieldBits = 7
    matrix_dim_bits: FieldBits = 12
    im2col_field_bits: FieldBits = 8
    scale_bits: FieldBits = 32
    # DMA row stride in bytes (the framework's MVIN/MVOUT put it above the 39-bit address).
    stride_bits: FieldBits = 19
    # MSET col count (<= 32 needs 6 bits).
    mset_col_bits: FieldBits = 6
    # Element-width selector of ReLU, transpose, fp2int and int2fp (8 or 32).
    elem_bits_bits: FieldBits = 8

    def max_value(self, field: str) -> int:
        return (1 << getattr(self, f"{field}_bits")) - 1


class SharedMemory(_Strict):
    enabled: bool = False
    banks: PositiveInt = 64
    rows: PositiveInt = 16384
    row_bytes: PositiveInt = 16
    channels: PositiveInt = 28  # input channels, split between the tile's cores
    latency_cycles: PositiveInt = 10
    first_bank_id: PositiveInt = 32  # bank ids above 31 address shared memory


class Cache(_Strict):
    enabled: bool = False
    bytes: PositiveInt = 256 * 1024
    ways: PositiveInt = 4
    latency_cycles: PositiveInt = 10


class ChipConfig(_Strict):
    name: str
    description: str = ""
    clock_mhz: FiniteFloat = Field(1000.0, gt=0)
    cores: Cores = Cores()
    banks: Banks = Banks()
    dma: Dma = Dma()
    front_end: FrontEnd = FrontEnd()
    balls: tuple[Ball, ...]
    isa: IsaFields = IsaFields()
    shared_memory: SharedMemory = SharedMemory()
    cache: Cache = Cache()
    # What the chip is made in and what its components cost (`emulator.costs`; the
    # defaults and their sources: `dse.ppa.defaults`). Left out of dumps when default.
    technology: Technology = Technology()
    costs: Costs = Costs()
    # Ranges the chip declares for its own fields, enforced on every load and override:
    # {"cores.count" = [1, 64]} (goban: "core count overridable, 1 to 64"). Keys are dotted
    # paths to number fields; each value is [low, high], both ends allowed.
    limits: dict[str, tuple[int | FiniteFloat, int | FiniteFloat]] = {}

    @model_serializer(mode="wrap")
    def _without_limits(self, handler, info):
        # The ranges check a config; they are not part of what the chip is. Dumps (and so
        # hashes, candidate identities and records) leave them out unless asked with
        # context={"with_limits": True}: declaring a range changes no stored identity.
        data = handler(self)
        if isinstance(data, dict) and not (data.get("limits") and (info.context or {}).get("with_limits")):
            data.pop("limits", None)
        if isinstance(data, dict):  # technology and costs at their defaults are no part of the identity
            for section in ("technology", "costs"):
                if data.get(section) == {}:
                    data.pop(section)
        return data

    def with_sections(self, **sections: BaseModel) -> "ChipConfig":
        """A copy with whole sections (``dma``, ``banks``, ...) replaced by sections already
        validated on their own; the chip-wide checks (its "after" model validators) run
        again. A sweep over a few section values builds its many chips this way."""
        chip = self.model_copy(update=sections)
        for name, decorator in type(self).__pydantic_decorators__.model_validators.items():
            if decorator.info.mode == "after":
                getattr(chip, name)()
        return chip

    def data_with_limits(self) -> dict:
        """The chip's plain data with its declared ranges: what an override is checked against."""
        return self.model_dump(mode="json", context={"with_limits": True})

    @field_validator("balls")
    @classmethod
    def _one_ball_per_kind(cls, balls: tuple[Ball, ...]) -> tuple[Ball, ...]:
        kinds = [b.kind for b in balls]
        if not balls:
            raise ValueError("a chip needs at least one Ball")
        dupes = sorted({k for k in kinds if kinds.count(k) > 1})
        if dupes:
            raise ValueError(f"Ball kinds listed twice: {dupes}")
        return balls

    @model_validator(mode="after")
    def _fields_hold_the_geometry(self) -> "ChipConfig":
        bank_sets = [("", self.banks)] + [(f"cores.groups[{i}].", g.banks.applied(self.banks))
                                          for i, g in enumerate(self.cores.groups) if g.banks is not None]
        for at, banks in bank_sets:
            if banks.count > (1 << self.isa.bank_id_bits):
                raise fields_error(f"{banks.count} banks need more than the {self.isa.bank_id_bits}-bit bank id field",
                                   {f"{at}banks.count": banks.count, "isa.bank_id_bits": self.isa.bank_id_bits})
            # Every byte of a core's banks must have a DRAM address to move to and from (MVIN /
            # MVOUT carry a dma.addr_bits address): deeper banks are no chip this ISA drives,
            # and the emulator, which holds them in memory, would fail allocating them.
            if banks.bytes_total > (1 << self.dma.addr_bits):
                raise fields_error(
                    f"{banks.count} banks of {banks.rows} rows x {banks.row_bytes} bytes hold {banks.bytes_total} bytes, "
                    f"more than the {self.dma.addr_bits}-bit DRAM address reaches ({1 << self.dma.addr_bits} bytes)",
                    {f"{at}banks.rows": banks.rows, f"{at}banks.count": banks.count,
                     f"{at}banks.row_bytes": banks.row_bytes, "dma.addr_bits": self.dma.addr_bits})
            if banks.acc_col > banks.count:
                raise fields_error(f"accumulator col {banks.acc_col} exceeds the {banks.count} banks",
                                   {f"{at}banks.acc_col": banks.acc_col, f"{at}banks.count": banks.count})
            if banks.row_bytes != self.banks.row_bytes:  # DMA beats and the lowering's lines are one row wide
                raise fields_error(f"a core group's banks.row_bytes must be the chip's {self.banks.row_bytes}",
                                   {f"{at}banks.row_bytes": banks.row_bytes})
        kinds = [b.kind for b in self.balls]
        for i, g in enumerate(self.cores.groups):
            if g.balls is None:
                continue
            unknown = [k for k in g.balls if k not in kinds]
            if unknown or not g.balls or len(set(g.balls)) != len(g.balls):
                raise fields_error(f"a core group's balls are distinct kinds of the chip's Balls, at least one; "
                                   f"allowed: {', '.join(kinds)}", {f"cores.groups[{i}].balls": list(g.balls)})
        for i, g in enumerate(self.cores.groups):
            have = g.balls if g.balls is not None else kinds
            own = [b.kind for b in g.ball_configs or ()]
            for j, kind in enumerate(own):
                if kind not in have or kind in own[:j]:
                    raise fields_error(f"a core group's ball_configs configure distinct Balls the group has; allowed "
                                       f"kinds: {', '.join(have)}", {f"cores.groups[{i}].ball_configs[{j}].kind": kind})
        return self

    @model_validator(mode="after")
    def _within_declared_limits(self) -> "ChipConfig":
        for dotted, (low, high) in self.limits.items():
            node: Any = self
            for part in dotted.split("."):
                if not isinstance(node, BaseModel) or part not in type(node).model_fields or part == "limits":
                    raise fields_error(f"limits: {dotted!r} is not a number field of the chip "
                                       "(a dotted path such as cores.count or banks.rows)", {f"limits.{dotted}": [low, high]})
                node = getattr(node, part)
            if isinstance(node, bool) or not isinstance(node, (int, float)):
                raise fields_error(f"limits: {dotted!r} is not a number field of the chip", {f"limits.{dotted}": [low, high]})
            if not low <= high:
                raise fields_error(f"limits: low {low} is above high {high}", {f"limits.{dotted}": [low, high]})
            if not low <= node <= high:
                raise fields_error(f"{dotted} must be in {low}..{high} (the chip's limits.{dotted})", {dotted: node})
        return self

    def ball(self, kind: str) -> Ball | None:
        return next((b for b in self.balls if b.kind == kind), None)

    @property
    def private_sram_bytes(self) -> int:
        """Private SRAM of one core an instruction can address: every bank's addressable rows
        (rows past the row-address field are `unaddressable_sram_bytes`, not counted here)."""
        return self.banks.count * self.addressable_rows * self.banks.row_bytes

    @property
    def unaddressable_sram_bytes(self) -> int:
        """Private SRAM of one core that no instruction reaches: the rows of every bank past
        ``2**isa.row_addr_bits`` (banks.rows = 2048 with a 10-bit field: half of each bank)."""
        return self.banks.count * (self.banks.rows - self.addressable_rows) * self.banks.row_bytes

    def group_chip(self, i: int) -> "ChipConfig":
        """The chip as the cores of group `i` see it: its cores are the group's (count,
        core-op costs), its banks and Balls the group's where it overrides them. The one
        definition the emulator (per core), the lowering and the model (per stage) read."""
        g = self.cores.groups[i]
        cores = self.cores.model_copy(update={
            "count": g.count, "groups": (),
            "op_cycles_per_element": (self.cores.op_cycles_per_element if g.op_cycles_per_element is None
                                      else g.op_cycles_per_element),
            "op_cycles": {**self.cores.op_cycles, **(g.op_cycles or {})}})
        own = {b.kind: b for b in g.ball_configs or ()}
        balls = tuple(own.get(b.kind, b) for b in self.balls if g.balls is None or b.kind in g.balls)
        banks = self.banks if g.banks is None else g.banks.applied(self.banks)
        return self.model_copy(update={"name": f"{self.name}.{g.role}", "cores": cores,
                                       "banks": banks, "balls": balls, "limits": {}})

    def core_chip(self, core: int) -> "ChipConfig":
        """The chip as core `core` sees it: its group's (`group_chip`), or the chip itself
        when its group overrides nothing (or the chip has no groups)."""
        i = self.cores.group_of(core)
        if i is None or not self.cores.groups[i].overrides:
            return self
        return self.group_chip(i)

    def group_index(self, role: str) -> int | None:
        """The index of the core group of `role`, None if the chip has none."""
        return next((i for i, g in enumerate(self.cores.groups) if g.role == role), None)

    # Figures derived from the config, defined once: the emulator, the plan and the cost
    # model all read them here.
    @property
    def addressable_rows(self) -> int:
        """Rows of a private bank an instruction can address: the SRAM depth capped by the
        row-address field (deeper rows exist but no MVIN / MVOUT / Ball op reaches them)."""
        return min(self.banks.rows, 1 << self.isa.row_addr_bits)

    @property
    def dma_burst_beats(self) -> int:
        """Beats in one full DRAM burst."""
        return self.dma.burst_max_bytes // self.dma.beat_bytes

    @property
    def dma_parallel_bursts(self) -> int:
        """Bursts of one transfer in flight at once."""
        return min(self.dma.bursts_in_flight, self.dma.inflight_requests)

    def core_cycles_per_element(self, kind: str) -> float:
        """What the core is charged an element of a core op of `kind`: ``cores.op_cycles[kind]``,
        else ``cores.op_cycles_per_element``."""
        return self.cores.op_cycles.get(kind, self.cores.op_cycles_per_element)

    def dma_cycles(self, lines: int, col: int = 1, strided: bool = False) -> int:
        """Cycles of one MVIN / MVOUT of `lines` beats to / from a bank of `col` physical
        banks, contiguous or one DRAM run a bank row (`emulator.dma.transfer_cycles`)."""
        return int(transfer_cycles(lines, col, strided, self.dma_burst_beats, self.dma_parallel_bursts,
                                   self.dma.latency_cycles))


def chip_from_dict(data: dict) -> ChipConfig:
    """Validate plain data (parsed TOML or JSON) as a chip config.

    Goes through JSON so strict mode accepts arrays for tuples while still refusing
    "16" for an integer.
    """
    return ChipConfig.model_validate_json(json.dumps(data))
