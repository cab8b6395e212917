"""Lower a graph and a candidate to an emulator Program and its DRAM image.

Op by op, in graph order, the plan's unit emits each op (`dse.units`: one file per unit,
its emitter beside the model's charge of it): the matrix Ball's products (`matrix`), Ball
streams (`stream`), attention's fused chain (`chain`), views (`view`), and core ops
(`core`: everything else, charged, never free).

Row-independent core ops (copies, elementwise arithmetic, quantization, last-axis norms)
and permutes (by output rows) are split across the workers (`dse.plan.split`); others run
on worker 0. Synchronisation: with one worker a
FENCE closes each matrix-Ball op before the core reads its MVOUTs (under ``framework`` a
FENCE also follows every MVOUT, as in the framework's toolchain); with several workers a
BARRIER on every worker closes every op. Banks are allocated (MSET) at the start of each
Ball op (matrix, ReLU, Fp2Int / Int2Fp stream) and freed at its end: no data stays resident
in a bank across ops, so an allocation lives exactly as long as its op. The private SRAM
figure is computed from those actual lifetimes (`sram_lifetimes` replays every worker's
MSETs over the whole program: ``Lowered.peak_sram_bytes`` / ``peak_sram_per_worker``),
equal to the emulator's ``peak_allocated_bytes`` counter.
:func:`lower_stages` places several graphs on disjoint core groups (poly: prefill and
decode cores); :func:`lower_layers` lays one graph out in ranges of ops on core groups and
runs its requests (`dse.plan.placement.schedule`); `dse.lower.spans.lower_spans` partitions a
temporal stack into spans.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from emulator import Barrier, CoreOp, Fence, Mset, Program, Region

from ..mapping import Candidate
from ..plan.moe import spreads
from ..mapping.params import CandidateArrays
from ..plan.graph_plan import OpPlan, plan_for, stored_loc
from ..plan.layout import stored_orders
from ..plan.memory import Dram, Loc, emu_dtype
from ..plan.placement import (Placed, boundary_note, boundary_tensors, cores_chip, handoff_banks, handoffs, place,
                              range_candidate, range_regions, schedule, spmd_chip, stage_reason, stage_regions)
from ..plan.split import split_core_op
from ..plan.streams import ELEMENTWISE
from ..plan.units import Infeasible, sync_after, too_many_workers
from ..units import UNITS, OpLowering
from ..units.matrix import blocked_bt, weight_bt  # noqa: F401  (importable from here as before)
from ..workload.graph import Graph
from . import coreop
from .moe import lower_spread


@dataclass
class Lowered:
    graph: Graph
    candidate: Candidate
    program: Program
    image: np.ndarray
    locs: dict[str, Loc]
    ops: list[OpLowering] = field(default_factory=list)
    fused: frozenset[str] = frozenset()  # tensors never materialized (fused into their reader's copy)
    # id of an instruction -> the graph op that emitted it (`dse.lower.listing`); kept as
    # long as the program (which holds the instructions) is
    labels: dict[int, str] = field(default_factory=dict, repr=False)
    # the DRAM buffers that are no graph tensor, (addr, bytes, what): packed operands, Bt
    # tiles, bias tiles, a conv's pad and im2col buffers (`Dram.named`)
    named: list = field(default_factory=list, repr=False)

    @property
    def workers(self) -> int:
        return len(self.program.cores)

    @property
    def peak_sram_per_worker(self) -> list[int]:
        """Peak private SRAM of each worker (core) from the actual allocation lifetimes: the
        program's MSETs replayed in order (`sram_lifetimes`)."""
        return sram_lifetimes(self.program.cores, self.candidate.chip)[0]

    @property
    def peak_sram_bytes(self) -> int:
        """Peak private SRAM any worker holds at once, from the MSET alloc/free intervals of
        the whole program (equal to the emulator's ``peak_allocated_bytes``, max over cores)."""
        return max(self.peak_sram_per_worker, default=0)

    def read(self, img: np.ndarray, name: str, copy: bool = True) -> np.ndarray:
        return self.locs[name].read(img, copy)


