"""`dse recipe list|show|check|diff`: the shipped recipes, a recipe's graph, the frontend
pipeline (capture, then every step) checked against PyTorch, and two checks' dumps compared."""

from __future__ import annotations

import json
import math
from pathlib import Path

from .. import allocator
from ..errors import InputError
from .common import parse_value


def _params(pairs: list[str] | None) -> dict:
    params = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InputError("--param", "param", pair, "KEY=VALUE, e.g. size=32")
        params[key.strip()] = parse_value(value.strip())
    return params


def _steps(args, recipe):
    from ..frontend import parse_step_list

    if args.steps is None:
        return None
    return parse_step_list(args.steps, recipe.path.parent)


def cmd_list(args) -> int:
    from ..frontend import load_steps
    from ..workload import list_recipes, load_recipe
    from ..workload.recipes import recipe_doc

    rows = []
    for name in list_recipes():
        recipe = load_recipe(name)
        steps = ", ".join(step.name for step in load_steps(recipe.path.parent))
        rows.append((name, steps, recipe_doc(recipe)))
    if args.json:
        print(json.dumps([{"name": n, "steps": s.split(", "), "description": d} for n, s, d in rows], indent=2))
        return 0
    width = max(len(n) for n, _, _ in rows)
    steps_width = max(len(s) for _, s, _ in rows)
    print(f"{'name':<{width}}  {'steps':<{steps_width}}  description")
    for name, steps, doc in rows:
        print(f"{name:<{width}}  {steps:<{steps_width}}  {doc}")
    return 0


def cmd_show(args) -> int:
    from ..frontend import run_pipeline

    params = _params(args.param)
    if args.steps is None and not args.after:
        # The captured graph: the first stage of the recipe's own pipeline, the one entry
        # of the graph cache a sweep, `dse map` and this share (a cached one needs no torch).
        _print_graph(args, run_pipeline(args.recipe, params, check=False), 0)
        return 0
    from ..workload import load_recipe

    recipe = load_recipe(args.recipe)
    steps = _steps(args, recipe)
    if args.after:
        from ..frontend import load_steps

        listed = steps if steps is not None else load_steps(recipe.path.parent)
        names = [step.name for step in listed]
        if args.after not in names:
            raise InputError(recipe.path.parent / "steps.toml", "--after", args.after, ", ".join(names) or "(no steps)")
        steps = listed[: names.index(args.after) + 1]
    else:
        steps = []
    result = run_pipeline(recipe, params, steps)
    if len(result.graphs) < len(result.stages):  # a step could not apply
        failed = result.stages[-1]
        raise InputError(recipe.path.parent / "steps.toml", f"step {failed.name}", failed.error, "a step that applies")
    _print_graph(args, result, len(result.graphs) - 1)
    return 0


def _print_graph(args, result, index: int) -> None:
    """The graph after stage `index` of `result` (a PipelineResult)."""
    graph, stage, params = result.graphs[index], result.stages[index].dump.removesuffix(".txt"), result.params
    if args.dump:
        print(graph.dump(), end="")
        return
    from ..plan.graph_plan import temporaries

    temps = temporaries(graph)  # the lowering's own buffers besides the graph's tensors
    frame = graph.counts_frame()
    frame.insert(2, "output", [str(graph.tensors[op.outputs[0]]) for op in graph.ops])
    frame["temp_bytes"] = [sum(t.nbytes for t in temps if t.op == op.name) for op in graph.ops]
    frame["op#"] = range(len(graph.ops))  # the index mapping.cuts names (after the recipe's steps)
    if args.json:
        print(json.dumps({
            "recipe": result.recipe, "path": result.path, "params": params, "stage": stage,
            "inputs": {name: str(graph.tensors[name]) for name in graph.inputs},
            "outputs": {name: str(graph.tensors[name]) for name in graph.outputs},
            "ops": frame.to_dict(orient="records"),
            "totals": _totals(graph),
            "temporaries": [{"op": t.op, "kind": TEMPORARY_NAMES[t.kind], "of": t.tensor, "shape": list(t.shape),
                             "dtype": t.dtype, "bytes": t.nbytes} for t in temps],
        }, indent=2, default=str))
        return
    print(f"recipe {result.recipe} ({result.path})  stage {stage}  params {params or '{}'}")
    for name in graph.inputs:
        print(f"input  {name}: {graph.tensors[name]}")
    for name in graph.outputs:
        print(f"output {name}: {graph.tensors[name]}")
    columns = ["name", "kind", "output", "macs", "other_ops", "bytes_read", "bytes_written", "weight_bytes",
               "temp_bytes", "source", "op#"]
    print(frame[columns].to_string(index=False))
    t = _totals(graph)
    print(f"{len(graph.ops)} ops; total macs={t['macs']:,} other_ops={t['other_ops']:,} bytes_read={t['bytes_read']:,}"
          f" bytes_written={t['bytes_written']:,} weight_bytes={t['weight_bytes']:,}")
    _print_temporaries(temps)


