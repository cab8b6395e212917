"""Temporal spans with one shared copy of the weights (#19): the temporal conv stack on goban
in spans, each worker loading every weight into its private banks (`per_worker`) against the
whole stack loaded once into the tile's shared memory (`shared`), and the tiles path for
reference. Per candidate: emulated cycles, the analytical model's latency error, DMA bytes
(in + out, every core; emulator / model), the shared memory a tile of cores holds (emulator /
model), peak private SRAM (emulator / model) and the numerics verdict. With fewer shared banks
than the stack's weights take at once (`--banks`), the shared stack is loaded in waves, each
into the banks the weights before it free (`dse.plan.spans.shared_stack`).

    .venv/bin/python bench/bench_spans_weights.py [--workers 4 8] [--banks 64 3 1] [--param length=256 ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dse.analytical import estimate, summarize  # noqa: E402
from dse.chips import load_chip  # noqa: E402
from dse.mapping import Candidate, Mapping  # noqa: E402
from dse.numerics.run import emulate_graph, prepare_recipe  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--banks", type=int, nargs="+", default=[64, 3, 1], help="shared_memory.banks values")
    ap.add_argument("--param", action="append", default=[], help="a temporal_conv parameter, NAME=INT")
    args = ap.parse_args()
    params = {k: int(v) for k, v in (p.split("=", 1) for p in args.param)}
    prep = prepare_recipe("temporal_conv", params)
    assert not prep.failed, prep.failed
    print(f"temporal_conv {params or '(recipe defaults)'} on goban")
    print(f"{'workers':>7} {'sh banks':>8} {'partition':>9} {'weights':>10} {'emu cycles':>11} {'model err':>9} "
          f"{'DMA B emu / model':>21} {'shared B emu / model':>23} {'SRAM emu / model':>19} verdict")
    for workers, banks in ((w, b) for w in args.workers for b in args.banks):
        chip = load_chip("goban", {"cores.count": max(4, workers), "shared_memory.banks": banks})
        for partition, weights in (("spans", "per_worker"), ("spans", "shared"), ("tiles", "shared")):
            cand = Candidate(chip, Mapping(workers=workers, partition=partition, weights=weights))
            rep = emulate_graph(prep.graph, cand, prep.inputs, prep.expected, prep.tolerance, prep.reference_kind)
            model = summarize(estimate(prep.graph, [cand]), [cand]).iloc[0]
            if not rep.feasible:
                print(f"{workers:>7} {banks:>8} {partition:>9} {weights:>10} infeasible: {rep.reason[:150]}")
                continue
            dma = sum(rep.counters["dma_bytes_in"]) + sum(rep.counters["dma_bytes_out"])
            err = model["latency_cycles"] / rep.cycles - 1
            verdict = "bit-exact" if rep.verdict.integer_bit_exact and rep.verdict.passed else "FAILED"
            print(f"{workers:>7} {banks:>8} {partition:>9} {weights:>10} {rep.cycles:>11,} {err:>+9.2%} "
                  f"{dma:>10,} / {int(model['dma_bytes']):>,} "
                  f"{rep.counters['shared_bytes_used']:>11,} / {int(model['shared_sram_bytes']):>,} "
                  f"{rep.peak_sram_bytes:>9,} / {int(model['peak_sram_bytes']):>,} {verdict}")


if __name__ == "__main__":
    main()