def _np(value) -> np.ndarray:
    return value.numpy() if isinstance(value, torch.Tensor) else np.asarray(value)




class ProgramBuilder:
    """Emits one graph's program for one candidate, op by op, as the plan decides."""

    def __init__(self, graph: Graph, candidate: Candidate, inputs, dram: Dram | None = None,
                 elementwise: str = "auto", locs: dict[str, Loc] | None = None):
        if elementwise not in ELEMENTWISE:
            raise ValueError(f"elementwise must be one of {ELEMENTWISE}, got {elementwise!r}")
        self.elementwise = elementwise
        self.graph = graph
        self.cand = candidate
        self.chip = candidate.chip
        self.mapping = candidate.mapping
        self.workers = int(self.mapping.workers)
        if self.workers > self.chip.cores.count:
            raise Infeasible(too_many_workers(self.workers, self.chip.name, self.chip.cores.count))
        # Built with the parameters of the cores it runs on (their group's hardware).
        self.chip, reason = spmd_chip(self.chip, self.workers)
        if reason:
            raise Infeasible(reason)
        if self.chip is not candidate.chip:
            self.cand = Candidate(self.chip, self.mapping)
        self.params = CandidateArrays.from_candidates([self.cand])  # the plan's figures of this candidate
        self.cores: list[list] = [[] for _ in range(self.workers)]
        self.dram = dram or Dram()
        # `locs` given: a later range of one graph (`lower_layers`), whose tensors so far (and
        # weights placed so far) are where the ranges before left them
        self.locs: dict[str, Loc] = {} if locs is None else locs
        self.unblocked: dict[str, Loc] = {}
        self.handoff_ops: frozenset[str] = frozenset()  # matmuls whose A the range before hands off
        self.handoff_loaders: list[list] = []  # that range's cores, which load it into shared memory
        self.handoff_sets, self.handoff_set = 1, 0  # sets of shared banks a hand-off takes, and this request's
        self.handoff_bases: dict[str, int] = {}  # banks below the top other hand-offs hold (`handoff_banks`)
        self.handoffs: list[tuple[str, str, int, int]] = []  # (op, tensor, shared tiles, bytes) handed off
        # with weights = shared: the first shared bank of this part's region for its weights' B
        # tiles, beside the parts that run at once, and the base its tiles are picked with
        # (`dse.plan.placement.WeightRegions`: bases, picked)
        self.b_region, self.b_picked = 0, 0
        # spans with shared weights: the stack's shared copy, loaded before the span runs
        # (`dse.plan.spans.shared_stack`); each matmul's weight B is read there
        self.shared_stack = None
        self.records: list[OpLowering] = []
        self.fused: set[str] = set()
        self.labels: dict[int, str] = {}  # id of an instruction -> the op that emitted it
        self.label_prefix = ""  # a request's ("request 1: "), when several run one graph
        self.consumers = graph.consumers()
        coreop.ensure_registered()
        self.orders = stored_orders(graph, self.mapping.channels_last)  # tensors stored channels-last
        for name, value in zip(graph.inputs, inputs if locs is None else ()):
            self.locs[name] = stored_loc(self.dram, graph, name, self.orders, _np(value))

    # -------------------------------------------------------------- helpers
    def loc(self, name: str) -> Loc:
        """The tensor's location; a weight is placed (as a constant) on first use."""
        if name not in self.locs:
            spec = self.graph.tensors[name]
            self.locs[name] = self.dram.weight(spec.shape, spec.dtype, self.graph.weights[name])
        return self.locs[name]

    def logical(self, name: str) -> Loc:
        """A row-major (non-blocked) location: a blocked accumulator is copied out once
        (charged); the plan's ``unblock`` copy."""
        loc = self.loc(name)
        if loc.blocked is None:
            return loc
        if name not in self.unblocked:
            acc = loc.blocked
            out = self.dram.matrix(loc.shape, "int32", acc.batch, acc.M, acc.N)
            self.core(CoreOp("copy", out.padded_grid_view(acc.tm, acc.tn), (loc.padded_view(),)))
            self.sync(False)
            self.unblocked[name] = out
        return self.unblocked[name]

    def standardised(self, loc: Loc) -> Loc:
        """A padded row-major copy of a strided view (charged): the plan's ``standardise``."""
        out = self.dram.tensor(loc.shape, loc.dtype)
        self.core(CoreOp("copy", out.view(), (loc.view(),)))
        self.sync(False)
        return out

    def prepare(self, plan: OpPlan) -> dict[str, Loc]:
        """Emit the plan's copies that move an operand (unblock, standardise); the locations
        the op then reads. (A convolution's pad and gather copies are its own: `_conv`.)"""
        ready: dict[str, Loc] = {}
        for copy in plan.copies:
            if copy.kind == "unblock":
                ready[copy.tensor] = self.logical(copy.tensor)
            elif copy.kind == "standardise":
                ready[copy.tensor] = self.standardised(self.operand(copy.tensor, ready))
        return ready

    def operand(self, name: str, ready: dict[str, Loc]) -> Loc:
        """Where an op reads `name`: its copy made for this op, else a row-major copy made
        earlier, else the tensor itself."""
        return ready.get(name) or self.unblocked.get(name) or self.loc(name)

    def core(self, ins: CoreOp) -> None:
        """A core op: split across the workers along its first splittable axis when it is
        row-independent (elementwise, copies, last-axis norms), else on worker 0."""
        parts = split_core_op(ins, self.workers)
        if parts is None:
            self.cores[0].append(ins)
            return
        for worker, part in enumerate(parts):
            if part is not None:
                self.cores[worker].append(part)

    def sync(self, after_ball: bool) -> None:
        closing = sync_after(self.workers, after_ball)
        if closing == "barrier":
            for core in self.cores:
                core.append(Barrier())
        elif closing == "fence" and self.cores[0] and not isinstance(self.cores[0][-1], Fence):
            self.cores[0].append(Fence())

    # -------------------------------------------------------------- ops
    def lower_op(self, plan: OpPlan) -> None:
        """Emit one op as the plan says (`dse.plan.graph_plan`): its copies, then the op on
        its unit."""
        op = plan.op
        instructions_before = sum(len(core) for core in self.cores)
        emitting = self.cores + [core for core in self.handoff_loaders if all(core is not own for own in self.cores)]
        before = [len(core) for core in emitting]
        self.dram.label = op.name
        ready = self.prepare(plan)
        # the plan's unit emits it (`dse.units`); a Ball op the chip cannot take runs on the core
        rec = UNITS[plan.unit].emit(self, plan, ready) or UNITS["core"].emit(self, plan, ready)
        rec.instructions = sum(len(core) for core in self.cores) - instructions_before
        self.records.append(rec)
        for core, count in zip(emitting, before):  # the op's instructions, on its cores and a hand-off's loaders
            for ins in core[count:]:
                self.labels.setdefault(id(ins), self.label_prefix + op.name)

    def finish(self) -> Lowered:
        img = self.dram.image()
        program = Program(self.cores, {"dram": Region(0, (img.size,), "uint8")}, {},
                          dram_bytes=img.size, name=f"{self.graph.name} on {self.chip.name} ({self.mapping.policy}, "
                                                    f"{self.workers} workers)")
        # graph outputs as program outputs when they are plain row-major buffers (not blocked,
        # not stored in a permuted order: `mapping.channels_last`)
        for name in self.graph.outputs:
            loc = self.locs[name]
            in_order = loc.strides is None or list(loc.strides) == sorted(loc.strides, reverse=True)
            if loc.blocked is None and in_order:
                program.outputs[name] = Region(loc.addr, loc.buffer_shape, emu_dtype(loc.dtype))
        return Lowered(self.graph, self.cand, program, img, self.locs, self.records, frozenset(self.fused),
                       self.labels, list(self.dram.named))