# A plan copy's kind as the listing names the buffer it writes.
TEMPORARY_NAMES = {"pad": "pad", "gather": "im2col", "standardise": "standardise", "unblock": "unblock"}


def _print_temporaries(temps) -> None:
    """The lowering's temporaries (`dse.plan.graph_plan.temporaries`), one line each."""
    print(f"lowering temporaries: {len(temps)} buffer(s), {sum(t.nbytes for t in temps):,} bytes "
          "(padded DRAM buffers the plan's copies write; a matmul's pack copies follow each candidate's tile)")
    width = max((len(t.op) for t in temps), default=0)
    for t in temps:
        shape = "x".join(map(str, t.shape))
        print(f"  {t.op:<{width}}  {TEMPORARY_NAMES[t.kind]:<11} of {t.tensor}: {t.dtype}[{shape}]  {t.nbytes:,} B")


def _totals(graph) -> dict:
    t = graph.totals()
    return {"macs": t.macs, "other_ops": t.other_ops, "bytes_read": t.bytes_read, "bytes_written": t.bytes_written,
            "weight_bytes": t.weight_bytes}


def _number(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.3e}"


def cmd_check(args) -> int:
    from ..frontend import run_pipeline
    from ..workload import load_recipe

    recipe = load_recipe(args.recipe)
    params = _params(args.param)
    steps = _steps(args, recipe)
    out_dir = None if args.no_dump else Path(args.out) if args.out else Path("output") / recipe.name
    if out_dir is not None:  # an earlier check's dumps are kept: this one writes beside them
        from ..frontend.dumps import fresh_dump_dir

        chosen = fresh_dump_dir(out_dir, args.force)
        if chosen != out_dir and not args.json:
            print(f"{out_dir}/ holds an earlier check's dumps (kept; --force overwrites them): this check's go to {chosen}/")
        out_dir = chosen
    result = run_pipeline(recipe, params, steps, out_dir)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, default=str))
        return 0 if result.passed else 1
    print(f"recipe {recipe.name} ({recipe.path})  params {params or '{}'}")
    print(f"{'stage':<22} {'ops':>5} {'MACs':>14} {'max abs err':>11} {'max rel err':>11} {'tolerance':>9}  result")
    for s in result.stages:
        verdict = "pass" if s.passed else f"FAIL (blame: {s.blame})"
        extra = ""
        if "bit_exact" in s.details:
            extra = (f"  integer reference bit-exact: {'yes' if s.details['bit_exact'] else 'NO'}"
                     f" ({s.details['integer_tensors_compared']} tensors)")
        print(f"{s.index:02d}-{s.name:<19} {s.ops:>5} {s.macs:>14,} {_number(s.max_abs_error):>11}"
              f" {_number(s.max_rel_error):>11} {s.tolerance:>9g}  {verdict}{extra}")
        if s.error:
            print(f"    {s.error}")
    if out_dir is not None:
        print(f"dumps: {out_dir}/ ({', '.join(s.dump for s in result.stages[:len(result.graphs)])})")
    print("passed" if result.passed else "FAILED")
    return 0 if result.passed else 1


def cmd_diff(args) -> int:
    """Two dump folders compared byte for byte: 0 identical, 1 different (2: bad input)."""
    from ..frontend.dumps import DIFFERENT, ONLY_A, ONLY_B, SAME, compare

    found = compare(Path(args.a), Path(args.b))
    counts = {status: sum(f.status == status for f in found) for status in (SAME, DIFFERENT, ONLY_A, ONLY_B)}
    identical = counts[SAME] == len(found)
    if args.json:
        print(json.dumps({"a": args.a, "b": args.b, "identical": identical, "counts": counts,
                          "files": [{"path": f.path, "status": f.status, "detail": f.detail} for f in found]}, indent=2))
        return 0 if identical else 1
    print(f"A: {args.a}\nB: {args.b}")
    for f in found:
        print(f.line())
    print(f"{len(found)} files: " + ", ".join(f"{n} {status}" for status, n in counts.items())
          + ("; identical" if identical else "; different"))
    return 0 if identical else 1


