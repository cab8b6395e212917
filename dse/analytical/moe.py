"""The routing a mixture of experts is costed with: the recorded inputs' (``measured``), or a
declared distribution of the routed tokens over the experts (``balanced``, ``skew:<s>``),
with an optional capacity factor (tokens an expert takes at most: ``ceil(factor x tokens x
top_k / experts)``; a routing over it is infeasible, with the reason).

The emulator always follows the captured inputs' routing; the analytical model costs a
declared one by re-shaping each expert's ops (`dse.workload.moe.moe_layers`) to the tokens
the distribution gives it: an expert the recorded inputs leave empty is costed as a copy of
another's chain (every expert has the same shapes but its rows), one given no tokens has no
ops. The candidate's notes name the routing its figures used."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dse.analytical.estimate import estimate, summarize
from dse.mapping import Candidate
from dse.mapping.params import CandidateArrays
from dse.plan.moe import core_imbalance, spread_blocks
from dse.workload.graph import Graph
from dse.workload.moe import ROUTINGS, MoeLayer, Routing, moe_layers, parse_routing, recounted


def _apportion(total: int, shares: list[float], cap: int) -> list[int]:
    """`total` tokens in proportion to `shares` (largest remainders), none over `cap` (a
    token picks an expert once): what a capped expert cannot take is shared again among
    the others, in proportion."""
    counts = [0] * len(shares)
    open_ = list(range(len(shares)))
    left = total
    while left and open_:
        weight = sum(shares[expert] for expert in open_)
        exact = {expert: left * shares[expert] / weight for expert in open_}
        give = {expert: int(exact[expert]) for expert in open_}
        by_remainder = sorted(open_, key=lambda other: (-(exact[other] - give[other]), other))
        for expert in by_remainder[:left - sum(give.values())]:
            give[expert] += 1
        for expert in open_:
            counts[expert] += min(give[expert], cap - counts[expert])
        left = total - sum(counts)
        open_ = [expert for expert in open_ if counts[expert] < cap]
    return counts


def expert_counts(layer: MoeLayer, routing: Routing) -> list[int]:
    """Tokens per expert of a layer under a routing (each of the layer's tokens routed to
    top_k distinct experts)."""
    if routing.kind == "measured":
        return layer.counts
    shares = [1.0 if routing.kind == "balanced" else (expert + 1) ** -routing.skew for expert in range(layer.experts)]
    return _apportion(layer.tokens * layer.top_k, shares, layer.tokens)


def capacity(layer: MoeLayer, factor: float) -> int:
    return math.ceil(factor * layer.tokens * layer.top_k / layer.experts)


def imbalance(counts: list[int]) -> float:
    """The busiest expert's tokens over the mean (1.0: balanced)."""
    mean = sum(counts) / len(counts)
    return max(counts) / mean if mean else 1.0


@dataclass
class Routed:
    graph: Graph  # the graph the analytical model costs
    note: str  # which routing, per layer the tokens per expert
    reason: str = ""  # why infeasible ("": it fits the capacity)
    imbalance: float = 1.0  # the worst layer's busiest expert over the mean


def routed(graph: Graph, routing: Routing, capacity_factor: float | None = None) -> Routed:
    """The graph with its MoE layers costed under `routing` (module docstring)."""
    layers = moe_layers(graph)
    notes, reasons, worst = [], [], 1.0
    for layer in layers:
        counts = expert_counts(layer, routing)
        worst = max(worst, imbalance(counts))
        cap = None if capacity_factor is None else capacity(layer, capacity_factor)
        notes.append(f"{layer.name} tokens per expert {counts}" + (f" (capacity {cap})" if cap is not None else ""))
        if cap is not None and max(counts) > cap:
            busiest = counts.index(max(counts))
            reasons.append(f"routing {routing} sends {counts[busiest]} tokens to expert {busiest} of {layer.name}, "
                           f"over its capacity {cap} (capacity_factor {capacity_factor:g} x "
                           f"{layer.tokens * layer.top_k} routed tokens / {layer.experts} experts)")
    note = f"routing {routing}: " + "; ".join(notes) if layers else ""
    if routing.kind == "measured" or not layers or reasons:
        return Routed(graph, note, "; ".join(reasons), worst)
    out = graph
    for layer in layers:
        out = recounted(out, layer, expert_counts(layer, routing), clone=True)
    return Routed(out, note, "", worst)


# --- expert placement: "spread" (expert parallel, `dse.plan.moe`) ---

def estimate_spread(graph: Graph, cands, calibration: dict | None = None):
    """(per-op rows, totals, per-core imbalance) of candidates that spread the experts over
    their workers: each expert op costed as on one worker (its own program there), the
    block as long as its busiest worker's experts plus one BARRIER, every other op as any
    op. An expert op's row holds its one-worker cycles (the experts of different workers
    overlap: the total is not the sum of the rows)."""
    per_op = estimate(graph, cands, calibration)
    ones = [Candidate(each.chip, each.mapping.model_copy(update={"workers": 1, "experts": None})) for each in cands]
    per_one = estimate(graph, ones, calibration)
    barrier = CandidateArrays.from_candidates(list(cands)).barrier_cycles
    columns = [column for column in per_op.columns if column not in ("candidate", "candidate_hash", "op", "kind")]
    latency, imbalances = [], []
    for cand_index, cand in enumerate(cands):
        blocks = spread_blocks(graph, cand.mapping.workers)
        rows = (per_op["candidate"] == cand_index).to_numpy()
        ops = per_op.loc[rows, "op"].to_numpy()
        one = per_one.loc[(per_one["candidate"] == cand_index).to_numpy()].set_index("op")
        cycles = per_op.loc[rows, "cycles"].to_numpy(dtype=np.float64)
        total = cycles.sum()
        worst = 1.0
        for block in blocks:
            in_block = np.isin(ops, list(block.cores))
            total -= cycles[in_block].sum()
            busy = [0.0] * cand.mapping.workers
            for name, worker in block.cores.items():
                busy[worker] += float(one.at[name, "cycles"])
            total += max(busy) + float(barrier[cand_index])
            index = np.flatnonzero(rows)[in_block]
            per_op.loc[index, columns] = one.loc[ops[in_block], columns].to_numpy()
            worst = max(worst, core_imbalance(block.tokens))
        latency.append(total)
        imbalances.append(worst)
    totals = summarize(per_op, cands)
    totals["latency_cycles"] = np.where(totals["feasible"], latency, np.nan)
    return per_op, totals, imbalances


__all__ = ["ROUTINGS", "Routed", "Routing", "capacity", "estimate_spread", "expert_counts", "imbalance",
           "parse_routing", "routed"]
