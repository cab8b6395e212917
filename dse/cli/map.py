"""`dse map --chip NAME|FILE --recipe NAME|PATH [--params JSON | KEY=VALUE...] [--workers N]
[--split rows|cols] [--dataflow ws|os] [--buffering single|double] [--objective latency|front] [--json]`.

Runs the recipe's frontend pipeline (capture, then its steps) and maps every matmul-family
op of the final graph onto the chip: every legal tile is evaluated with the analytical
model, and the framework toolchain's greedy tile is compared with the best one. A tile's
banks are counted with the buffering `--buffering` names (`mapping.double_buffer`, the
same rule a sweep's candidate is planned with: `dse.mapping.matmul.check_tiles`), and the
output says which it assumed. Prints a
per-op table, the recipe totals (matmul-family cycles only) and the mapper's wall time;
``--json`` prints one JSON object. Exit 0; 3 when some op has no legal tile on the chip
(the framework failing alone is a finding, exit 0); 2 on bad input.
"""

from __future__ import annotations

import json
import sys
import time

from ..errors import InputError
from .common import parse_overrides, parse_value


def _mapping_choices(field: str) -> tuple[str, ...]:
    """The values a Mapping field allows (its Literal), for the command-line flags."""
    from typing import get_args

    from ..mapping import Mapping

    return get_args(Mapping.model_fields[field].annotation)