def sram_lifetimes(cores, chip) -> tuple[list[int], list[list[tuple[int, int, int, int]]]]:
    """Private SRAM from the actual allocation lifetimes: per worker, replay its MSETs in
    program order (an allocation of `col` banks holds ``col x addressable rows x row_bytes`` bytes
    from its MSET to its free, or to the end of the program). Returns (peak bytes per
    worker, per worker the intervals ``(bank id, bytes, alloc index, free index)``).
    The peak equals the emulator's ``peak_allocated_bytes`` counter of that core."""
    per_bank = chip.addressable_rows * chip.banks.row_bytes  # rows past the row field hold nothing
    peaks, lives = [], []
    for prog in cores:
        live: dict[int, tuple[int, int]] = {}
        now = peak = 0
        intervals = []
        for pc, ins in enumerate(prog):
            if type(ins) is not Mset:
                continue
            if ins.alloc:
                nbytes = ins.col * per_bank
                live[ins.bank] = (nbytes, pc)
                now += nbytes
                peak = max(peak, now)
            elif ins.bank in live:
                nbytes, start = live.pop(ins.bank)
                now -= nbytes
                intervals.append((ins.bank, nbytes, start, pc))
        intervals += [(bank, nbytes, start, len(prog)) for bank, (nbytes, start) in live.items()]
        peaks.append(peak)
        lives.append(sorted(intervals, key=lambda x: x[2]))
    return peaks, lives




