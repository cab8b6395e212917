"""Where a workload's stages run on the chip's cores, and with which hardware: decided here
for the lowering (`dse.lower.lower_placed`) and the model (`dse.analytical.placed`) alike.

A workload is one or more *stages* (an LLM's phases: prefill, decode), each a graph named
by its role. ``mapping.placement``:

* None (SPMD, the default): every stage on cores ``0 .. workers - 1``, one after another,
  each split across all of them. The program is built once with those cores' parameters:
  the chip's, or their core group's (`ChipConfig.group_chip`) when they all belong to one
  group that overrides the chip's hardware; workers that span groups whose hardware
  differs cannot share one program (infeasible, with that reason).
* ``"phase"``: each stage on every core of the group whose role names it, all stages at
  once (`dse.lower.lower_stages`: the cores of a tile meet at every BARRIER, so the stages
  advance op by op in lock step); each stage's program is built from the same source with
  its group's own parameters (banks, Balls, core-op costs). With ``mapping.weights =
  "shared"`` the stages on one tile keep their weights in regions of its shared banks of
  their own (`stage_regions`).
* ``"layers"``: one graph cut into contiguous ranges of ops at ``mapping.cuts``
  (`layer_ranges`), range r on every core of core group r (`place_layers`; on a chip without
  groups, on block r of the workers), one range after
  another (`dse.lower.lower_layers`: a BARRIER of the whole tile between ranges). A tensor a
  range writes and a later range's leading matmuls read as A is handed off through the tile's
  shared memory (`handoffs`): the cores of the range before load its A tiles there, once a
  matmul, the matmul's Ball reads them (no per-worker A loads); every other tensor stays in
  DRAM.
* ``"pipeline"``: the ranges of ``"layers"`` with ``mapping.requests`` requests overlapped:
  request k's range r runs beside request k + 1's range r - 1 (`Schedule.slots`), a hand-off
  taking a set of shared banks per request in flight (`Schedule.handoff_sets`), every
  boundary its own banks below the earlier boundaries' (`handoff_banks`: the banks their
  picked tiles take); with ``mapping.weights = "shared"`` each range's weights in a region of
  the shared banks of its own, below them all (`range_regions`).
* ``"auto"``: the placement the model finds fastest (`dse.analytical.placed.resolve_auto`):
  for one graph among SPMD, ``"layers"`` and (with requests) ``"pipeline"`` cut before each
  matmul; for a staged workload, SPMD or ``"phase"``.

One graph's SPMD, ``"layers"`` and ``"pipeline"`` are all a `Schedule` (`schedule`): ranges, their
places and the slot each request's range runs in; ``mapping.requests`` runs SPMD's requests
one after another.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from emulator.chip import ChipConfig

from ..mapping import Candidate, CandidateArrays
from .matmul import a_shared_banks, shared_banks
from .units import HANDOFF_UNITS, MATRIX_UNITS, too_many_workers

PLACEMENTS = ("phase", "layers", "pipeline", "auto")


@dataclass(frozen=True)
class Placed:
    """One stage's place: its role, its cores and the chip it is built and costed with."""

    role: str
    cores: tuple[int, ...]
    chip: ChipConfig


def cores_chip(chip: ChipConfig, cores) -> tuple[ChipConfig, str]:
    """The chip one program split across `cores` is built with, and '' (or the chip and
    the reason no one program fits them): the chip's own parameters, or their core group's
    when they all belong to one group that overrides the chip's hardware."""
    cores = list(cores)
    groups = sorted({chip.cores.group_of(core) for core in cores} - {None})
    if not any(chip.cores.groups[group].overrides for group in groups):
        return chip, ""
    if len(groups) == 1:
        return chip.group_chip(groups[0]), ""
    roles = ", ".join(chip.cores.groups[group].role for group in groups)
    first = chip.cores.groups[0].count
    return chip, (f"{len(cores)} workers span core groups {roles} of chip {chip.name}, whose hardware differs: "
                  f"one SPMD program is built for one group's parameters; allowed: at most {first} workers, "
                  f"or mapping.placement = \"phase\"")


