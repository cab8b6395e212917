"""A mixture of experts' cycles against its expert count and its tokens: the shipped
`mixtral_moe` recipe (one decoder layer, top-2 routing, random weights) on goban with
4 workers, its experts split over the workers (tensor parallel) or spread one a worker
(expert parallel), the analytical model beside the emulator.

    .venv/bin/python bench/bench_moe.py [--experts 2 4 8 16] [--tokens 8 32 64] [--out table.md]

Tokens are batch x 4 (a batch of 4-token sequences). For each point: the tokens per expert
the example inputs route (the emulator follows them; the model costs them as recorded), the
per-core imbalance of the spread placement, the cycles of both placements by model and
emulator (bit-exact on the integer path, or marked), the model's error against the emulator
and spread's speed-up over split. Cycles are deterministic; one run a point.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dse.analytical import estimate, summarize  # noqa: E402
from dse.analytical.moe import estimate_spread  # noqa: E402
from dse.chips import load_chip  # noqa: E402
from dse.mapping import Candidate, Mapping  # noqa: E402
from dse.numerics import emulate_graph  # noqa: E402
from dse.numerics.run import prepare_recipe  # noqa: E402
from dse.plan.moe import core_imbalance, spread_blocks  # noqa: E402
from dse.workload.moe import moe_layers  # noqa: E402

SEQ = 4
WORKERS = 4


def point(experts: int, tokens: int) -> str:
    params = {"experts": experts, "batch": tokens // SEQ, "seq": SEQ}
    prep = prepare_recipe(REPO / "recipes" / "mixtral_moe", params)
    if prep.failed:  # e.g. a quantized router sending a token to an expert the capture left empty
        return f"| {experts} | {tokens} | {prep.failed[:160]} | | | | | | | |"
    graph = prep.graph
    chip = load_chip("goban")
    cells = []
    for placement in ("split", "spread"):
        cand = Candidate(chip, Mapping(workers=WORKERS, experts=placement))
        rep = emulate_graph(graph, cand, prep.inputs, prep.expected, prep.tolerance, prep.reference_kind)
        if placement == "spread":
            model = float(estimate_spread(graph, [cand])[1]["latency_cycles"][0])
        else:
            model = float(summarize(estimate(graph, [cand]), [cand])["latency_cycles"][0])
        exact = "" if rep.verdict is not None and rep.verdict.integer_bit_exact else " (not bit-exact)"
        cells.append((model, rep.cycles, exact))
    (split_model, split_emu, split_mark), (spread_model, spread_emu, spread_mark) = cells
    [layer] = moe_layers(graph)
    [block] = spread_blocks(graph, WORKERS)
    return (f"| {experts} | {tokens} | {layer.counts} | {core_imbalance(block.tokens):.2f} "
            f"| {split_model:,.0f} | {split_emu:,}{split_mark} | {spread_model:,.0f} | {spread_emu:,}{spread_mark} "
            f"| {max(abs(split_model / split_emu - 1), abs(spread_model / spread_emu - 1)) * 100:.2f}% "
            f"| {split_emu / spread_emu:.2f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experts", type=int, nargs="+", default=[2, 4, 8, 16])
    parser.add_argument("--tokens", type=int, nargs="+", default=[8, 32, 64])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    lines = ["| experts | tokens | tokens per expert | spread core imbalance | split model | split emulator "
             "| spread model | spread emulator | model error (max) | spread speed-up |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for experts in args.experts:
        for tokens in args.tokens:
            lines.append(point(experts, tokens))
            print(lines[-1], flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