def lower(graph: Graph, candidate: Candidate, inputs, elementwise: str = "auto") -> Lowered:
    """The program and DRAM image that compute `graph` on `candidate` for `inputs`.

    `elementwise` chooses where quantize / requantize / dequantize run when a Ball can do
    them bit for bit: ``"auto"`` (the Ball when `stream_cycles` < `core_cycles`), ``"ball"``
    (always the Ball), ``"core"`` (always the core)."""
    builder = ProgramBuilder(graph, candidate, inputs, elementwise=elementwise)
    plans = plan_for(graph, candidate.mapping)
    if spreads(candidate.mapping):  # a mixture of experts' experts, one worker each (`dse.lower.moe`)
        lower_spread(builder, plans)
        return builder.finish()
    for plan in plans:
        builder.lower_op(plan)
    return builder.finish()


@dataclass
class StagedLowered:
    """Several graphs (stages) on disjoint core groups of one chip, in one program."""

    program: Program
    image: np.ndarray
    stages: list[Lowered]  # each with its own locs; their programs are views of the merged one
    core_ids: list[list[int]]


def lower_stages(stages, chip, mapping, roles=None, regions=None) -> StagedLowered:
    """Stage partitioning onto (heterogeneous) cores: `stages` is a list of
    ``(graph, inputs, core_ids)``; each graph is lowered for ``len(core_ids)`` workers with
    those cores' own parameters (`dse.plan.placement.cores_chip`: their group's banks, Balls
    and core-op costs) and placed on those cores; all share one DRAM image. The cores of a
    tile meet at every BARRIER, so the stage with fewer barriers is padded with BARRIERs at
    its end (the stages then advance op by op in lock step: the coupling cost shows in the
    cycles). `roles` names the stages in an infeasible reason; `regions`, where each stage
    keeps its shared weights (`dse.plan.placement.stage_regions`; default from bank 0 up)."""
    dram = Dram()
    dram.bind_content = True  # the stages' identical weights and constants: one copy
    builders = []
    used: set[int] = set()
    for index, (graph, inputs, core_ids) in enumerate(stages):
        if used & set(core_ids):
            raise Infeasible(f"stages share cores {sorted(used & set(core_ids))}")
        if max(core_ids) >= chip.cores.count:
            raise Infeasible(f"core {max(core_ids)} but chip {chip.name} has {chip.cores.count} cores")
        used |= set(core_ids)
        stage_chip, reason = cores_chip(chip, core_ids)
        if reason:
            raise Infeasible(reason)
        placed = Placed(roles[index] if roles else f"{index}", tuple(core_ids), stage_chip)
        builders.append(_build_stage(graph, mapping.model_copy(update={"workers": len(core_ids)}), inputs, dram,
                                     placed, (regions.bases[index], regions.picked[index]) if regions else (0, 0)))
    n_cores = max(used) + 1
    cores: list[list] = [[] for _ in range(n_cores)]
    for builder, (_, _, core_ids) in zip(builders, stages):
        for worker, core in enumerate(core_ids):
            cores[core] = list(builder.cores[worker])
    tile = chip.cores.tile_size
    for tile_start in range(0, n_cores, tile):
        group = [core for core in range(tile_start, min(n_cores, tile_start + tile))]
        counts = {core: sum(isinstance(ins, Barrier) for ins in cores[core]) for core in group}
        top = max(counts.values())
        for core in group:
            cores[core] += [Barrier()] * (top - counts[core])
    name = " + ".join(f"{builder.graph.name} on cores {ids}" for builder, (_, _, ids) in zip(builders, stages))
    return _staged(builders, cores, dram, name, [list(ids) for _, _, ids in stages])