def spmd_chip(chip: ChipConfig, workers: int) -> tuple[ChipConfig, str]:
    """`cores_chip` of cores ``0 .. workers - 1``."""
    if workers > chip.cores.count:
        return chip, too_many_workers(workers, chip.name, chip.cores.count)
    if not chip.cores.groups:  # no core group to override anything: the chip itself (cores_chip's answer)
        return chip, ""
    return cores_chip(chip, range(workers))


def place(chip: ChipConfig, placement: str | None, workers: int, roles: list[str],
          requests: int | None = None, weights: str | None = None) -> tuple[list[Placed], str]:
    """Each stage's place (`roles`: the stages' roles, in order), and '' (or the reason the
    placement cannot be made, with no places). ``"auto"`` is resolved before (`dse.analytical.
    placed.resolve_auto_stages`)."""
    if (requests or 1) > 1:
        return [], (f"mapping.requests = {requests} runs one graph's requests; a workload of stages "
                    f"({', '.join(roles)}) runs once")
    if placement is None:
        spmd, reason = spmd_chip(chip, workers)
        if reason:
            return [], reason
        return [Placed(role, tuple(range(workers)), spmd) for role in roles], ""
    if placement in ("layers", "pipeline"):
        return [], (f"placement \"{placement}\" cuts one graph into ranges of ops; a workload of stages "
                    f"({', '.join(roles)}) is placed by \"phase\" or SPMD")
    if placement != "phase":
        raise ValueError(f"placement must be None or one of {PLACEMENTS}, got {placement!r}")
    have = [group.role for group in chip.cores.groups]
    places = []
    for role in roles:
        group_index = chip.group_index(role)
        if group_index is None:
            return [], (f"placement \"phase\" puts stage {role!r} on the core group of that role, but chip "
                        f"{chip.name} has " + (f"groups {', '.join(have)}" if have else "no core groups"))
        places.append(Placed(role, tuple(chip.cores.group_cores(group_index)), chip.group_chip(group_index)))
    # with mapping.weights = shared, stages on one tile each load theirs into a region of
    # its shared banks (`stage_regions`), decided with their tiles
    return places, ""


def stage_reason(placed: Placed, reason: str) -> str:
    """A stage's infeasible reason, naming the stage, its cores and its chip."""
    cores = placed.cores
    span = f"{cores[0]}" if len(cores) == 1 else f"{cores[0]}-{cores[-1]}"
    return f"stage {placed.role} on cores {span} ({placed.chip.name}): {reason}"


def layer_ranges(n_ops: int, cuts) -> tuple[list[range], str]:
    """The contiguous ranges of op indices `cuts` makes of a graph of `n_ops` ops, and ''
    (or why those cuts do not cut it, naming the knob, the value and what is allowed)."""
    cuts = list(cuts or ())
    if not cuts or cuts != sorted(set(cuts)) or cuts[0] < 1 or cuts[-1] > n_ops - 1:
        return [], (f"mapping.cuts = {cuts}: allowed increasing op indices in 1..{n_ops - 1} "
                    f"(the graph has {n_ops} ops; a cut is the index of the op that begins a range)")
    bounds = [0, *cuts, n_ops]
    return [range(start, stop) for start, stop in zip(bounds, bounds[1:])], ""


