"""The analytical model of Ball streams (scale ops on Fp2Int / Int2Fp, ReLU on its Ball),
vectorised over candidates.

The plan's stream (`dse.plan.streams.scale_stream`, `relu_stream`) depends on few chip
figures (`stream_plan_key`, `relu_plan_key`) and, for a blocked source, the producing
tile: it is made once per group of candidates that share them (and remembered on the
graph across a sweep's batches). Its cost (`dse.cost.stream_cycles`) reads the stream's
pieces, its Ball's latency, the workers and the candidate's DMA figures and MSET cost: it
is computed once per distinct such tuple (streams planned for different bank counts are
mostly the same to it; a grid's thousands of candidates share a few dozen, kept on the
graph too), then spread over the candidates as arrays, with the plan's stream-or-core rule
(`takes_stream`) against the core op at each candidate's core speed.
"""

from __future__ import annotations

import math
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
        self.keys: dict[Callable, tuple] = {}  # per plan key (`PLAN_KEYS`): `_keys`
        # Streams and core-op sizes depend on the graph, the op and the group only: kept on
        # the graph, so a sweep's later batches (the same graph object) reuse them.
        self.memo = graph.__dict__.setdefault("stream_plans", {})
        self.core_cpe = {"mul": params.mul_cpe, "scale": params.scale_cpe}

    def _keys(self, key_of) -> tuple[np.ndarray, list[tuple]]:
        """Each candidate's plan key (`PLAN_KEYS`) as a number into the distinct keys (-1:
        (), no such Ball), read once per distinct chip (a sweep's candidates share chip objects)."""
        if key_of not in self.keys:
            at = self.params.chip_index
            if at is None or len(at) != len(self.chips):
                numbers: dict[int, int] = {}
                at = np.fromiter((numbers.setdefault(id(chip), len(numbers)) for chip in self.chips), dtype=np.int64,
                                 count=len(self.chips))
            _, first = np.unique(at, return_index=True)
            distinct: dict[tuple, int] = {}
            per_chip = np.full(int(at.max()) + 1 if len(at) else 0, -1, dtype=np.int64)
            for number, index in zip(at[first].tolist(), first.tolist()):
                key = key_of(self.chips[index])
                if key != ():
                    per_chip[number] = distinct.setdefault(key, len(distinct))
            self.keys[key_of] = (per_chip[at], list(distinct))
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

        def core_part(tile, workers: int) -> tuple[int, str]:
            """The core op's busiest part on `workers`: its elements and kind (charged at the
            candidate's cycles per element of that kind)."""
            key = (op.name, tile, workers, "core part")
            if key not in self.memo:
                part = busiest_core_part(scale_core_op(Dram(), group_source(tile), out, scale_values(), shape,
                                                       place=False), workers)
                self.memo[key] = (part.element_count(), part.kind)
            return self.memo[key]

        return self._charges(op, self._keys(stream_plan_key), tiles, make, core_part)

    def stream_charges(self, op: Op, plan_key: Callable, make: Callable):
        """An op on a stream Ball wherever the candidate's chip has one, no core alternative
        weighed (a ReLU): `plan_key(chip)` the chip figures its stream reads (() without the
        Ball), `make(chip)` the stream; None when no candidate has it."""
        return self._charges(op, self._keys(plan_key), None, lambda chip, tile: make(chip), None)

    def _charges(self, op: Op, keys: tuple[np.ndarray, list[tuple]], tiles, make: Callable,
                 core_part: Callable | None) -> "tuple[np.ndarray, Charges, np.ndarray] | None":
        """The stream charges of candidates grouped by (plan key, producing tile): `tiles`
        (tm, tn) per candidate, or None; `make(chip, tile)` a group's stream (or None);
        `core_part(tile, workers)` the core op it is weighed against, (elements, kind)."""
        params, n_cands = self.params, self.params.n
        key_ids, distinct_keys = keys
        at = np.flatnonzero(key_ids >= 0)
        if not at.size:
            return None
        tile_columns = [] if tiles is None else [np.asarray(tiles[0])[at], np.asarray(tiles[1])[at]]
        groups, first, group_of = distinct_rows(key_ids[at], *tile_columns)
        workers = np.asarray(params.workers, dtype=np.int64)
        # Each group's stream, as what its cost reads (`_cost_class`: -1 none).
        streams: dict[int, tuple] = {}  # cost class -> (chip, stream)
        group_class = np.full(len(groups), -1, dtype=np.int64)
        for g, (key_id, *tile) in enumerate(groups.tolist()):
            chip = self.chips[at[first[g]]]
            memo_key = (op.name, distinct_keys[key_id], tuple(tile))
            if memo_key not in self.memo:
                self.memo[memo_key] = make(chip, tuple(tile))
            stream: Stream | None = self.memo[memo_key]
            if stream is not None:
                group_class[g] = k = self._cost_class(memo_key, chip, stream)
                streams.setdefault(k, (chip, stream))
        cost_class = np.full(n_cands, -1, dtype=np.int64)
        cost_class[at] = group_class[group_of]
        has = cost_class >= 0
        if not has.any():
            return None
        if core_part is not None:  # the core op's busiest part, per (tile, workers)
            elements = np.zeros(n_cands, dtype=np.int64)
            on_mul = np.zeros(n_cands, dtype=bool)
            streamed = np.flatnonzero(has)
            parts, _, part_of = distinct_rows(*(np.asarray(t)[streamed] for t in (tiles or ())), workers[streamed])
            made = [core_part(tuple(row[:-1]), row[-1]) for row in parts.tolist()]
            elements[streamed] = np.array([count for count, _ in made], dtype=np.int64)[part_of]
            on_mul[streamed] = np.array([kind == "mul" for _, kind in made], dtype=bool)[part_of]
        # The stream's figures once per distinct (stream cost class, workers, DMA figures and
        # MSET cost): a sweep's candidates share a handful (`_stream_figures`).
        at = np.flatnonzero(has)
        distinct, _, combo = distinct_rows(*(column[at] for column in (
            params.burst_beats, params.parallel_bursts, params.dma_latency, params.mset_cycles, params.beat_bytes,
            params.system_bus_bytes, workers, cost_class)))
        table = np.array([self._stream_figures(row[7], *streams[row[7]], row[6], tuple(row[:6]))
                          for row in distinct.tolist()], dtype=np.int64).reshape(len(distinct), 9)
        take = np.ones(len(at), dtype=bool)
        if core_part is not None:  # the plan's rule: the stream where it beats the core op
            cpe = np.where(on_mul[at], self.core_cpe["mul"][at], self.core_cpe["scale"][at])
            take = takes_stream(table[combo, 0], np.ceil(elements[at] * cpe))
        idx, row = at[take], table[combo[take]]
        if not idx.size:
            return None
        on_ball = np.zeros(n_cands, dtype=bool)
        ball = Charges(n_cands)
        for name in Charges.BALL_FIGURES:
            setattr(ball, name, np.zeros(n_cands, dtype=np.int64))
        kinds = np.full(n_cands, "", dtype=object)
        # the plan weighs the stream alone (`takes_stream`); running, its workers share the bus
        contended, whole, busy_ball, busy_all, banks, bank_rows, lines, pieces = (row[:, j] for j in range(1, 9))
        mset = params.mset_cycles[idx]
        on_ball[idx] = True
        kind_of = np.full(max(streams) + 1, "", dtype=object)
        for k, (_, stream) in streams.items():
            kind_of[k] = stream.kind
        kinds[idx] = kind_of[cost_class[idx]]
        ball.ball[idx] = contended
        ball.ball_busy[idx] = busy_ball
        ball.dma[idx] = contended - busy_ball - 4 * mset
        ball.busy[idx] = whole + 4 * mset * (np.minimum(workers[idx], pieces) - 1)
        ball.banks[idx] = banks
        ball.bank_rows[idx] = bank_rows
        ball.dma_bytes[idx] = 16 * lines
        # every piece's rows: moved in (written), read by the Ball, its result written
        # by the Ball and read by the move out; the Ball busy over every worker
        ball.bank_reads[idx] = lines
        ball.bank_writes[idx] = lines
        ball.stream_busy[idx] = busy_all
        ball.sram[idx] = banks * params.usable_rows[idx] * params.row_bytes[idx]  # each candidate's banks
        return on_ball, ball, kinds

    def _cost_class(self, memo_key: tuple, chip, stream: Stream) -> int:
        """A number for what a stream's cost reads (its Ball's latency formula and kind, the
        bank row width, its banks and its pieces' lines and strides): streams planned for
        different chip figures (bank counts, say) are often the same to the cost."""
        key = (memo_key, "cost class")
        found = self.memo.get(key)
        if found is None:
            classes = self.memo.setdefault(("stream cost classes",), {})
            what = (stream.kind, chip.ball(stream.kind).latency["default"], chip.banks.row_bytes, stream.in_bits,
                    stream.out_bits, stream.src_col, stream.dst_col,
                    tuple((p.in_lines, p.out_lines, p.dst_stride) for p in stream.pieces))
            found = self.memo[key] = classes.setdefault(what, len(classes))
        return found

    def _stream_figures(self, cost_class: int, chip, stream: Stream, workers: int, figures: tuple) -> tuple:
        """A stream's figures on `workers` with one candidate's DMA figures and MSET cost
        (`figures`: burst beats, parallel bursts, latency, MSET cycles, beat bytes, bus
        bytes): its cycles on the slowest worker alone, contended on the bus, on one worker,
        the Ball's busy cycles on worker 0 and over every worker, its banks, bank rows, lines
        moved and pieces. Kept on the graph: a sweep's later batches reuse them."""
        key = ("stream figures", cost_class, workers, figures)
        found = self.memo.get(key)
        if found is None:
            fig = StreamFigures(*figures)
            one = stream_cycles(chip, stream, workers, fig, worker_shares(chip, stream, workers))
            contended = contended_stream_cycles(chip, stream, workers, fig, worker_share_list(chip, stream, workers))
            whole = stream_cycles(chip, stream, 1, fig, worker_shares(chip, stream, 1))
            pieces = stream.pieces
            found = self.memo[key] = (
                int(one), int(contended), int(whole), ball_busy_cycles(chip, stream, workers),
                ball_busy_cycles(chip, stream, 1), stream.src_col + stream.dst_col,
                max(piece.in_lines for piece in pieces) + max(piece.out_lines for piece in pieces),
                sum(piece.in_lines + piece.out_lines for piece in pieces), len(pieces))
        return found


def distinct_rows(*columns: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct rows of int columns (one entry a candidate), sorted: (rows, the first
    position of each, each position's row). One 1-D `np.unique` over the rows as one number
    where their ranges allow (a 2-D one sorts far slower)."""
    columns = [np.asarray(column, dtype=np.int64) for column in columns]
    low = [int(column.min()) for column in columns]
    spans = [int(column.max()) - lo + 1 for column, lo in zip(columns, low)]
    if math.prod(spans) < 2 ** 62:
        code = np.zeros(len(columns[0]), dtype=np.int64)
        for column, lo, span in zip(columns, low, spans):
            code = code * span + (column - lo)
        _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    else:
        _, first, inverse = np.unique(np.stack(columns, axis=1), axis=0, return_index=True, return_inverse=True)
    return np.stack([column[first] for column in columns], axis=1), first, inverse.reshape(-1)