def lower_placed(stages, candidate: Candidate) -> StagedLowered:
    """A workload of several stages (``(role, graph, inputs)`` each, e.g. an LLM's prefill and
    decode) placed as ``candidate.mapping.placement`` says (`dse.plan.placement.place`):
    None, every stage on workers ``0 .. W-1`` one after another in one program; ``"phase"``,
    each stage on its role's core group, all at once (`lower_stages`). An infeasible stage
    raises `Infeasible` naming the stage, its cores and its chip."""
    chip, mapping = candidate.chip, candidate.mapping
    places, reason = place(chip, mapping.placement, mapping.workers, [role for role, _, _ in stages], mapping.requests,
                            mapping.weights)
    if reason:
        raise Infeasible(reason)
    if mapping.placement == "phase":
        regions = None
        if mapping.weights == "shared":  # the stages' regions of the tile's shared banks
            plans = [plan_for(stage_graph, mapping) for _, stage_graph, _ in stages]
            params = [CandidateArrays.from_candidates([Candidate(stage_place.chip, mapping.model_copy(
                update={"workers": len(stage_place.cores)}))]) for stage_place in places]
            (regions,) = stage_regions(plans, params, [places], mapping.placement, [chip])
            if regions.reason:
                raise Infeasible(regions.reason)
        return lower_stages([(stage_graph, stage_inputs, list(stage_place.cores))
                             for (_, stage_graph, stage_inputs), stage_place in zip(stages, places)], chip, mapping,
                            roles=[stage_place.role for stage_place in places], regions=regions)
    dram = Dram()
    dram.bind_content = True  # the stages' identical weights and constants: one copy
    builders = [_build_stage(graph, mapping, inputs, dram, stage_place)
                for (_, graph, inputs), stage_place in zip(stages, places)]
    cores = [sum((list(builder.cores[worker]) for builder in builders), []) for worker in range(mapping.workers)]
    name = " then ".join(f"{builder.graph.name}" for builder in builders) + f" on cores 0-{mapping.workers - 1}"
    return _staged(builders, cores, dram, name, [list(stage_place.cores) for stage_place in places])


@dataclass
class LayeredLowered(StagedLowered):
    """One graph on the chip as a `Schedule` says (`lower_layers`): per request its `Lowered`
    (every op's record, in order; ``stages``), and what went between the ranges."""

    # per tensor handed to a later range (request 0's; every request alike): (tensor,
    # reading range, how: "shared" or "dram", why)
    handoffs: list[tuple[str, int, str, str]] = field(default_factory=list)
    handoff_bytes: int = 0  # bytes the ranges' cores loaded into shared memory, every request


