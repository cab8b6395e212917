"""The model table: every real library model of the tests (transformers, its MoE models
among them, torchvision, timm),
through `recipe check` and emulation on goban with 1 and 4 workers.

    .venv/bin/python bench/bench_library_models.py [--only NAME ...] [--out table.md]

For each model: ops and MACs after the frontend steps, the max relative error of every
stage against PyTorch, emulated cycles with 1 and 4 workers (bit-exact on the integer path
or marked), the analytical model's error against the emulator, and the wall time of the
check and of each emulation. Prints a Markdown table (and writes it with --out).
Wall times are one run each on a shared machine: read them as sizes, not as benchmarks.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from dse.analytical import estimate, summarize  # noqa: E402
from dse.chips import load_chip  # noqa: E402
from dse.mapping import Candidate, Mapping  # noqa: E402
from dse.numerics import emulate_graph  # noqa: E402
from dse.numerics.run import prepare_recipe  # noqa: E402

import test_library_models as library  # noqa: E402
import test_real_models as hf  # noqa: E402
import test_moe  # noqa: E402,F401  (adds the mixture-of-experts models to hf.MODELS)


def models() -> dict[str, callable]:
    """name -> a function making the recipe folder under a given directory."""
    made = {f"hf_{name}": (lambda root, n=name: hf.make_recipe(root, n)) for name in sorted(hf.MODELS)}
    made.update({_label(name): (lambda root, n=name: library.make_recipe(root, n)) for name in sorted(library.MODELS)})
    return made


def _label(name: str) -> str:
    """A library model's row name: its library's prefix (timm's and Whisper's names carry theirs)."""
    if name.startswith(("timm", "whisper")):
        return name
    return f"hf_{name}" if library.MODELS[name].startswith("transformers.") else f"tv_{name}"


def row(name: str, make, root: Path) -> str:
    folder = root / name  # models of two libraries may share a short name
    folder.mkdir()
    recipe = make(folder)
    started = time.perf_counter()
    prep = prepare_recipe(recipe)
    check_s = time.perf_counter() - started
    pipe = prep.pipe
    errors = ", ".join(f"{s.name} {s.max_rel_error:.1e}" for s in pipe.stages)
    if not pipe.passed:
        return f"| {name} | FAILED check: {prep.failed[:80]} | | | | | | {check_s:.1f} | |"
    graph = prep.graph
    macs = sum(int(op.counts.macs or 0) for op in graph.ops)
    chip = load_chip("goban")
    cycles, model_errors, emulate_s = [], [], []
    for workers in (1, 4):
        cand = Candidate(chip, Mapping(workers=workers))
        started = time.perf_counter()
        rep = emulate_graph(graph, cand, prep.inputs, prep.expected, prep.tolerance, prep.reference_kind)
        emulate_s.append(time.perf_counter() - started)
        if not rep.feasible:
            cycles.append(f"infeasible: {rep.reason[:40]}")
            continue
        exact = "" if rep.verdict.passed and rep.verdict.integer_bit_exact else " (NOT bit-exact)"
        cycles.append(f"{rep.cycles:,}{exact}")
        model = summarize(estimate(graph, [cand]), [cand]).iloc[0]["latency_cycles"]
        model_errors.append(f"{model / rep.cycles - 1:+.2%}")
    return (f"| {name} | {len(graph.ops)} | {macs:,} | {errors} | {cycles[0]} | {cycles[1]} | "
            f"{' / '.join(model_errors)} | {check_s:.1f} | {' / '.join(f'{s:.1f}' for s in emulate_s)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="model names (default: all)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    table = models()
    names = args.only or list(table)
    lines = ["| model | ops | MACs | max rel error per stage | cycles, 1 worker | cycles, 4 workers | "
             "model vs emulator (1 / 4) | check s | emulate s (1 / 4) |", "|" + "---|" * 9]
    print("\n".join(lines), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            line = row(name, table[name], Path(tmp))
            print(line, flush=True)
            lines.append(line)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