def place_layers(chip: ChipConfig, cuts, n_ops: int, placement: str = "layers",
                 workers: int = 1) -> tuple[list[Placed], list[range], str]:
    """Range r of the graph (`layer_ranges`) on every core of core group r, built with that
    group's chip; on a chip without core groups, on block r of `workers` cores split into as
    many contiguous blocks as ranges (the first ones a core larger). And '' (or the reason it
    cannot be placed so). The cores must share one tile: a BARRIER, which orders one range
    after the one before, joins one tile's cores."""
    ranges, reason = layer_ranges(n_ops, cuts)
    if reason:
        return [], [], reason
    groups = chip.cores.groups
    if not groups:
        if len(ranges) > workers or workers > chip.cores.count:
            return [], [], (f"placement \"{placement}\" on chip {chip.name}, which has no core groups, puts its "
                            f"{len(ranges)} ranges on blocks of mapping.workers = {workers} cores; allowed: "
                            f"{len(ranges)} to {chip.cores.count} workers")
        sizes = [workers // len(ranges) + (index < workers % len(ranges)) for index in range(len(ranges))]
        starts = np.cumsum([0, *sizes])
        places = [Placed(f"cores {first}-{stop - 1}[{op_range.start}:{op_range.stop}]", tuple(range(first, stop)),
                         cores_chip(chip, range(first, stop))[0])
                  for first, stop, op_range in zip(starts[:-1].tolist(), starts[1:].tolist(), ranges)]
        what = f"its cores 0-{workers - 1}"
    elif len(ranges) > len(groups):
        return [], [], (f"placement \"{placement}\" puts range r of {len(ranges)} on core group r, but chip {chip.name} "
                        f"has {len(groups)} core group{'s' if len(groups) != 1 else ''}; allowed: at most "
                        f"{len(groups)} ranges (mapping.cuts of {len(groups) - 1} indices)")
    else:
        places = [Placed(f"{groups[index].role}[{op_range.start}:{op_range.stop}]", tuple(chip.cores.group_cores(index)),
                         chip.group_chip(index)) for index, op_range in enumerate(ranges)]
        what = f"core groups {', '.join(group.role for group in groups[:len(ranges)])}"
    tile = chip.cores.tile_size
    tiles = sorted({core // tile for place in places for core in place.cores})
    if len(tiles) > 1:
        return [], [], (f"placement \"{placement}\" orders its ranges with BARRIERs, which join the cores of one tile, but "
                        f"{what} of chip {chip.name} span tiles {tiles} (cores.tile_size {tile})")
    return places, ranges, ""


@dataclass(frozen=True)
class Schedule:
    """One graph's ranges of ops, their places, and when each request's range runs: request k
    range r in slot ``k + r`` when requests overlap (``"pipeline"``), else ``k * R + r``."""

    places: list[Placed]
    ranges: list[range]
    requests: int
    overlap: bool

    def slots(self) -> list[list[tuple[int, int]]]:
        """Per slot, the (request, range) pairs that run in it, in range order."""
        n_ranges = len(self.ranges)

        def slot_of(request: int, part: int) -> int:
            return request + part if self.overlap else request * n_ranges + part

        out: list[list[tuple[int, int]]] = [[] for _ in range(slot_of(self.requests - 1, n_ranges - 1) + 1)]
        for request in range(self.requests):
            for part in range(n_ranges):
                out[slot_of(request, part)].append((request, part))
        return out

    @property
    def handoff_sets(self) -> int:
        """Sets of shared banks a hand-off takes: one; two when requests overlap (the writing
        range fills one set while the reading range reads the other)."""
        return 2 if self.overlap else 1


def schedule(chip: ChipConfig, mapping, n_ops: int) -> tuple[Schedule | None, str]:
    """How a candidate runs one graph of `n_ops` ops (SPMD with ``mapping.requests``, "layers",
    "pipeline"), and '' (or the reason it cannot)."""
    requests = mapping.requests or 1
    if mapping.placement is None:
        spmd, reason = spmd_chip(chip, mapping.workers)
        if reason:
            return None, reason
        return Schedule([Placed("spmd", tuple(range(mapping.workers)), spmd)], [range(n_ops)], requests, False), ""
    if mapping.placement not in ("layers", "pipeline"):
        raise ValueError(f"schedule of placement None, layers or pipeline, got {mapping.placement!r}")
    places, ranges, reason = place_layers(chip, mapping.cuts, n_ops, mapping.placement, mapping.workers)
    if reason:
        return None, reason
    # with mapping.weights = shared, the ranges at once each load theirs into a region of the
    # tile's shared banks (`range_regions`), decided with their tiles
    return Schedule(places, ranges, requests, mapping.placement == "pipeline"), ""


def handoffs(plans, ranges, leading: bool = True) -> dict[str, str]:
    """The matmuls whose A the range before hands off through shared memory: op name -> the
    tensor. Per range after the first, its leading matrix-Ball products (no conv before them,
    none between that reads its A otherwise): each that reads as A (with no copy of its own) a
    tensor an earlier range wrote, such as the q, k and v projections of one normed input;
    each takes banks of its own (`handoff_banks`). With ``mapping.weights = "shared"`` too
    (`leading` is kept for the callers that pass it; it no longer restricts): a shared
    weight's B tiles, loaded from the bottom bank up at its product's start, then meet the
    A banks of the products after it, loaded before, which `handoff_banks` places above them
    for exactly that. Every other tensor between ranges stays in DRAM. (Whether its tiles then
    fit is the tile check's: `MatmulShape.a_shared`.)"""
    where = {}
    for range_index, op_range in enumerate(ranges):
        for op_index in op_range:
            where.update({tensor: range_index for tensor in plans[op_index].op.outputs})
    out = {}
    for range_index, op_range in enumerate(ranges[1:], 1):
        for plan in (plans[op_index] for op_index in op_range if plans[op_index].unit in MATRIX_UNITS):
            a_tensor = plan.op.inputs[0]
            if (plan.unit not in HANDOFF_UNITS or where.get(a_tensor, range_index) >= range_index
                    or any(copy.tensor == a_tensor for copy in plan.copies)):
                break
            out[plan.op.name] = a_tensor
    return out


def range_candidate(place: Placed, mapping) -> Candidate:
    """The candidate a range is built and costed as: its place's chip, its cores as workers."""
    return Candidate(place.chip, mapping.model_copy(update={"workers": len(place.cores)}))


@dataclass(frozen=True)
class HandoffBanks:
    """One candidate's shared banks for its hand-offs (`handoff_banks`), by handed-off matmul."""

    bases: dict[str, int]  # banks, counted down from the top, the hand-offs live beside it hold first
    banks: dict[str, int]  # the banks its picked A tiles take, every set (0: its A goes through DRAM)
    # with shared weights: a hand-off closed (its A through DRAM) -> the product whose shared
    # B tiles would reach its A banks ('': the pipeline's regions of weights, `range_regions`)
    closed: dict[str, str] = field(default_factory=dict)


def handoff_banks(plans, ranges, handed: dict[str, str], sets: int, overlap: bool,
                  range_params: list[CandidateArrays]) -> list[HandoffBanks]:
    """Per candidate (`range_params[r]`: the candidates as range r is built and costed,
    `range_candidate`), the shared banks of each handed-off matmul (`handoffs`), decided in
    order, range by range and boundary by boundary: its tile is picked with the banks the
    hand-offs live beside it already hold as its base (`MatmulShape.a_shared_base`), and it
    holds exactly the banks its picked A tiles take (`a_shared_banks`: sets x batch x M / tm;
    none where they do not fit and A goes through DRAM, `handoff_why`), so the next starts
    below them. The matmuls one range hands to are live at once; ranges one after another
    (no overlap) meet at a BARRIER before the next boundary's loads, so each range's start
    again at the top bank, while in a pipeline every boundary is live at once and each keeps
    banks of its own.

    A candidate with ``mapping.weights = "shared"`` takes a range's hand-offs from its last
    to its first: the first product's A at the bottom of theirs, right above the banks its
    shared B tiles fill from bank 0 up, so the tile check (base + A tiles + B tiles within
    the shared banks) holds every later product's A, loaded before, clear of its B; a
    product's B may overwrite only the A banks of the products before it, done by then
    (each product closes with a sync). In a pipeline (`overlap`) the ranges run at once, so no
    B tile may meet any hand-off's banks: every candidate takes its hand-offs in order, as
    with a copy per worker, and its shared weights go below them (`range_regions`)."""
    n_cand = range_params[0].n if range_params else 0
    out = [HandoffBanks({}, {}) for _ in range(n_cand)]
    taken = np.zeros(n_cand, dtype=np.int64)
    for range_index, op_range in enumerate(ranges):
        if not overlap:
            taken[:] = 0
        ops = [plans[op_index] for op_index in op_range if plans[op_index].op.name in handed]
        shared_b = range_params[range_index].shared_weights if n_cand else np.zeros(0, dtype=bool)
        if n_cand and overlap:  # a pipeline's shared weights sit in regions of their own (`range_regions`)
            _take_banks(out, taken, ops, np.arange(n_cand), range_params[range_index], sets)
        elif n_cand:
            _take_banks(out, taken, ops, np.flatnonzero(~shared_b), range_params[range_index], sets)
            _take_banks_shared_b(out, taken, ops, np.flatnonzero(shared_b), range_params[range_index], sets)
    return out


def _take_banks(out, taken, ops, who, params: CandidateArrays, sets: int) -> None:
    """`handoff_banks` for candidates `who`, `ops` in this order, each below the ones before."""
    if not len(who):
        return
    for plan in ops:
        shape = replace(plan.gemm, a_shared=sets)
        took = np.zeros(len(taken), dtype=np.int64)
        for base in np.unique(taken[who]).tolist():  # candidates at one base share one pick
            same_base = who[taken[who] == base]
            took[same_base] = a_shared_banks(params.take(same_base), replace(shape, a_shared_base=base))
        for cand in who.tolist():
            out[cand].bases[plan.op.name], out[cand].banks[plan.op.name] = int(taken[cand]), int(took[cand])
        taken[who] += took[who]


def _take_banks_shared_b(out, taken, ops, who, params: CandidateArrays, sets: int) -> None:
    """`handoff_banks` for candidates `who` with shared weights: the range's products from the
    last to the first, each above the ones after it. A product whose A does not fit still
    loads its shared B tiles from bank 0 up; where they would reach the A banks of the
    products after it (B tiles + the banks held > the shared banks), those are closed (their
    base set to every shared bank, so no tile fits and their A reads DRAM, in the lowering's
    tile check as in the model's) and it is picked again at the base the range began at."""
    for cand in who.tolist():
        one = params.take(np.array([cand]))
        start = int(taken[cand])
        later: list = []
        for plan in ops[::-1]:
            shape = replace(plan.gemm, a_shared=sets)
            a_banks, b_banks = shared_banks(one, replace(shape, a_shared_base=int(taken[cand])))
            banks = int(a_banks[0])
            if not banks and int(taken[cand]) > start and int(b_banks[0]) + int(taken[cand]) > int(one.shared_banks[0]):
                closed = int(one.shared_banks[0])
                for later_op in later:
                    out[cand].bases[later_op], out[cand].banks[later_op] = closed, 0
                    out[cand].closed.setdefault(later_op, plan.op.name)
                taken[cand] = start
                (banks,) = a_shared_banks(one, replace(shape, a_shared_base=start)).tolist()
            out[cand].bases[plan.op.name], out[cand].banks[plan.op.name] = int(taken[cand]), int(banks)
            taken[cand] += banks
            later.append(plan.op.name)


@dataclass(frozen=True)
class WeightRegions:
    """Where the parts of one candidate that run at once on one tile (a pipeline's ranges,
    ``"phase"``'s stages) keep their shared weights (``mapping.weights = "shared"``): part p's
    B tiles from shared bank ``bases[p]`` up (counted from the first shared bank), in a
    region of ``banks[p]`` banks, the most one of its products' picked tiles take; its
    products' tiles picked with ``MatmulShape.b_shared_base = picked[p]`` (0; or, where the
    regions picked alone do not fit, the banks the others hold, so its tiles fit the rest);
    and '' (or why the regions, with the hand-offs' A banks, do not fit the shared banks)."""

    bases: list[int]
    banks: list[int]
    picked: list[int]
    reason: str = ""


def weight_banks(plans, params: CandidateArrays, held: list[HandoffBanks] | None = None, sets: int = 0,
                 base: int = 0) -> np.ndarray:
    """Per candidate, the most shared banks the B tiles of one of `plans`' products take
    (`shared_banks`; 0 without shared weights), each tile picked as both consumers pick it, with
    ``b_shared_base = base``: a product handed its A (in ``held[c].bases``) with `sets` sets of
    A tiles below that base. -1 where a product has no legal tile there, or a handed product's
    pick would take other A banks than ``held[c].banks`` says."""
    most = np.zeros(params.n, dtype=np.int64)
    who = np.flatnonzero(params.shared_weights)
    for plan in plans:
        if not len(who) or plan.unit not in MATRIX_UNITS or plan.gemm is None or not plan.gemm.b_weight:
            continue
        by_base: dict[int | None, list[int]] = {}
        for cand in who.tolist():
            by_base.setdefault(held[cand].bases.get(plan.op.name) if held else None, []).append(cand)
        for a_base, cands in by_base.items():
            shape = replace(plan.gemm, b_shared_base=base)
            if a_base is not None:
                shape = replace(shape, a_shared=sets, a_shared_base=a_base)
            where = np.asarray(cands)
            a_banks, b_banks = shared_banks(params.take(where), shape)
            bad = b_banks == 0  # a shared weight with no legal tile
            if a_base is not None:
                bad |= a_banks != np.asarray([held[cand].banks[plan.op.name] for cand in cands])
            most[where] = np.where(bad | (most[where] < 0), -1, np.maximum(most[where], b_banks))
    return most


def _fit(banks: list[int], reserve: int, have: int, repick) -> tuple[list[int], list[int]]:
    """Regions `banks` (each part's, its tiles picked alone) and `reserve` more banks in `have`:
    where they do not fit, each part from the largest region down has its tiles picked again
    within the banks the others leave (``repick(part, base)``: its region picked with
    ``b_shared_base = base``, -1 where that cannot be), kept where smaller, until they fit.
    Returns the regions and the base each part's tiles are picked with."""
    alone = list(banks)
    banks, picked = list(alone), [0] * len(alone)
    for index in sorted(range(len(banks)), key=lambda part: (-banks[part], part)):
        if sum(banks) + reserve <= have:
            return banks, picked
        base = reserve + sum(banks) - banks[index]
        if banks[index] and base < have:
            again = repick(index, base)
            if 0 <= again < banks[index]:
                banks[index], picked[index] = again, base
    if sum(banks) + reserve <= have:
        return banks, picked
    # the others too large to leave one room: every part within a share of the banks in
    # proportion to its region picked alone (the share's rest to the first parts)
    free = have - reserve
    total = sum(alone)
    if free <= 0 or not total:
        return banks, picked
    shares = [free * region // total for region in alone]
    for index in range(free - sum(shares)):
        holding = [position for position, region in enumerate(alone) if region]
        shares[holding[index % len(holding)]] += 1
    fitted, picked_at = [], []
    for index, (region, share) in enumerate(zip(alone, shares)):
        again = repick(index, have - share) if region > share and share > 0 else (region if region <= share else -1)
        if again < 0:
            return banks, picked  # no tile of this part fits its share
        fitted.append(again)
        picked_at.append(have - share if region > share else 0)
    return fitted, picked_at


def range_regions(plans, ranges, held: list[HandoffBanks], sets: int, overlap: bool,
                  range_params: list[CandidateArrays], names: list[list[str]], chips: list[str]
                  ) -> list[WeightRegions]:
    """Per candidate, its ranges' regions of shared weights (`WeightRegions`), decided once for
    the lowering and the model: ranges one after another (no overlap) each load theirs from
    bank 0 up after the BARRIER before them; in a pipeline, where they run at once, range r's
    from above the regions of ranges < r, all of them below the hand-offs' A banks
    (`handoff_banks`, every boundary and set live at once, from the top down), each range's
    tiles picked alone, or again within the banks the others leave where that does not fit
    (`_fit`). Where they still do not fit, the weights come first: every hand-off of the
    candidate is closed (its A through DRAM; `held[c]` changed in place, ``closed`` naming no
    product, for both consumers' notes) and the regions fitted again without them. Where the
    regions alone take more than the tile's shared banks the candidate is infeasible, the
    reason naming the ranges (`names[c]`), the banks needed and the banks chip `chips[c]` has."""
    n_cand, n_ranges = (range_params[0].n if range_params else 0), len(ranges)
    if not overlap or not n_cand:
        return [WeightRegions([0] * n_ranges, [0] * n_ranges, [0] * n_ranges) for _ in range(n_cand)]
    parts = [[plans[op_index] for op_index in op_range] for op_range in ranges]
    # (a product with no legal tile at all is its op's own reason)
    per = np.maximum(0, np.stack([weight_banks(part, range_params[part_index], held, sets)
                                  for part_index, part in enumerate(parts)], axis=1))
    out = []
    for cand in range(n_cand):
        a_banks = sum(held[cand].banks.values())
        have = int(range_params[0].shared_banks[cand])
        if sum(per[cand].tolist()) + a_banks <= have:  # picked alone, they fit (no shared weights: no regions)
            banks = per[cand].tolist()
            out.append(WeightRegions(np.cumsum([0, *banks[:-1]]).tolist(), banks, [0] * n_ranges))
            continue
        one = [params.take(np.array([cand])) for params in range_params]
        banks, picked = _fit(per[cand].tolist(), a_banks, have,
                             lambda part, base: int(weight_banks(parts[part], one[part], [held[cand]], sets, base)[0]))
        if a_banks and sum(banks) + a_banks > have:
            # the weights first: every hand-off closed (its A through DRAM, its base every shared
            # bank so no A tile fits, in `held[c]` for both consumers) and the regions fitted again
            for handed_op in held[cand].bases:
                held[cand].bases[handed_op], held[cand].banks[handed_op] = have, 0
                held[cand].closed.setdefault(handed_op, "")
            a_banks = 0
            alone = [max(0, int(weight_banks(part, one[part_index], [held[cand]], sets)[0]))
                     for part_index, part in enumerate(parts)]
            banks, picked = _fit(alone, 0, have,
                                 lambda part, base: int(weight_banks(parts[part], one[part], [held[cand]], sets,
                                                                     base)[0]))
        reason = ""
        if sum(banks) and sum(banks) + a_banks > have:
            reason = _regions_reason("pipeline", "ranges", names[cand], banks, a_banks, have, chips[cand])
        out.append(WeightRegions(np.cumsum([0, *banks[:-1]]).tolist(), banks, picked, reason))
    return out


def stage_regions(stage_plans, stage_params: list[CandidateArrays], places: list[list[Placed]], placement,
                  chips: list[ChipConfig]) -> list[WeightRegions]:
    """Per candidate (`places[c]`, its stages' places as `place` gives them on chip `chips[c]`),
    its stages' regions of shared weights (`WeightRegions`), decided once for the lowering and
    the model: with ``"phase"`` the stages on one tile run at once, so each stage's from above
    the regions of the stages before it on its tiles, each stage's tiles picked alone, or
    again within the banks the others on its tile leave where that does not fit (`_fit`);
    SPMD's stages, one after another on the same cores, each from bank 0 up. Where a tile's
    regions still take more than its shared banks the candidate is infeasible, the reason
    naming the stages, the banks needed and the banks the chip has. `stage_plans[s]`: stage
    s's plan; `stage_params[s]`: stage s of every candidate, as it is built and costed (its
    place's chip and cores)."""
    n_cand, n_stages = (stage_params[0].n if stage_params else 0), len(stage_plans)
    if placement != "phase" or not n_cand:
        return [WeightRegions([0] * n_stages, [0] * n_stages, [0] * n_stages) for _ in range(n_cand)]
    per = np.maximum(0, np.stack([weight_banks(plans, params) for plans, params in zip(stage_plans, stage_params)],
                                 axis=1))
    out = []
    for cand in range(n_cand):
        tile, have = chips[cand].cores.tile_size, chips[cand].shared_memory.banks
        tiles = [sorted({core // tile for core in place.cores}) for place in places[cand]]
        banks, picked = per[cand].tolist(), [0] * n_stages
        one = [params.take(np.array([cand])) for params in stage_params] if sum(banks) > have else []
        for tile_index in sorted({tile_index for stage_tiles in tiles for tile_index in stage_tiles}):
            on_tile = [stage for stage in range(n_stages) if tile_index in tiles[stage]]

            def repick(part, base, stages=on_tile):
                return int(weight_banks(stage_plans[stages[part]], one[stages[part]], base=base)[0])

            fit, picked_at = _fit([banks[stage] for stage in on_tile], 0, have, repick)
            for stage, region, base in zip(on_tile, fit, picked_at):
                if base:
                    banks[stage], picked[stage] = region, base
        used: dict[int, int] = {}
        bases = []
        for stage in range(n_stages):
            base = max(used.get(tile_index, 0) for tile_index in tiles[stage])
            bases.append(base)
            used.update({tile_index: base + banks[stage] for tile_index in tiles[stage]})
        reason = ""
        for tile_index, top in used.items():
            if top > have:
                on_tile = [stage for stage in range(n_stages) if tile_index in tiles[stage]]
                reason = _regions_reason("phase", "stages", [places[cand][stage].role for stage in on_tile],
                                         [banks[stage] for stage in on_tile], 0, have, chips[cand].name)
                break
        out.append(WeightRegions(bases, banks, picked, reason))
    return out


def _regions_reason(placement: str, what: str, names: list[str], banks: list[int], handoff: int, have: int,
                    chip: str) -> str:
    regions = ", ".join(f"{name}: {region}" for name, region in zip(names, banks))
    plus = f" and the hand-offs' A tiles {handoff} more" if handoff else ""
    need = sum(banks) + handoff
    return (f"placement \"{placement}\" runs {what} {', '.join(names)} at once on one tile, each with its shared "
            f"weights (mapping.weights = shared) in shared banks of its own ({regions}){plus}: {need} shared banks "
            f"needed, chip {chip} has {have} (shared_memory.banks); allowed: more shared banks, or "
            f"mapping.weights = per_worker")


def boundary_tensors(plans, ranges) -> list[tuple[str, int, str]]:
    """Every tensor a range reads that an earlier range wrote: (tensor, reading range, the
    first op of it that reads it), in order."""
    where = {}
    out, seen = [], set()
    for range_index, op_range in enumerate(ranges):
        for op_index in op_range:
            op = plans[op_index].op
            for tensor in op.inputs:
                if where.get(tensor, range_index) < range_index and (tensor, range_index) not in seen:
                    seen.add((tensor, range_index))
                    out.append((tensor, range_index, op.name))
            where.update({tensor: range_index for tensor in op.outputs})
    return out


def handoff_why(tensor: str, reader: str, matmul: str | None, handoff: str | None, base: int = 0,
                closer: str | None = None) -> str:
    """Why a tensor between ranges went through DRAM (the candidate's notes: the lowering's
    and the model's words); `matmul`: the op `handoffs` offered it to, if any, `base`: the
    shared banks the picked A tiles of the hand-offs live beside it hold, and `closer`: the
    product whose shared B tiles closed its hand-off (`handoff_banks`)."""
    if handoff == "dram":
        return f"{tensor} via DRAM (mapping.handoff = dram)"
    if matmul is not None:
        return f"{tensor} via DRAM: {_offered_why(matmul, base, closer)}"
    return f"{tensor} via DRAM: read first by op {reader}, not as A of its range's leading matmuls"


def _offered_why(matmul: str, base: int, closer: str | None) -> str:
    if closer == "":  # closed by `range_regions`
        return ("the ranges' regions of shared weights (mapping.weights = shared, ranges at once) leave no banks for "
                "the hand-offs' A tiles")
    if closer is not None:
        return f"op {closer}'s shared B tiles would reach the banks op {matmul}'s A tiles take"
    beside = f" beside the {base} bank{'s' * (base != 1)} the A tiles of the hand-offs before it hold" if base else ""
    return (f"op {matmul}'s A tiles do not fit shared memory one bank each with the whole reduction in one tile "
            f"(K split, or more tiles than the shared banks B leaves{beside})")


def boundary_note(tensor: str, reader: str, offered: list[str], to: list[tuple[str, int]], handoff: str | None,
                  held: HandoffBanks) -> str:
    """How a tensor between ranges went (the candidate's notes, in the lowering's and the
    model's words): `offered`, the ops of the reading range `handoffs` offered it to, in
    order; `to`, those that read it through shared memory and the bytes loaded for each.
    An offered op left out reads its A from DRAM, and the note says why."""
    if not to:
        first = offered[0] if offered else None
        return handoff_why(tensor, reader, first, handoff, held.bases.get(first, 0), held.closed.get(first))
    line = handoff_note(tensor, [op for op, _ in to], sum(nbytes for _, nbytes in to))
    shared = {op for op, _ in to}
    left = [f"op {op}'s A via DRAM: {_offered_why(op, held.bases.get(op, 0), held.closed.get(op))}"
            for op in offered if op not in shared]
    return "; ".join([line, *left])


def handoff_note(tensor: str, ops, nbytes: int) -> str:
    """A tensor handed off through shared memory to op `ops` (one name, or several) (the
    candidate's notes)."""
    if isinstance(ops, str) or len(ops) == 1:
        return f"{tensor} to op {ops if isinstance(ops, str) else ops[0]}'s A via shared memory: {nbytes} bytes"
    return f"{tensor} to ops {', '.join(ops)} (their A) via shared memory: {nbytes} bytes"


__all__ = ["PLACEMENTS", "HandoffBanks", "Placed", "Schedule", "boundary_note", "boundary_tensors", "cores_chip",
           "handoff_banks", "handoff_note", "handoff_why", "handoffs", "layer_ranges", "place", "place_layers",
           "range_candidate", "range_regions", "schedule", "spmd_chip", "stage_reason", "stage_regions",
           "WeightRegions", "weight_banks"]