def lower_layers(graph: Graph, candidate: Candidate, requests) -> LayeredLowered:
    """One graph as `dse.plan.placement.schedule` schedules it: ``mapping.placement`` None (SPMD
    on ``mapping.workers``), ``"layers"`` or ``"pipeline"`` (the ops cut into ranges at
    ``mapping.cuts``, range r built for every core of core group r with that group's chip),
    for each of `requests` (the inputs of each request), one program over one DRAM image;
    each request has its own tensors (the weights are placed once), every tensor where the
    range that wrote it left it.

    Request k's range r runs in the schedule's slot (`Schedule.slots`): one after another, or,
    in a pipeline, request k's range r beside request k + 1's range r - 1. In a slot the
    cores of the tile meet every BARRIER of its ranges (those with fewer meet the rest with
    BARRIERs of their own), and one more BARRIER on every core closes the slot. A range's
    leading matmuls whose A an earlier range wrote (`handoffs`, unless ``mapping.handoff =
    "dram"``) read it from shared memory where its tiles fit (`MatmulShape.a_shared`): the
    cores of the range before load them there after their last op, a matmul's tiles in banks
    of its own (`handoff_banks`; request k into bank set ``k mod Schedule.handoff_sets``),
    before the BARRIER that closes their slot."""
    chip, mapping = candidate.chip, candidate.mapping
    plans = plan_for(graph, mapping)
    lay, reason = schedule(chip, mapping, len(plans))
    if reason:
        raise Infeasible(reason)
    places, ranges = lay.places, lay.ranges
    handed = handoffs(plans, ranges, mapping.weights != "shared") if mapping.handoff != "dram" else {}
    params = [CandidateArrays.from_candidates([range_candidate(part_place, mapping)]) for part_place in places]
    (held,) = handoff_banks(plans, ranges, handed, lay.handoff_sets, lay.overlap, params)
    (regions,) = range_regions(plans, ranges, [held], lay.handoff_sets, lay.overlap, params,
                               [[part_place.role for part_place in places]], [chip.name])
    if regions.reason:
        raise Infeasible(regions.reason)
    dram = Dram()
    weights: dict[str, Loc] = {}
    builders: list[list[ProgramBuilder]] = []
    for request, inputs in enumerate(requests):
        dram.scope = ("request", request)  # each request lays out its own constants, as the model counts them
        chain: list[ProgramBuilder] = []
        for part, (part_place, op_range) in enumerate(zip(places, ranges)):
            try:
                builder = ProgramBuilder(graph, range_candidate(part_place, mapping), inputs, dram,
                                         locs=chain[-1].locs if part else None)
                builder.label_prefix = f"request {request}: " if len(requests) > 1 else ""
                builder.b_region, builder.b_picked = regions.bases[part], regions.picked[part]
                if part:
                    builder.unblocked, builder.fused = chain[-1].unblocked, chain[-1].fused  # this request's so far
                    builder.handoff_ops = frozenset(plans[op_index].op.name for op_index in op_range) & set(handed)
                    builder.handoff_loaders = chain[-1].cores
                    builder.handoff_sets, builder.handoff_set = lay.handoff_sets, request % lay.handoff_sets
                    builder.handoff_bases = held.bases
                else:
                    builder.locs.update(weights)  # placed by the first request: one copy
                for op_index in op_range:
                    builder.lower_op(plans[op_index])
            except Infeasible as exc:
                raise Infeasible(stage_reason(part_place, str(exc)) if len(ranges) > 1 else str(exc)) from None
            chain.append(builder)
        weights = {name: loc for name, loc in chain[-1].locs.items() if name in graph.weights}
        builders.append(chain)
    n_cores = max(core for part_place in places for core in part_place.cores) + 1
    tile_cores = list(range(n_cores))  # one tile (`place_layers`), or SPMD's workers
    cores: list[list] = [[] for _ in range(n_cores)]
    met = [0] * n_cores  # BARRIERs each core has passed
    slots = lay.slots()
    for slot, running in enumerate(slots):
        for request, part in running:
            for worker, core in enumerate(places[part].cores):
                cores[core] += builders[request][part].cores[worker]
                met[core] += sum(isinstance(ins, Barrier) for ins in builders[request][part].cores[worker])
        top = max(met)
        for core in tile_cores:  # the slot's BARRIERs met by every core, then one that closes it
            cores[core] += [Barrier()] * (top - met[core] + (slot < len(slots) - 1))
            met[core] = top + (slot < len(slots) - 1)
    img = dram.image()
    how = "in a pipeline of" if lay.overlap else "in"
    program = Program(cores, {"dram": Region(0, (img.size,), "uint8")}, {}, dram_bytes=img.size,
                      name=f"{graph.name} x{lay.requests} {how} {len(ranges)} ranges on "
                           + ", ".join(part_place.role for part_place in places))
    per_request = []
    for chain in builders:
        locs = chain[-1].locs
        per_request.append(Lowered(graph, candidate, program, img, locs,
                                   [rec for builder in chain for rec in builder.records], frozenset(chain[-1].fused),
                                   {ins: label for builder in chain for ins, label in builder.labels.items()},
                                   list(dram.named)))
    for name in graph.outputs:  # request 0's outputs, as a program's outputs
        loc = per_request[0].locs[name]
        if loc.blocked is None:
            program.outputs[name] = Region(loc.addr, loc.buffer_shape, emu_dtype(loc.dtype))
    shared = {(tensor, op): n_bytes for builder in builders[0] for op, tensor, _, n_bytes in builder.handoffs}
    notes = []
    for tensor, part, reader in boundary_tensors(plans, ranges):
        names = {plans[op_index].op.name for op_index in ranges[part]}
        to = [(op, nbytes) for (handed_tensor, op), nbytes in shared.items() if handed_tensor == tensor and op in names]
        offered = [name for name in (plans[op_index].op.name for op_index in ranges[part])
                   if handed.get(name) == tensor]
        notes.append((tensor, part, "shared" if to else "dram",
                      boundary_note(tensor, reader, offered, to, mapping.handoff, held)))
    return LayeredLowered(program, img, per_request, [list(part_place.cores) for part_place in places], notes,
                          sum(nbytes for chain in builders for builder in chain for *_, nbytes in builder.handoffs))


