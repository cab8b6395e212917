"""The #19 knobs on the shipped recipes: emulated cycles, DRAM traffic and SRAM, and the
model's error against the emulator.

    .venv/bin/python bench/bench_partition_knobs.py [--recipes mlp resnet_block gemm]
        [--sections weights fusion attention layout rows]
        [--attention-recipes llama_decode llama_prefill vit_block]
        [--layout-recipes resnet_block temporal_conv mobilenet_v3]

For each recipe on goban, workers 1 and 4 x mapping.weights per_worker / shared: the
emulator's cycles and the model's, the model's error, DMA bytes (emulator counters; the
model's in brackets when it differs), peak private SRAM of a worker, the shared memory a
tile holds, the shared-channel conflicts, and whether the integer path is bit-exact (and the
permutes' model cycles, split across workers). Then resnet_block with mapping.fusion
materialize / fuse at 1 and 4 workers; the attention recipes with mapping.fusion
materialize / fuse (attention's score chain as one core pass) at 1 and 4 workers; the conv
recipes with mapping.channels_last false / true at 1 and 4 workers (the layout conversions'
model cycles: 0 where they are views); and goban with 2048-row banks (a 10-bit row field):
private against unaddressable SRAM. Figures, not speed: every run is deterministic.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dse.analytical import estimate, summarize  # noqa: E402
from dse.chips import load_chip  # noqa: E402
from dse.mapping import Candidate, Mapping  # noqa: E402
from dse.numerics import emulate_graph  # noqa: E402
from dse.numerics.run import prepare_recipe  # noqa: E402


def row(prep, cand) -> str:
    rep = emulate_graph(prep.graph, cand, prep.inputs, prep.expected, prep.tolerance, prep.reference_kind)
    per_op = estimate(prep.graph, [cand])
    model = summarize(per_op, [cand]).iloc[0]
    m = cand.mapping
    head = (f"  workers {m.workers}  weights {m.weights or 'per_worker':<10}  fusion {m.fusion or 'materialize':<11}"
            f"  channels_last {str(bool(m.channels_last)).lower():<5}")
    if not rep.feasible:
        return f"{head}  infeasible: {rep.reason}  (model: {model['reason']})"
    dma = sum(rep.counters["dma_bytes_in"]) + sum(rep.counters["dma_bytes_out"])
    model_dma = "" if model["dma_bytes"] == dma else f" [{model['dma_bytes']:,.0f}]"
    permutes = per_op[per_op["kind"] == "permute"]["cycles"].tolist()
    return (f"{head}  cycles {rep.cycles:>11,}  model {model['latency_cycles']:>11,.0f} "
            f"({model['latency_cycles'] / rep.cycles - 1:+.3%})  DMA {dma:>10,} B{model_dma}  "
            f"private {rep.peak_sram_bytes:>8,} B  shared {rep.counters['shared_bytes_used']:>9,} B  "
            f"shared-channel conflicts {sum(rep.counters['shared_channel_conflicts'])}  "
            f"bit-exact {rep.verdict.integer_bit_exact}" + (f"  permutes {permutes}" if permutes else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", default=["mlp", "resnet_block", "gemm"])
    sections = ["weights", "fusion", "attention", "layout", "rows"]
    parser.add_argument("--sections", nargs="+", default=sections, choices=sections)
    parser.add_argument("--attention-recipes", nargs="+", default=["llama_decode", "llama_prefill", "vit_block"])
    parser.add_argument("--layout-recipes", nargs="+", default=["resnet_block", "temporal_conv", "mobilenet_v3"])
    args = parser.parse_args()
    goban = load_chip("goban")

    def grid(recipes, knob: str, values, what: str) -> None:
        # Each recipe at 1 and 4 workers, the knob at each value side by side.
        for recipe in recipes:
            prep = prepare_recipe(recipe)
            print(f"{recipe} on goban{what}")
            for workers in (1, 4):
                for value in values:
                    print(row(prep, Candidate(goban, Mapping(workers=workers, **{knob: value}))), flush=True)

    if "weights" in args.sections:
        grid(args.recipes, "weights", ("per_worker", "shared"), "")
    if "fusion" in args.sections:
        grid(["resnet_block"], "fusion", ("materialize", "fuse"), ", fusion")
    if "attention" in args.sections:
        grid(args.attention_recipes, "fusion", ("materialize", "fuse"), ", fusion (attention's score chain)")
    if "layout" in args.sections:
        grid(args.layout_recipes, "channels_last", (False, True), ", channels_last")
    if "rows" in args.sections:
        deep = load_chip("goban", {"banks.rows": 2048})
        cand = Candidate(deep, Mapping(workers=4))
        model = summarize(estimate(prepare_recipe("gemm").graph, [cand]), [cand]).iloc[0]
        print(f"goban, banks.rows = 2048, 4 workers: private {model['private_sram_bytes']:,.0f} B, "
              f"unaddressable {model['unaddressable_sram_bytes']:,.0f} B (chip: {deep.private_sram_bytes:,} B / "
              f"{deep.unaddressable_sram_bytes:,} B a core)")


if __name__ == "__main__":
    main()