def cmd_chain(args) -> int:
    """A chained recipe checked end to end against the float chain; emulated stage by stage
    with --chip. 0 passed, 1 failed (2: bad input)."""
    allocator.exec_with_jemalloc()  # a whole model, layer after layer: under jemalloc (`dse.allocator`)
    from ..chips import load_chip
    from ..numerics.chain import check_chain, load_chain

    stages = load_chain(args.chain)
    chip = load_chip(args.chip) if args.chip else None
    # one streamed pass: a whole model's layers one at a time, the float forwards its checks' own
    graphs, emulated = check_chain(stages, chip, keep_outputs=False, check_every_layer=args.check_every_layer)
    reports = [("frontend graphs", graphs)] + ([(f"emulated on {args.chip}", emulated)] if emulated else [])
    for title, report in reports:
        print(f"{title}: " + "\n".join(report.lines()))
    return 0 if all(r.passed for _, r in reports) else 1


def register(sub) -> None:
    recipe = sub.add_parser("recipe", help="list recipes, show a recipe's graph, check its frontend steps")
    rsub = recipe.add_subparsers(dest="action", required=True)
    lst = rsub.add_parser("list", help="the shipped recipes with their frontend steps")
    lst.add_argument("--json", action="store_true", help="machine-readable output")
    lst.set_defaults(func=cmd_list)

    def common(parser) -> None:
        parser.add_argument("recipe", help="shipped recipe name, or a folder holding a model.py")
        parser.add_argument("--param", action="append", metavar="KEY=VALUE",
                            help="a parameter of load()/inputs(), e.g. size=32 (repeatable)")
        parser.add_argument("--steps", metavar="LIST",
                            help="steps instead of the recipe's own, e.g. 'permute,quantize:weights=tensor'")
        parser.add_argument("--json", action="store_true", help="machine-readable output")

    show = rsub.add_parser("show", help="a recipe's ops with shapes and counts (the capture, or after a step)")
    common(show)
    show.add_argument("--after", metavar="STEP", help="show the graph after this step of the recipe's list")
    show.add_argument("--dump", action="store_true", help="print the text dump instead of the table")
    show.set_defaults(func=cmd_show)

    check = rsub.add_parser("check", help="capture and run every frontend step, each checked against PyTorch")
    common(check)
    check.add_argument("--out", metavar="DIR", help="where the numbered dumps go (default output/<recipe>)")
    check.add_argument("--no-dump", action="store_true", help="write no dumps")
    check.add_argument("--force", action="store_true", help="overwrite the dumps an earlier check left in the "
                                                            "folder (default: write to the next free DIR.2, DIR.3, ...)")
    check.set_defaults(func=cmd_check)

    diff = rsub.add_parser("diff", help="compare two dump folders (of `recipe check`) byte for byte: exit 0 "
                                        "identical, 1 different, 2 bad input")
    diff.add_argument("a", metavar="A", help="a dump folder")
    diff.add_argument("b", metavar="B", help="the other dump folder")
    diff.add_argument("--json", action="store_true", help="machine-readable output")
    diff.set_defaults(func=cmd_diff)
    chain = rsub.add_parser("chain", help="a chained recipe (a chain.toml: one graph's outputs the next's inputs) "
                                          "checked end to end against PyTorch; with --chip also emulated stage by "
                                          "stage: exit 0 passed, 1 failed, 2 bad input")
    chain.add_argument("chain", help="a chain.toml, or a folder holding one (e.g. recipes/llama_prefill_decode)")
    chain.add_argument("--chip", help="emulate each stage on this chip (shipped name or TOML path), fed the "
                                      "previous stage's emulated outputs")
    chain.add_argument("--check-every-layer", action="store_true",
                       help="run every repetition's frontend checks in full (default: a repeated stage's later "
                            "layers reuse the first one's checked structure with their own weights)")
    chain.set_defaults(func=cmd_chain)