def _choice(flag: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise InputError("(command line)", flag, value, ", ".join(allowed))
    return value


def parse_params(items: list[str] | None) -> dict:
    """`--params '{"size": 32}'` or `--params size=32 batch=2` (both repeatable)."""
    params: dict = {}
    for item in items or []:
        text = item.strip()
        if text.startswith("{"):
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise InputError("--params", "--params", item, f"a JSON object ({exc.msg})") from None
            if not isinstance(data, dict):
                raise InputError("--params", "--params", item, "a JSON object of recipe parameters")
            params.update(data)
            continue
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise InputError("--params", "--params", item,
                             'KEY=VALUE (e.g. size=32) or a JSON object (e.g. {"size": 32})')
        params[key.strip()] = parse_value(value.strip())
    return params


def _fmt_int(v) -> str:
    return "-" if v is None else f"{v:,}"


def _fmt_gap(v) -> str:
    return "-" if v is None else f"{v:.2f}x"


def print_table(result, recipe: str, params: dict, pipeline_seconds: float, out=None) -> None:
    out = out or sys.stdout
    m = result.mapping
    from ..mapping.matmul import buffering_assumption

    print(f"recipe {recipe} {params or '{}'} on {result.chip}: {m['workers']} worker(s), split {m['split']}, "
          f"dataflow {m['dataflow']}, objective {result.objective}", file=out)
    print(f"assumes {buffering_assumption(m['double_buffer'])} (--buffering single|double; a sweep's candidate: "
          f"mapping.double_buffer)", file=out)
    headers = ["op", "kind", "M N K", "framework tile", "fw cycles", "best tile", "best cycles", "gap", "legal tiles"]
    rows = []
    for o in result.ops:
        s = o.shape
        mnk = (f"{s.batch}x " if s.batch > 1 else "") + f"{s.M} {s.N} {s.K}"
        fw_tile = str(o.framework) + ("" if o.framework_feasible else " (fails)")
        rows.append([o.op, o.kind, mnk, fw_tile, _fmt_int(o.framework.cycles) if o.framework_feasible else "-",
                     str(o.best) if o.best else "none", _fmt_int(o.best.cycles) if o.best else "-",
                     _fmt_gap(o.gap), f"{o.legal_tiles}/{o.tiles}"])
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    right = {2, 4, 6, 7, 8}

    def line(cells):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    print(line(headers), file=out)
    for r in rows:
        print(line(r), file=out)
    if not result.ops:
        print("(no matmul-family ops: linear, matmul, conv1d, conv2d)", file=out)
    for o in result.ops:
        if not o.framework_feasible:
            print(f"  {o.op}: framework fails: {o.framework_reason}", file=out)
        if o.best is None:
            print(f"  {o.op}: no legal tile: {o.reason}", file=out)
    if result.objective == "front":
        for o in result.ops:
            pts = "; ".join(f"{p} {p.cycles:,} cyc {p.sram_bytes:,} B" for p in o.front or [])
            print(f"  front {o.op}: {pts or '(empty)'}", file=out)
    fw, best = result.framework_cycles, result.best_cycles
    print(f"totals over {len(result.ops)} matmul-family op(s) ({result.distinct_shapes} distinct shapes): "
          f"framework {_fmt_int(fw)} cycles"
          + (f" (fails on {len(result.framework_infeasible)} op(s))" if fw is None else "")
          + f", best {_fmt_int(best)} cycles, gap {_fmt_gap(result.gap)}", file=out)
    print(f"mapper wall time {result.seconds * 1e3:.1f} ms ({result.tiles_evaluated:,} tiles evaluated "
          f"over the distinct shapes); "
          f"frontend pipeline {pipeline_seconds:.1f} s", file=out)


def cmd_map(args) -> int:
    from ..plan.mapper import OBJECTIVES, map_graph
    from ..chips import load_chip
    from ..frontend import run_pipeline
    from ..mapping import Candidate, Mapping
    from ..workload.recipes import model_file, recipe_name

    if not args.chip or not args.recipe:
        missing = "--chip" if not args.chip else "--recipe"
        raise InputError("(command line)", missing, None, "a chip name or TOML path and a recipe name or folder")
    objective = _choice("--objective", args.objective, OBJECTIVES)
    split = _choice("--split", args.split, _mapping_choices("split"))
    dataflow = _choice("--dataflow", args.dataflow, _mapping_choices("dataflow"))
    from ..mapping.matmul import BUFFERING

    double_buffer = BUFFERING[_choice("--buffering", args.buffering, tuple(BUFFERING))]
    chip = load_chip(args.chip, parse_overrides(args.set), overrides_source="--set")
    if args.workers < 1 or args.workers > chip.cores.count:
        raise InputError("(command line)", "--workers", args.workers, f"1..{chip.cores.count} (cores of {chip.name})")
    matrix = chip.ball("matrix")
    if matrix is None:
        raise InputError(args.chip, "balls", "no matrix Ball", "a chip with a matrix Ball to map matmuls onto")
    if getattr(matrix, "timing", None) != "systolic" and dataflow not in matrix.latency:
        raise InputError("(command line)", "--dataflow", dataflow,
                         f"a dataflow the matrix Ball of {chip.name} has a latency formula for: "
                         + ", ".join(matrix.latency))
    model_file(args.recipe)  # InputError for an unknown recipe
    name = recipe_name(args.recipe)
    params = parse_params(args.params)
    started = time.perf_counter()
    # The graph's structure is all the mapper reads: skip the per-stage PyTorch checks
    # (`dse recipe check` runs them); a cached graph needs no torch.
    pipe = run_pipeline(args.recipe, params, check=False)  # InputError for unknown parameters
    pipeline_seconds = time.perf_counter() - started
    if not pipe.passed:
        failed = next(s for s in pipe.stages if not s.passed)
        print(f"dse map: warning: frontend stage {failed.name} failed ({failed.error}); "
              f"mapping the graph after the last stage that ran", file=sys.stderr)
    mapping = Mapping(policy="search", workers=args.workers, split=split, dataflow=dataflow,
                      double_buffer=double_buffer)
    result = map_graph(pipe.graph, Candidate(chip, mapping), objective)
    if args.json:
        from ..mapping.matmul import buffering_assumption

        out = {"recipe": name, "params": params, **result.to_dict(), "pipeline_seconds": pipeline_seconds,
               "assumes": buffering_assumption(double_buffer)}
        print(json.dumps(out, indent=2, default=str))
    else:
        print_table(result, name, params, pipeline_seconds)
    return 3 if result.unmappable else 0


def register(sub) -> None:
    p = sub.add_parser("map", help="map every matmul/conv of a recipe onto a chip: every legal tile vs the "
                                   "framework's greedy pick")
    p.add_argument("--chip", help="shipped chip name or TOML path")
    p.add_argument("--recipe", help="recipe name or a folder with a model.py")
    p.add_argument("--params", "--param", dest="params", action="extend", nargs="+", metavar="JSON|KEY=VALUE",
                   help="recipe parameters: a JSON object or KEY=VALUE pairs, e.g. size=32")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a chip field, e.g. banks.count=32")
    p.add_argument("--workers", type=int, default=1, help="cores each product's output tiles are split across")
    p.add_argument("--split", default="rows", metavar="rows|cols", help="how output tiles are split (default rows)")
    p.add_argument("--dataflow", default="ws", metavar="ws|os|...", help="matrix Ball dataflow (default ws)")
    p.add_argument("--buffering", default="double", metavar="single|double",
                   help="buffers per operand a tile's banks are counted with (default double: DMA overlaps "
                        "compute; single is mapping.double_buffer = false)")
    p.add_argument("--objective", default="latency", metavar="latency|front",
                   help="latency: fewest cycles (ties: less SRAM); front: also the latency/SRAM Pareto front")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_map)
