"""The analytical model of Ball streams (scale ops on Fp2Int / Int2Fp, ReLU on its Ball),
vectorised over candidates.

The plan's stream (`dse.plan.streams.scale_stream`, `relu_stream`) depends on few chip
figures (`stream_plan_key`, `relu_plan_key`) and, for a blocked source, the producing
tile: it is made once per group of candidates that share them (and remembered on the
graph across a sweep's batches). Its cost (`dse.cost.stream_cycles`) and, for a scale op,
the plan's stream-or-core rule (`takes_stream`) then run on arrays: DMA figures, MSET cost
and core speeds are per candidate, so chip knobs such as ``dma.burst_max_bytes``,
``dma.latency_cycles`` or ``banks.rows`` stay vectorised.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..cost.stream import (StreamFigures, ball_busy_cycles, contended_stream_cycles, stream_cycles,
                           worker_share_list, worker_shares)
from ..mapping import CandidateArrays
from ..plan.memory import Blocked, Dram, Loc, pad
from ..plan.streams import (PLAN_KEYS, Stream, busiest_core_part, scale_core_op, scale_stream, stream_plan_key,
                            takes_stream)
from ..workload.graph import Graph, Op, scale_array
from ..units.charges import Charges


def planned_stream(graph: Graph, op_name: str, chip) -> Stream | None:
    """The stream an `estimate` of `graph` planned for op `op_name` on `chip` (kept on the
    graph, `StreamCosts.memo`), or None (none planned, or one per producing tile: ambiguous)."""
    keys = {plan_key(chip) for plan_key in PLAN_KEYS} - {()}
    found = [stream for key, stream in graph.__dict__.get("stream_plans", {}).items()
             if len(key) == 3 and key[0] == op_name and key[1] in keys and isinstance(stream, Stream)]
    return found[0] if len(found) == 1 else None


class StreamCosts:
    def __init__(self, graph: Graph, params: CandidateArrays, chips):
        self.graph, self.params, self.chips = graph, params, chips
        self.keys: dict[Callable, list[tuple]] = {}  # per plan key (`PLAN_KEYS`), each candidate's
        # Streams and core-op sizes depend on the graph, the op and the group only: kept on
        # the graph, so a sweep's later batches (the same graph object) reuse them.
        self.memo = graph.__dict__.setdefault("stream_plans", {})
        self.core_cpe = {"mul": params.mul_cpe, "scale": params.scale_cpe}

    def _keys(self, key_of) -> list[tuple]:
        if key_of not in self.keys:
            by_chip: dict[int, tuple] = {}  # a sweep's candidates share chip objects
            self.keys[key_of] = [by_chip[id(chip)] if id(chip) in by_chip
                                 else by_chip.setdefault(id(chip), key_of(chip)) for chip in self.chips]
        return self.keys[key_of]

    def scale_charges(self, op: Op, src: Loc, out: Loc, shape, tiles):
        """A quantize / requantize / dequantize: per candidate whether the plan takes the
        stream (`takes_stream` against the core op's busiest part), the stream's charges
        (zero where it does not) and the Ball kind; None when no candidate streams it.
        `tiles` is (tm, tn) per candidate for a blocked source, else None."""
        scale = []  # made on first need

        def scale_values():
            if not scale:
                scale.append(scale_array(op.attrs, shape))
            return scale[0]

        def group_source(tile) -> Loc:
            if not tile:
                return src
            tm, tn = tile
            acc = src.blocked
            return Loc(0, src.shape, "int32", (), Blocked(acc.batch, pad(acc.M) // tm, pad(acc.N) // tn, tm, tn, acc.M,
                                                          acc.N))

        def make(chip, tile):
            return scale_stream(chip, op, group_source(tile), out, scale_values(), shape)

        def core_cycles(tile, workers: int, idx: np.ndarray) -> np.ndarray:
            key = (op.name, tile, workers, "core part")
            if key not in self.memo:
                part = busiest_core_part(scale_core_op(Dram(), group_source(tile), out, scale_values(), shape,
                                                       place=False), workers)
                self.memo[key] = (part.element_count(), part.kind)
            elements, kind = self.memo[key]
            return np.ceil(elements * self.core_cpe[kind][idx])

        tile_of = (lambda index: (int(tiles[0][index]), int(tiles[1][index]))) if tiles is not None \
            else (lambda index: ())
        return self._charges(op, self._keys(stream_plan_key), tile_of, make, core_cycles)

    def stream_charges(self, op: Op, plan_key: Callable, make: Callable):
        """An op on a stream Ball wherever the candidate's chip has one, no core alternative
        weighed (a ReLU): `plan_key(chip)` the chip figures its stream reads (() without the
        Ball), `make(chip)` the stream; None when no candidate has it."""
        return self._charges(op, self._keys(plan_key), lambda index: (), lambda chip, tile: make(chip), None)

    def _charges(self, op: Op, keys: list[tuple], tile_of: Callable, make: Callable,
                 core_cycles: Callable | None) -> "tuple[np.ndarray, Charges, np.ndarray] | None":
        params, n_cands = self.params, self.params.n
        groups: dict[tuple, list[int]] = {}
        for index, key in enumerate(keys):
            if key != ():
                groups.setdefault((key, tile_of(index)), []).append(index)
        if not groups:
            return None
        on_ball = np.zeros(n_cands, dtype=bool)
        ball = Charges(n_cands)
        for name in Charges.BALL_FIGURES:
            setattr(ball, name, np.zeros(n_cands, dtype=np.int64))
        kinds = np.full(n_cands, "", dtype=object)
        workers = np.asarray(params.workers, dtype=np.int64)
        for (key, tile), members in groups.items():
            chip = self.chips[members[0]]
            memo_key = (op.name, key, tile)
            if memo_key not in self.memo:
                self.memo[memo_key] = make(chip, tile)
            stream: Stream | None = self.memo[memo_key]
            if stream is None:
                continue
            members = np.array(members)
            for n_workers in np.unique(workers[members]):
                idx = members[workers[members] == n_workers]
                n_workers = int(n_workers)
                cycles = np.broadcast_to(stream_cycles(chip, stream, n_workers, self._figures(idx),
                                                       self._shares(memo_key, chip, stream, n_workers)), idx.shape)
                if core_cycles is not None:
                    take = takes_stream(cycles, core_cycles(tile, n_workers, idx))
                    idx, cycles = idx[take], cycles[take]
                if not idx.size:
                    continue
                # the plan weighs the stream alone (`takes_stream`); running, its workers share the bus
                contended = contended_stream_cycles(chip, stream, n_workers, self._figures(idx),
                                                    self._share_list(memo_key, chip, stream, n_workers))
                cycles = np.broadcast_to(contended, idx.shape)
                busy_key = (memo_key, n_workers, "ball busy")
                if busy_key not in self.memo:
                    self.memo[busy_key] = ball_busy_cycles(chip, stream, n_workers)
                busy_ball = self.memo[busy_key]
                mset = params.mset_cycles[idx]
                on_ball[idx] = True
                kinds[idx] = stream.kind
                ball.ball[idx] = cycles
                ball.ball_busy[idx] = busy_ball
                ball.dma[idx] = cycles - busy_ball - 4 * mset
                whole = stream_cycles(chip, stream, 1, self._figures(idx), self._shares(memo_key, chip, stream, 1))
                ball.busy[idx] = np.broadcast_to(whole, idx.shape) + 4 * mset * (min(n_workers, len(stream.pieces)) - 1)
                banks = stream.src_col + stream.dst_col
                ball.banks[idx] = banks
                ball.bank_rows[idx] = (max(piece.in_lines for piece in stream.pieces)
                                       + max(piece.out_lines for piece in stream.pieces))
                ball.dma_bytes[idx] = 16 * sum(piece.in_lines + piece.out_lines for piece in stream.pieces)
                # every piece's rows: moved in (written), read by the Ball, its result written
                # by the Ball and read by the move out; the Ball busy over every worker
                lines = sum(piece.in_lines + piece.out_lines for piece in stream.pieces)
                ball.bank_reads[idx] = lines
                ball.bank_writes[idx] = lines
                all_key = (memo_key, "ball busy, every worker")
                if all_key not in self.memo:
                    self.memo[all_key] = ball_busy_cycles(chip, stream, 1)
                ball.stream_busy[idx] = self.memo[all_key]
                ball.sram[idx] = banks * params.usable_rows[idx] * params.row_bytes[idx]  # each candidate's banks
        if not on_ball.any():
            return None
        return on_ball, ball, kinds

    def _figures(self, idx: np.ndarray) -> StreamFigures:
        params = self.params
        return StreamFigures(params.burst_beats[idx], params.parallel_bursts[idx], params.dma_latency[idx],
                             params.mset_cycles[idx], params.beat_bytes[idx], params.system_bus_bytes[idx])

    def _shares(self, memo_key: tuple, chip, stream, workers: int):
        key = (memo_key, workers, "shares")
        if key not in self.memo:
            self.memo[key] = worker_shares(chip, stream, workers)
        return self.memo[key]

    def _share_list(self, memo_key: tuple, chip, stream, workers: int):
        key = (memo_key, workers, "share list")
        if key not in self.memo:
            self.memo[key] = worker_share_list(chip, stream, workers)
        return self.memo[key]
