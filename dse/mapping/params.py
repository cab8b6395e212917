"""Candidates as columns: the chip and mapping figures the cost model reads, one numpy
array per figure with one entry per candidate, so a whole batch is evaluated at once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .candidate import Candidate


# matrix_formula of a systolic-timed matrix Ball: this prefix, then the dataflow.
SYSTOLIC = "systolic:"


@dataclass
class CandidateArrays:
    n: int
    # banks and instruction fields
    bank_count: np.ndarray
    bank_rows: np.ndarray
    usable_rows: np.ndarray  # SRAM depth capped by the row-address field
    row_bytes: np.ndarray
    acc_col: np.ndarray
    max_col: np.ndarray
    virtual_ids: np.ndarray
    dim_bits: np.ndarray
    dim_max: np.ndarray
    # DMA
    beat_bytes: np.ndarray
    burst_max_bytes: np.ndarray
    bursts_in_flight: np.ndarray
    burst_beats: np.ndarray  # beats in a full burst (chip.dma_burst_beats)
    parallel_bursts: np.ndarray  # bursts of a transfer in flight at once (chip.dma_parallel_bursts)
    dma_latency: np.ndarray
    # cores
    cores: np.ndarray
    op_cycles_per_element: np.ndarray
    # cycles per element of the core-op kinds the lowering emits (cores.op_cycles or the default)
    copy_cpe: np.ndarray
    mul_cpe: np.ndarray
    scale_cpe: np.ndarray
    graph_op_cpe: np.ndarray
    relu_cpe: np.ndarray  # a copy applying a fused ReLU (core-op kind "relu")
    chain_cpe: np.ndarray  # a fused score chain (core-op kind "graph_chain", `dse.plan.chains`)
    # front end and the shared system bus
    mset_cycles: np.ndarray
    fence_cycles: np.ndarray
    barrier_cycles: np.ndarray
    system_bus_bytes: np.ndarray
    private_sram_per_core: np.ndarray
    # mapping
    framework: np.ndarray  # bool: the framework's greedy tile instead of the search
    double_buffer: np.ndarray
    # timing mode of the model: the emulator's "serial" (every instruction its latency, one
    # after another: the framework's own emulator) instead of "overlapped"
    serial: np.ndarray
    workers: np.ndarray
    split_rows: np.ndarray
    fusion: list[str | None]  # mapping.fusion: which plan of the graph the candidate follows
    channels_last: list[bool | None]  # mapping.channels_last: likewise
    # mapping.weights = "shared": a weight B read from the tile's shared memory, one copy per
    # tile of cores (`check_tiles`, `matmul_cost`); the shared memory's figures
    shared_weights: np.ndarray  # bool
    scan_weights_kept: np.ndarray  # bool: a scan's recurrent weight kept in shared memory where it fits
    parts_at_once: np.ndarray  # bool: placement pipeline / phase, parts running at once on one tile
    shared_enabled: np.ndarray  # bool
    shared_banks: np.ndarray
    shared_rows: np.ndarray
    shared_row_bytes: np.ndarray
    shared_latency: np.ndarray
    tile_size: np.ndarray  # cores a tile (one shared memory, one barrier domain)
    # Balls: per candidate, the latency formula text (None when the chip lacks the Ball, or
    # its matrix Ball lacks a formula for the mapping's dataflow); a matrix Ball with
    # `timing = "systolic"` gives SYSTOLIC + dataflow instead of a formula.
    matrix_formula: list[str | None]
    # Why matrix_formula is None although the chip has a matrix Ball ("" otherwise).
    matrix_missing: list[str]
    no_matrix: np.ndarray  # bool: matrix_formula is None (no matmul can run)
    matrix_rows: np.ndarray
    matrix_cols: np.ndarray
    chip_names: list[str]
    # each candidate's chip as a number (candidates with the same chip object share it)
    chip_index: np.ndarray | None = None

    @classmethod
    def from_candidates(cls, cands: Sequence[Candidate]) -> "CandidateArrays":
        # A sweep has far fewer chips and mappings than candidates (its candidates share
        # them, a chip per chip knob value and a mapping per mapping knob value): each
        # figure is read once a distinct chip, mapping or (chip, dataflow) and spread.
        chip_at: dict[int, int] = {}
        mapping_at: dict[int, int] = {}
        chips, mappings = [], []
        chip_of, mapping_of = [], []  # each candidate's index in `chips`, in `mappings`
        for c in cands:
            at = chip_at.get(id(c.chip))
            if at is None:
                at = chip_at[id(c.chip)] = len(chips)
                chips.append(c.chip)
            chip_of.append(at)
            at = mapping_at.get(id(c.mapping))
            if at is None:
                at = mapping_at[id(c.mapping)] = len(mappings)
                mappings.append(c.mapping)
            mapping_of.append(at)
        n = len(cands)
        of_chip = np.array(chip_of, dtype=np.int64)
        of_mapping = np.array(mapping_of, dtype=np.int64)

        def chip_col(get, dtype=np.int64):
            return np.fromiter((get(chip) for chip in chips), dtype=dtype, count=len(chips))[of_chip]

        def col(get, dtype=np.int64):
            return np.fromiter((get(m) for m in mappings), dtype=dtype, count=len(mappings))[of_mapping]

        def spread(values: list, at: np.ndarray) -> list:
            return [values[i] for i in at.tolist()]

        def ball_formula(chip, kind: str, mode: str) -> str | None:
            ball = chip.ball(kind)
            if ball is not None and kind == "matrix" and ball.timing == "systolic":
                return SYSTOLIC + mode
            return None if ball is None else ball.latency.get(mode)

        def matrix_missing(chip, dataflow: str, formula: str | None) -> str:
            ball = chip.ball("matrix")
            if ball is None or formula is not None:
                return ""
            return (f"matrix Ball of chip {chip.name} has no {dataflow!r} latency formula; "
                    f"allowed: {', '.join(ball.latency)}; or timing = systolic")

        # the matrix Ball's formula: per distinct chip and dataflow
        pairs: dict[tuple[int, str], int] = {}
        dataflows = [m.dataflow for m in mappings]
        of_pair = np.fromiter((pairs.setdefault((chip, dataflows[m]), len(pairs))
                               for chip, m in zip(chip_of, mapping_of)), dtype=np.int64, count=n)
        pair_formulas = [ball_formula(chips[chip], "matrix", dataflow) for chip, dataflow in pairs]
        pair_missing = [matrix_missing(chips[chip], dataflow, f) for (chip, dataflow), f in zip(pairs, pair_formulas)]
        formulas = spread(pair_formulas, of_pair)
        matrix = [chip.ball("matrix") for chip in chips]
        return cls(
            n=n,
            bank_count=chip_col(lambda chip: chip.banks.count),
            bank_rows=chip_col(lambda chip: chip.banks.rows),
            usable_rows=chip_col(lambda chip: chip.addressable_rows),
            row_bytes=chip_col(lambda chip: chip.banks.row_bytes),
            acc_col=chip_col(lambda chip: chip.banks.acc_col),
            max_col=chip_col(lambda chip: chip.banks.max_col),
            virtual_ids=chip_col(lambda chip: chip.banks.virtual_ids),
            dim_bits=chip_col(lambda chip: chip.isa.matrix_dim_bits),
            dim_max=chip_col(lambda chip: chip.isa.max_value("matrix_dim")),
            beat_bytes=chip_col(lambda chip: chip.dma.beat_bytes),
            burst_max_bytes=chip_col(lambda chip: chip.dma.burst_max_bytes),
            bursts_in_flight=chip_col(lambda chip: chip.dma.bursts_in_flight),
            burst_beats=chip_col(lambda chip: chip.dma_burst_beats),
            parallel_bursts=chip_col(lambda chip: chip.dma_parallel_bursts),
            dma_latency=chip_col(lambda chip: chip.dma.latency_cycles),
            cores=chip_col(lambda chip: chip.cores.count),
            op_cycles_per_element=chip_col(lambda chip: chip.cores.op_cycles_per_element, np.float64),
            copy_cpe=chip_col(lambda chip: chip.core_cycles_per_element("copy"), np.float64),
            mul_cpe=chip_col(lambda chip: chip.core_cycles_per_element("mul"), np.float64),
            scale_cpe=chip_col(lambda chip: chip.core_cycles_per_element("scale"), np.float64),
            graph_op_cpe=chip_col(lambda chip: chip.core_cycles_per_element("graph_op"), np.float64),
            relu_cpe=chip_col(lambda chip: chip.core_cycles_per_element("relu"), np.float64),
            chain_cpe=chip_col(lambda chip: chip.core_cycles_per_element("graph_chain"), np.float64),
            mset_cycles=chip_col(lambda chip: chip.front_end.mset_cycles),
            fence_cycles=chip_col(lambda chip: chip.front_end.fence_cycles),
            barrier_cycles=chip_col(lambda chip: chip.front_end.barrier_cycles),
            system_bus_bytes=chip_col(lambda chip: chip.dma.system_bus_bytes),
            private_sram_per_core=chip_col(lambda chip: chip.private_sram_bytes),
            framework=col(lambda m: m.policy == "framework", bool),
            double_buffer=col(lambda m: m.double_buffer, bool),
            serial=np.zeros(n, dtype=bool),
            workers=col(lambda m: m.workers),
            split_rows=col(lambda m: m.split == "rows", bool),
            fusion=spread([m.fusion for m in mappings], of_mapping),
            channels_last=spread([m.channels_last for m in mappings], of_mapping),
            shared_weights=col(lambda m: m.weights == "shared", bool),
            scan_weights_kept=col(lambda m: m.scan_weights != "reloaded", bool),
            parts_at_once=col(lambda m: m.placement in ("pipeline", "phase"), bool),
            shared_enabled=chip_col(lambda chip: chip.shared_memory.enabled, bool),
            shared_banks=chip_col(lambda chip: chip.shared_memory.banks),
            shared_rows=chip_col(lambda chip: chip.shared_memory.rows),
            shared_row_bytes=chip_col(lambda chip: chip.shared_memory.row_bytes),
            shared_latency=chip_col(lambda chip: chip.shared_memory.latency_cycles),
            tile_size=chip_col(lambda chip: chip.cores.tile_size),
            matrix_formula=formulas,
            matrix_missing=spread(pair_missing, of_pair),
            no_matrix=np.array([f is None for f in pair_formulas], dtype=bool)[of_pair],
            matrix_rows=np.array([b.array_rows if b else 0 for b in matrix], dtype=np.int64)[of_chip],
            matrix_cols=np.array([b.array_cols if b else 0 for b in matrix], dtype=np.int64)[of_chip],
            chip_names=spread([chip.name for chip in chips], of_chip),
            chip_index=of_chip,
        )

    def take(self, idx: np.ndarray) -> "CandidateArrays":
        """The candidates at positions `idx`."""
        out = {}
        for name, value in vars(self).items():
            if isinstance(value, np.ndarray):
                out[name] = value[idx]
            elif isinstance(value, list):
                out[name] = np.array(value, dtype=object)[idx].tolist() if len(idx) > 64 else [value[i] for i in idx]
        return CandidateArrays(n=len(idx), **out)

    def column(self, name: str) -> np.ndarray:
        """A per-candidate figure shaped (n, 1), to broadcast against a row of tiles."""
        return getattr(self, name)[:, None]
