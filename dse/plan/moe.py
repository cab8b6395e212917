"""Where a mixture of experts' expert ops run (`mapping.experts`), decided once for the
lowering (`dse.lower.moe`) and the analytical model (`dse.analytical.moe`).

"split" (the default): every op of every expert is split over the workers as any op, one
after another. "spread" (expert parallel): expert e's chain (its token gather to its scaled
output) runs whole on worker ``e mod W``, every worker's experts at once; one BARRIER closes
the block, then the index_adds accumulate the experts' outputs (they read each other's sums,
so they run after it, as any op)."""

from __future__ import annotations

from dataclasses import dataclass

from dse.workload.graph import Graph
from dse.workload.moe import moe_layers


@dataclass(frozen=True)
class SpreadBlock:
    layer: str
    cores: dict[str, int]  # op name -> the worker its expert runs on
    sums: tuple[str, ...]  # the layer's index_adds, in graph order (after the BARRIER)
    tokens: tuple[int, ...]  # tokens routed per worker (the per-core imbalance)

    @property
    def ops(self) -> set[str]:
        return set(self.cores) | set(self.sums)


def spreads(mapping) -> bool:
    return getattr(mapping, "experts", None) == "spread" and mapping.workers > 1


def spread_blocks(graph: Graph, workers: int) -> list[SpreadBlock]:
    """Per MoE layer, the worker of each expert op (round robin by expert index)."""
    kinds = {op.name: op.kind for op in graph.ops}
    blocks = []
    for layer in moe_layers(graph):
        cores, sums, tokens = {}, [], [0] * workers
        for x in layer.routed:
            tokens[x.index % workers] += x.count
            for name in x.ops:
                if kinds[name] == "index_add":
                    sums.append(name)
                else:
                    cores[name] = x.index % workers
        blocks.append(SpreadBlock(layer.name, cores, tuple(sums), tuple(tokens)))
    return blocks


def core_imbalance(tokens) -> float:
    """The busiest worker's routed tokens over the mean (1.0: balanced)."""
    mean = sum(tokens) / len(tokens)
    return max(tokens) / mean if mean else 1.0


__all__ = ["SpreadBlock", "core_imbalance", "spread_blocks", "spreads"]
