"""The analytical model of scale ops (quantize / requantize / dequantize) on a Ball stream,
vectorised over candidates.

The plan's stream (`dse.plan.streams.scale_stream`) depends on few chip figures
(`stream_plan_key`) and the producing tile: it is made once per group of candidates that
share them (and remembered on the graph across a sweep's batches). Its cost and the
plan's stream-or-core rule (`takes_stream`) then run on arrays: DMA figures, MSET cost and
core speeds are per candidate, so chip knobs such as ``dma.burst_max_bytes``,
``dma.latency_cycles`` or ``banks.rows`` stay vectorised.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..cost.stream import StreamFigures, ball_busy_cycles, stream_cycles, worker_shares
from ..mapping import CandidateArrays
from ..plan.memory import Blocked, Dram, Loc, pad
from ..plan.streams import busiest_core_part, scale_core_op, scale_stream, stream_plan_key, takes_stream
from ..workload.graph import Graph, Op, scale_tensor

if TYPE_CHECKING:
    from .graph_cost import Charges


class StreamCosts:
    def __init__(self, graph: Graph, params: CandidateArrays, chips):
        self.graph, self.params, self.chips = graph, params, chips
        by_chip: dict[int, tuple] = {}  # a sweep's candidates share chip objects
        self.keys = [by_chip[id(c)] if id(c) in by_chip else by_chip.setdefault(id(c), stream_plan_key(c))
                     for c in chips]
        # Streams and core-op sizes depend on the graph, the op and the group only: kept on
        # the graph, so a sweep's later batches (the same graph object) reuse them.
        self.memo = graph.__dict__.setdefault("stream_plans", {})
        self.core_cpe = {"mul": params.mul_cpe, "scale": params.scale_cpe}

    def charges(self, op: Op, src: Loc, out: Loc, shape, tiles) -> "tuple[np.ndarray, Charges, np.ndarray] | None":
        """Per candidate: whether the plan takes the stream, the stream's charges (zero where
        it does not), and the Ball kind; None when no candidate can stream the op. `tiles`
        is (tm, tn) per candidate for a blocked source, else None."""
        from .graph_cost import Charges

        p, n = self.params, self.params.n
        groups: dict[tuple, list[int]] = {}
        for i, key in enumerate(self.keys):
            if key == ():
                continue
            tile = (int(tiles[0][i]), int(tiles[1][i])) if tiles is not None else ()
            groups.setdefault((key, tile), []).append(i)
        if not groups:
            return None
        scale = None
        on_ball = np.zeros(n, dtype=bool)
        ball = Charges(n)
        for name in Charges.BALL_FIGURES:
            setattr(ball, name, np.zeros(n, dtype=np.int64))
        kinds = np.full(n, "", dtype=object)
        workers = np.asarray(p.workers, dtype=np.int64)
        for (key, tile), members in groups.items():
            chip = self.chips[members[0]]
            group_src = src
            if tile:
                tm, tn = tile
                b = src.blocked
                group_src = Loc(0, src.shape, "int32", (), Blocked(b.batch, pad(b.M) // tm, pad(b.N) // tn, tm, tn,
                                                                    b.M, b.N))
            memo_key = (op.name, key, tile)
            if memo_key not in self.memo:
                if scale is None:
                    scale = scale_tensor(op.attrs, shape).numpy().astype(np.float32)
                self.memo[memo_key] = scale_stream(chip, op, group_src, out, scale, shape)
            stream = self.memo[memo_key]
            if stream is None:
                continue
            members = np.array(members)
            for W in np.unique(workers[members]):
                idx = members[workers[members] == W]
                W = int(W)
                figures = StreamFigures(p.burst_beats[idx], p.parallel_bursts[idx], p.dma_latency[idx],
                                        p.mset_cycles[idx])
                shares = self._shares(memo_key, chip, stream, W)
                cycles = np.broadcast_to(stream_cycles(chip, stream, W, figures, shares), idx.shape)
                part_key = (op.name, tile, W, "core part")
                if part_key not in self.memo:
                    if scale is None:
                        scale = scale_tensor(op.attrs, shape).numpy().astype(np.float32)
                    part = busiest_core_part(scale_core_op(Dram(), group_src, out, scale, shape, place=False), W)
                    self.memo[part_key] = (part.element_count(), part.kind)
                elements, kind = self.memo[part_key]
                core = np.ceil(elements * self.core_cpe[kind][idx])
                take = takes_stream(cycles, core)
                if not take.any():
                    continue
                idx, cycles, figures = idx[take], cycles[take], StreamFigures(
                    p.burst_beats[idx[take]], p.parallel_bursts[idx[take]], p.dma_latency[idx[take]],
                    p.mset_cycles[idx[take]])
                busy_key = (memo_key, W, "ball busy")
                if busy_key not in self.memo:
                    self.memo[busy_key] = ball_busy_cycles(chip, stream, W)
                busy_ball = self.memo[busy_key]
                mset = p.mset_cycles[idx]
                on_ball[idx] = True
                kinds[idx] = stream.kind
                ball.ball[idx] = cycles
                ball.ball_busy[idx] = busy_ball
                ball.dma[idx] = cycles - busy_ball - 4 * mset
                ball.busy[idx] = np.broadcast_to(stream_cycles(chip, stream, 1, figures,
                                                               self._shares(memo_key, chip, stream, 1)), idx.shape) \
                    + 4 * mset * (min(W, len(stream.pieces)) - 1)
                ball.banks[idx] = 1 + stream.dst_col
                ball.bank_rows[idx] = max(q.in_lines for q in stream.pieces) + max(q.out_lines for q in stream.pieces)
                ball.dma_bytes[idx] = 16 * sum(q.in_lines + q.out_lines for q in stream.pieces)
                ball.sram[idx] = (1 + stream.dst_col) * p.bank_rows[idx] * p.row_bytes[idx]  # each candidate's banks
        if not on_ball.any():
            return None
        return on_ball, ball, kinds

    def _shares(self, memo_key: tuple, chip, stream, workers: int):
        key = (memo_key, workers, "shares")
        if key not in self.memo:
            self.memo[key] = worker_shares(chip, stream, workers)
        return self.memo[key]