def _build_stage(graph: Graph, mapping, inputs, dram: Dram, placed: Placed, region=(0, 0)) -> "ProgramBuilder":
    """One stage's program, built with its cores' own chip (`placed.chip`) into the shared
    DRAM image, its shared weights in `region` (the bank they start at, the base their tiles
    are picked with: `WeightRegions`); an infeasible op's reason names the stage, its cores
    and its chip."""
    dram.scope = object()  # (constants are bound by their bytes across the stages: `Dram.bind_content`)
    try:
        builder = ProgramBuilder(graph, Candidate(placed.chip, mapping), inputs, dram)
        builder.b_region, builder.b_picked = region
        for plan in plan_for(graph, mapping):
            builder.lower_op(plan)
    except Infeasible as exc:
        raise Infeasible(stage_reason(placed, str(exc))) from None
    return builder


def _staged(builders, cores, dram: Dram, name: str, core_ids) -> StagedLowered:
    """The stages' per-core instruction lists as one program over their one DRAM image."""
    img = dram.image()
    program = Program(cores, {"dram": Region(0, (img.size,), "uint8")}, {}, dram_bytes=img.size, name=name)
    lowered = [Lowered(builder.graph, builder.cand, program, img, builder.locs, builder.records,
                       frozenset(builder.fused), builder.labels, list(dram.named)) for builder in builders]
    return StagedLowered(program, img, lowered, core_ids)


__all__ = ["ELEMENTWISE", "Infeasible", "LayeredLowered", "Lowered", "OpLowering", "StagedLowered", "blocked_bt", "lower",
           "lower_layers", "lower_placed", "lower_stages", "sram_lifetimes", "weight_bt"]
