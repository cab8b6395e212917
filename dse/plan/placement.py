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
    groups = sorted({chip.cores.group_of(c) for c in cores} - {None})
    if not any(chip.cores.groups[g].overrides for g in groups):
        return chip, ""
    if len(groups) == 1:
        return chip.group_chip(groups[0]), ""
    roles = ", ".join(chip.cores.groups[g].role for g in groups)
    first = chip.cores.groups[0].count
    return chip, (f"{len(cores)} workers span core groups {roles} of chip {chip.name}, whose hardware differs: "
                  f"one SPMD program is built for one group's parameters; allowed: at most {first} workers, "
                  f"or mapping.placement = \"phase\"")


def spmd_chip(chip: ChipConfig, workers: int) -> tuple[ChipConfig, str]:
    """`cores_chip` of cores ``0 .. workers - 1``."""
    if workers > chip.cores.count:
        return chip, too_many_workers(workers, chip.name, chip.cores.count)
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
    have = [g.role for g in chip.cores.groups]
    places = []
    for role in roles:
        i = chip.group_index(role)
        if i is None:
            return [], (f"placement \"phase\" puts stage {role!r} on the core group of that role, but chip "
                        f"{chip.name} has " + (f"groups {', '.join(have)}" if have else "no core groups"))
        places.append(Placed(role, tuple(chip.cores.group_cores(i)), chip.group_chip(i)))
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
    return [range(a, b) for a, b in zip(bounds, bounds[1:])], ""


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
        sizes = [workers // len(ranges) + (r < workers % len(ranges)) for r in range(len(ranges))]
        starts = np.cumsum([0, *sizes])
        places = [Placed(f"cores {a}-{b - 1}[{rg.start}:{rg.stop}]", tuple(range(a, b)), cores_chip(chip, range(a, b))[0])
                  for a, b, rg in zip(starts[:-1].tolist(), starts[1:].tolist(), ranges)]
        what = f"its cores 0-{workers - 1}"
    elif len(ranges) > len(groups):
        return [], [], (f"placement \"{placement}\" puts range r of {len(ranges)} on core group r, but chip {chip.name} "
                        f"has {len(groups)} core group{'s' if len(groups) != 1 else ''}; allowed: at most "
                        f"{len(groups)} ranges (mapping.cuts of {len(groups) - 1} indices)")
    else:
        places = [Placed(f"{groups[r].role}[{rg.start}:{rg.stop}]", tuple(chip.cores.group_cores(r)),
                         chip.group_chip(r)) for r, rg in enumerate(ranges)]
        what = f"core groups {', '.join(g.role for g in groups[:len(ranges)])}"
    tile = chip.cores.tile_size
    tiles = sorted({c // tile for p in places for c in p.cores})
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
        R = len(self.ranges)
        at = (lambda k, r: k + r) if self.overlap else (lambda k, r: k * R + r)  # noqa: E731
        n = at(self.requests - 1, R - 1) + 1
        out: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        for k in range(self.requests):
            for r in range(R):
                out[at(k, r)].append((k, r))
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
    for r, rg in enumerate(ranges):
        for i in rg:
            where.update({t: r for t in plans[i].op.outputs})
    out = {}
    for r, rg in enumerate(ranges[1:], 1):
        for plan in (plans[i] for i in rg if plans[i].unit in MATRIX_UNITS):
            a = plan.op.inputs[0]
            if plan.unit not in HANDOFF_UNITS or where.get(a, r) >= r or any(c.tensor == a for c in plan.copies):
                break
            out[plan.op.name] = a
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
    n = range_params[0].n if range_params else 0
    out = [HandoffBanks({}, {}) for _ in range(n)]
    taken = np.zeros(n, dtype=np.int64)
    for r, rg in enumerate(ranges):
        if not overlap:
            taken[:] = 0
        ops = [plans[i] for i in rg if plans[i].op.name in handed]
        shared_b = range_params[r].shared_weights if n else np.zeros(0, dtype=bool)
        if n and overlap:  # a pipeline's shared weights sit in regions of their own (`range_regions`)
            _take_banks(out, taken, ops, np.arange(n), range_params[r], sets)
        elif n:
            _take_banks(out, taken, ops, np.flatnonzero(~shared_b), range_params[r], sets)
            _take_banks_shared_b(out, taken, ops, np.flatnonzero(shared_b), range_params[r], sets)
    return out


def _take_banks(out, taken, ops, who, params: CandidateArrays, sets: int) -> None:
    """`handoff_banks` for candidates `who`, `ops` in this order, each below the ones before."""
    if not len(who):
        return
    for p in ops:
        shape = replace(p.gemm, a_shared=sets)
        took = np.zeros(len(taken), dtype=np.int64)
        for base in np.unique(taken[who]).tolist():  # candidates at one base share one pick
            at = who[taken[who] == base]
            took[at] = a_shared_banks(params.take(at), replace(shape, a_shared_base=base))
        for c in who.tolist():
            out[c].bases[p.op.name], out[c].banks[p.op.name] = int(taken[c]), int(took[c])
        taken[who] += took[who]


def _take_banks_shared_b(out, taken, ops, who, params: CandidateArrays, sets: int) -> None:
    """`handoff_banks` for candidates `who` with shared weights: the range's products from the
    last to the first, each above the ones after it. A product whose A does not fit still
    loads its shared B tiles from bank 0 up; where they would reach the A banks of the
    products after it (B tiles + the banks held > the shared banks), those are closed (their
    base set to every shared bank, so no tile fits and their A reads DRAM, in the lowering's
    tile check as in the model's) and it is picked again at the base the range began at."""
    for c in who.tolist():
        one = params.take(np.array([c]))
        start = int(taken[c])
        later: list = []
        for p in ops[::-1]:
            shape = replace(p.gemm, a_shared=sets)
            a, b = shared_banks(one, replace(shape, a_shared_base=int(taken[c])))
            banks = int(a[0])
            if not banks and int(taken[c]) > start and int(b[0]) + int(taken[c]) > int(one.shared_banks[0]):
                closed = int(one.shared_banks[0])
                for q in later:
                    out[c].bases[q], out[c].banks[q] = closed, 0
                    out[c].closed.setdefault(q, p.op.name)
                taken[c] = start
                (banks,) = a_shared_banks(one, replace(shape, a_shared_base=start)).tolist()
            out[c].bases[p.op.name], out[c].banks[p.op.name] = int(taken[c]), int(banks)
            taken[c] += banks
            later.append(p.op.name)


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
    for p in plans:
        if not len(who) or p.unit not in MATRIX_UNITS or p.gemm is None or not p.gemm.b_weight:
            continue
        by_base: dict[int | None, list[int]] = {}
        for c in who.tolist():
            by_base.setdefault(held[c].bases.get(p.op.name) if held else None, []).append(c)
        for a_base, cs in by_base.items():
            shape = replace(p.gemm, b_shared_base=base)
            if a_base is not None:
                shape = replace(shape, a_shared=sets, a_shared_base=a_base)
            at = np.asarray(cs)
            a, b = shared_banks(params.take(at), shape)
            bad = b == 0  # a shared weight with no legal tile
            if a_base is not None:
                bad |= a != np.asarray([held[c].banks[p.op.name] for c in cs])
            most[at] = np.where(bad | (most[at] < 0), -1, np.maximum(most[at], b))
    return most


def _fit(banks: list[int], reserve: int, have: int, repick) -> tuple[list[int], list[int]]:
    """Regions `banks` (each part's, its tiles picked alone) and `reserve` more banks in `have`:
    where they do not fit, each part from the largest region down has its tiles picked again
    within the banks the others leave (``repick(part, base)``: its region picked with
    ``b_shared_base = base``, -1 where that cannot be), kept where smaller, until they fit.
    Returns the regions and the base each part's tiles are picked with."""
    alone = list(banks)
    banks, picked = list(alone), [0] * len(alone)
    for r in sorted(range(len(banks)), key=lambda r: (-banks[r], r)):
        if sum(banks) + reserve <= have:
            return banks, picked
        base = reserve + sum(banks) - banks[r]
        if banks[r] and base < have:
            again = repick(r, base)
            if 0 <= again < banks[r]:
                banks[r], picked[r] = again, base
    if sum(banks) + reserve <= have:
        return banks, picked
    # the others too large to leave one room: every part within a share of the banks in
    # proportion to its region picked alone (the share's rest to the first parts)
    free = have - reserve
    total = sum(alone)
    if free <= 0 or not total:
        return banks, picked
    shares = [free * b // total for b in alone]
    for r in range(free - sum(shares)):
        shares[[k for k, b in enumerate(alone) if b][r % sum(1 for b in alone if b)]] += 1
    fitted, at = [], []
    for r, (b, share) in enumerate(zip(alone, shares)):
        again = repick(r, have - share) if b > share and share > 0 else (b if b <= share else -1)
        if again < 0:
            return banks, picked  # no tile of this part fits its share
        fitted.append(again)
        at.append(have - share if b > share else 0)
    return fitted, at


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
    n, R = (range_params[0].n if range_params else 0), len(ranges)
    if not overlap or not n:
        return [WeightRegions([0] * R, [0] * R, [0] * R) for _ in range(n)]
    parts = [[plans[i] for i in rg] for rg in ranges]
    per = np.maximum(0, np.stack([weight_banks(part, range_params[r], held, sets) for r, part in enumerate(parts)],
                                 axis=1))  # a product with no legal tile at all is its op's own reason
    out = []
    for c in range(n):
        a = sum(held[c].banks.values())
        have = int(range_params[0].shared_banks[c])
        if sum(per[c].tolist()) + a <= have:  # picked alone, they fit (no shared weights: no regions)
            banks = per[c].tolist()
            out.append(WeightRegions(np.cumsum([0, *banks[:-1]]).tolist(), banks, [0] * R))
            continue
        one = [params.take(np.array([c])) for params in range_params]
        banks, picked = _fit(per[c].tolist(), a, have,
                             lambda r, base: int(weight_banks(parts[r], one[r], [held[c]], sets, base)[0]))
        if a and sum(banks) + a > have:
            # the weights first: every hand-off closed (its A through DRAM, its base every shared
            # bank so no A tile fits, in `held[c]` for both consumers) and the regions fitted again
            for op in held[c].bases:
                held[c].bases[op], held[c].banks[op] = have, 0
                held[c].closed.setdefault(op, "")
            a = 0
            alone = [max(0, int(weight_banks(part, one[r], [held[c]], sets)[0])) for r, part in enumerate(parts)]
            banks, picked = _fit(alone, 0, have,
                                 lambda r, base: int(weight_banks(parts[r], one[r], [held[c]], sets, base)[0]))
        reason = ""
        if sum(banks) and sum(banks) + a > have:
            reason = _regions_reason("pipeline", "ranges", names[c], banks, a, have, chips[c])
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
    n, S = (stage_params[0].n if stage_params else 0), len(stage_plans)
    if placement != "phase" or not n:
        return [WeightRegions([0] * S, [0] * S, [0] * S) for _ in range(n)]
    per = np.maximum(0, np.stack([weight_banks(plans, params) for plans, params in zip(stage_plans, stage_params)],
                                 axis=1))
    out = []
    for c in range(n):
        tile, have = chips[c].cores.tile_size, chips[c].shared_memory.banks
        tiles = [sorted({core // tile for core in p.cores}) for p in places[c]]
        banks, picked = per[c].tolist(), [0] * S
        one = [params.take(np.array([c])) for params in stage_params] if sum(banks) > have else []
        for t in sorted({t for ts in tiles for t in ts}):
            on = [s for s in range(S) if t in tiles[s]]

            def repick(k, base, on=on):
                return int(weight_banks(stage_plans[on[k]], one[on[k]], base=base)[0])

            fit, at = _fit([banks[s] for s in on], 0, have, repick)
            for s, b, base in zip(on, fit, at):
                if base:
                    banks[s], picked[s] = b, base
        used: dict[int, int] = {}
        bases = []
        for s in range(S):
            base = max(used.get(t, 0) for t in tiles[s])
            bases.append(base)
            used.update({t: base + banks[s] for t in tiles[s]})
        reason = ""
        for t, top in used.items():
            if top > have:
                on = [s for s in range(S) if t in tiles[s]]
                reason = _regions_reason("phase", "stages", [places[c][s].role for s in on], [banks[s] for s in on],
                                         0, have, chips[c].name)
                break
        out.append(WeightRegions(bases, banks, picked, reason))
    return out


def _regions_reason(placement: str, what: str, names: list[str], banks: list[int], handoff: int, have: int,
                    chip: str) -> str:
    regions = ", ".join(f"{name}: {b}" for name, b in zip(names, banks))
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
    for r, rg in enumerate(ranges):
        for i in rg:
            op = plans[i].op
            for t in op.inputs:
                if where.get(t, r) < r and (t, r) not in seen:
                    seen.add((t, r))
                    out.append((t, r, op.name))
            where.update({t: r for t in op.outputs})
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
    line = handoff_note(tensor, [op for op, _ in to], sum(nb for _, nb in to))
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
