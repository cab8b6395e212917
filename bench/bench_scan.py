"""Scan cost against sequence length, the recurrent weight kept in shared memory across the
steps or reloaded every step: the analytical model and the emulator, measured.

    .venv/bin/python bench/bench_scan.py [--cell gru|lstm|mamba] [--lengths 8 16 32 64] [--workers 1]

A recurrent layer (nn.GRU or nn.LSTM, 16 -> 32 hidden, batch 2, a linear head) as a recipe,
through `recipe check` (capture: one scan op; the quantize step puts its recurrent product
on the matrix Ball) and emulation on goban, at each sequence length T; or (`--cell mamba`)
the shipped recipes/mamba_block at T tokens (its selective scan rerolled into one scan op,
its step on the core: no weight product, so both rows are one). Each T runs twice, in the
same process: ``mapping.scan_weights = "kept"`` (the default: W_hh's B tiles loaded into
the tile's shared memory once before the loop) and ``"reloaded"`` (loaded into private
banks every step, as before). Prints per T and per choice: the whole graph's cycles by the
model and by the emulator, the scan op's own cycles (model), the ratio per doubling of T
(2.00 is linear), and reloaded / kept by the emulator. Cycles are deterministic (one run
each); the emulation's host time is the median of --repeats runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dse.analytical import estimate, summarize  # noqa: E402
from dse.chips import load_chip  # noqa: E402
from dse.mapping import Candidate, Mapping  # noqa: E402
from dse.numerics import emulate_graph  # noqa: E402
from dse.numerics.run import prepare_recipe  # noqa: E402

RECIPE = '''"""A {cell} layer over {T} steps (bench_scan)."""
import torch
from torch import nn


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.{Cell}(16, 32, batch_first=True)
        self.head = nn.Linear(32, 8)

    def forward(self, x):
        return self.head(self.rnn(x)[0])


def load():
    torch.manual_seed(0)
    return M().eval()


def inputs():
    return (torch.randn(2, {T}, 16, generator=torch.Generator().manual_seed(1)),)
'''


def measure(root: Path, cell: str, T: int, workers: int, repeats: int) -> list[dict]:
    folder = root / f"{cell}_{T}"
    folder.mkdir()
    if cell == "mamba":
        source = (REPO / "recipes" / "mamba_block" / "model.py").read_text()
        (folder / "model.py").write_text(source.replace("TOKENS = 32", f"TOKENS = {T}"))
        (folder / "steps.toml").write_text((REPO / "recipes" / "mamba_block" / "steps.toml").read_text())
    else:
        (folder / "model.py").write_text(RECIPE.format(cell=cell, Cell=cell.upper(), T=T))
    prep = prepare_recipe(folder)
    assert prep.pipe.passed, [(s.name, s.error) for s in prep.pipe.stages if not s.passed]
    rows = []
    for choice in ("kept", "reloaded"):
        cand = Candidate(load_chip("goban"), Mapping(workers=workers, scan_weights=choice))
        per_op = estimate(prep.graph, [cand])
        model = summarize(per_op, [cand]).iloc[0]
        scan_names = [op.name for op in prep.graph.ops if op.kind == "scan"]
        model_scan = int(per_op[per_op["op"].isin(scan_names)]["cycles"].sum()) if "op" in per_op else None
        times, rep = [], None
        for _ in range(repeats):
            started = time.perf_counter()
            rep = emulate_graph(prep.graph, cand, prep.inputs, prep.expected, prep.tolerance, prep.reference_kind)
            times.append(time.perf_counter() - started)
        assert rep.feasible and rep.verdict.passed and rep.verdict.integer_bit_exact, rep.verdict
        rows.append({"T": T, "weights": choice, "model": int(model["latency_cycles"]), "emulator": int(rep.cycles),
                     "model_scan": model_scan, "host_s": statistics.median(times)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cell", choices=("gru", "lstm", "mamba"), default="gru")
    parser.add_argument("--lengths", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for T in args.lengths:
            rows += measure(Path(tmp), args.cell, T, args.workers, args.repeats)
    what = "recipes/mamba_block" if args.cell == "mamba" else f"{args.cell}, 16 -> 32 hidden, batch 2"
    print(f"{what}, goban, {args.workers} worker(s)")
    print("| T | scan weights | model cycles | emulator cycles | model / emulator | model x per doubling "
          "| emulator x per doubling | scan op (model) | scan x per doubling | reloaded / kept (emulator) "
          "| emulation host s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    previous: dict = {}
    kept: dict = {}
    for r in rows:
        before = previous.get(r["weights"])
        ratio = lambda key: f"{r[key] / before[key]:.3f}" if before and before.get(key) else ""  # noqa: E731
        if r["weights"] == "kept":
            kept = r
        versus = f"{r['emulator'] / kept['emulator']:.3f}" if r["weights"] == "reloaded" else ""
        print(f"| {r['T']} | {r['weights']} | {r['model']} | {r['emulator']} | {r['model'] / r['emulator']:.4f} "
              f"| {ratio('model')} | {ratio('emulator')} | {r['model_scan']} | {ratio('model_scan')} | {versus} "
              f"| {r['host_s']:.2f} |")
        previous[r["weights"]] = r

if __name__ == "__main__":
    main()
