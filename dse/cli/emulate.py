"""`dse emulate --chip NAME|FILE --recipe NAME|PATH [--mapping POLICY] [--workers N] [--knob KEY=VALUE ...] [--json]`.

Runs capture -> frontend steps -> mapping -> lowering -> emulator and compares the outputs
with PyTorch (bit for bit against the quantized reference on the integer path, within the
declared tolerance against the float model). Every mapping knob a spec can set is a
``--knob`` (placement, cuts, requests, handoff, weights, fusion, channels_last,
quantization, workload, ...), validated and run as a sweep's emulator stage runs it. Prints
cycles, DMA and shared-memory bytes, counters, peak private SRAM, the numerics verdict and
the candidate's notes (the placement auto picked, how tensors went between ranges);
``--json`` prints them as one JSON object. Exit 0 when the numerics pass, 1 when they do
not, 3 when the candidate is infeasible, 2 on bad input.

`dse emulate matmul ...` (the emulator's own example, `dse/cli/emulator.py`) shares the
``emulate`` parser: this module creates it, and hands the emulator module a view of it
when that module registers, so both forms parse.
"""

from __future__ import annotations

import json
import os
import sys

from .. import allocator
from .common import parse_overrides

POLICIES = ("framework", "search")


# The flags that set a mapping field (the rest of the mapping is `--knob`'s).
MAPPING_FLAGS = {"mapping": "policy", "workers": "workers", "split": "split", "dataflow": "dataflow",
                 "partition": "partition"}


def emulated_mapping(args, cores: int):
    """The mapping of `dse emulate`: its flags, then every `--knob KEY=VALUE` (a mapping field,
    ``mapping.`` optional), validated as a spec's mapping is (`mapping_from_dict`): a bad knob
    names the field, the value and what is allowed, from source ``--knob``."""
    from ..errors import InputError
    from ..mapping.candidate import mapping_from_dict

    flags = {field: getattr(args, flag) for flag, field in MAPPING_FLAGS.items() if getattr(args, flag) is not None}
    knobs: dict = {}
    for key, value in parse_overrides(args.knob, "--knob", "placement=pipeline").items():
        # a spec's workload knob targets (workload.params.NAME, workload.recipe) are mapping.workload's keys
        point = key.removeprefix("workload.params.") if key.startswith("workload.params.") else (
            "recipe" if key == "workload.recipe" else None)
        if point is not None:
            knobs.setdefault("workload", {})[point] = value
        else:
            knobs[key.removeprefix("mapping.")] = value
    for flag, field in MAPPING_FLAGS.items():
        if field in flags and field in knobs and knobs[field] != flags[field]:
            raise InputError("--knob", f"mapping.{field}", knobs[field],
                             f"one value of mapping.{field} (--{flag} {flags[field]} gives it too)")
    if "workers" in flags and not 1 <= flags["workers"] <= cores:
        raise InputError("(command line)", "--workers", flags["workers"], f"1..{cores} (cores of the chip)")
    mapping = mapping_from_dict({**flags, **knobs}, "--knob" if knobs else "(command line)")
    if mapping.workers > cores:
        raise InputError("--knob", "mapping.workers", mapping.workers, f"1..{cores} (cores of the chip)")
    return mapping


def candidate_notes(rep, chip, asked) -> list[str]:
    """What a sweep's record would note of this candidate: the placement `auto` picked, how
    each tensor between ranges went (the lowering's words, as the model's), the capacity
    the chip has but cannot address."""
    from ..chips import capacity_notes

    notes = []
    if asked.placement == "auto" and rep.feasible:
        # only here: dse.runner.stages brings pandas, the model and the record store (3 s)
        from ..mapping.candidate import mapping_from_dict
        from ..runner.stages import pick_text

        notes.append(f"placement auto picked {pick_text(mapping_from_dict(rep.mapping))}")
    notes += [why for *_, why in rep.handoffs]
    notes += [o["note"] for o in rep.ops if o.get("note")]  # a lowering choice and why (a scan's weight and state)
    return notes + [n for n in capacity_notes(chip).split("; ") if n]


def emulate_stages(args, chip, mapping, params):
    """A workload of stages (`--recipe` as stage `--role`, then every `--stage ROLE=RECIPE`),
    prepared and emulated as a sweep's emulator stage does a spec's ``workload.stages``
    (`prepare_placed`, `emulate_placed`), placed as the mapping says (SPMD, phase, auto).
    Each `--param` goes to every stage whose recipe takes it."""
    import inspect

    from ..errors import InputError
    from ..mapping import Candidate
    from ..numerics.run import emulate_placed
    from ..runner.emulation import prepare_placed
    from ..workload.recipes import load_recipe

    if not args.role:
        raise InputError("(command line)", "--role", None, "the role of --recipe's stage (e.g. prefill) beside --stage")
    if args.check_unmodified:
        raise InputError("(command line)", "--check-unmodified", True, "one recipe (no --stage)")
    stages, roles = [(args.role, args.recipe)], [args.role]
    for text in args.stage:
        role, sep, recipe = text.partition("=")
        if not sep or not role or not recipe:
            raise InputError("--stage", "--stage", text, "ROLE=RECIPE, e.g. decode=llama_decode")
        if role in roles:
            raise InputError("--stage", "--stage", text, f"a role no other stage has (not {', '.join(roles)})")
        stages.append((role, recipe))
        roles.append(role)
    for key in ("quantization", "calibration", "activation_scales", "partition", "workload"):
        if getattr(mapping, key) is not None:
            raise InputError("--knob", f"mapping.{key}", getattr(mapping, key), "unset with --stage (as with a "
                             "spec's workload.stages: the knob would change one stage's graph)")
    taken = {}
    for role, recipe in stages:
        module = load_recipe(recipe).module
        taken[role] = {name for f in (module.load, module.inputs) for name in inspect.signature(f).parameters}
    unused = sorted(set(params) - set().union(*taken.values()))
    if unused:
        raise InputError("--param", unused[0], params[unused[0]], "a parameter of at least one stage's recipe")
    work = prepare_placed([(role, recipe, {k: v for k, v in params.items() if k in taken[role]})
                           for role, recipe in stages])
    return emulate_placed(work.stages, Candidate(chip, mapping))


def cmd_emulate_recipe(args) -> int:
    from ..workload.recipes import chain_file

    chain = chain_file(args.recipe) if args.recipe else None
    if chain is not None:  # a whole model, layer after layer: under jemalloc (`dse.allocator`), before torch loads
        allocator.exec_with_jemalloc()
    if "torch" not in sys.modules:
        # A real layer's tensors are hundreds of MB each: torch's large allocations on
        # transparent huge pages fault in 2 MiB at a time, not 4 KiB (numpy's already do).
        # At seq 2048, 7.2M page faults took 70 of the command's 227 CPU seconds. Torch
        # reads the variable once, at its first allocation.
        os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
    from ..chips import load_chip
    from ..errors import InputError
    from ..numerics import emulate_recipe
    from ..workload.recipes import load_recipe

    if not args.chip or not args.recipe:
        missing = "--chip" if not args.chip else "--recipe"
        raise InputError("(command line)", missing, None, "a chip name or TOML path and a recipe name or folder")
    overrides = parse_overrides(args.set)
    chip = load_chip(args.chip, overrides, overrides_source="--set")
    mapping = emulated_mapping(args, chip.cores.count)
    if chain is not None:
        return emulate_chain_command(args, chain, chip, mapping)
    load_recipe(args.recipe)  # InputError for an unknown recipe
    if args.check_every_layer:
        raise InputError("(command line)", "--check-every-layer", True, "a chain as --recipe (e.g. llama3_8b)")
    if mapping.workload and "recipe" in mapping.workload:
        load_recipe(mapping.workload["recipe"])
    params = parse_overrides(args.param, "--param", "batch=8")
    if args.stage:
        rep = emulate_stages(args, chip, mapping, params)
    else:
        if args.role:
            raise InputError("(command line)", "--role", args.role, "a role only beside --stage ROLE=RECIPE")
        rep = emulate_recipe(args.recipe, chip, mapping, params, check_unmodified=args.check_unmodified)
    notes = candidate_notes(rep, chip, mapping)
    ppa = None
    if rep.feasible and rep.result is not None:  # what the run cost, priced as a sweep's emulator stage prices it
        from ..mapping import Candidate
        from ..runner.emulation import run_ppa

        graph = rep.lowered.graph if rep.lowered is not None else None
        ppa = run_ppa(rep, Candidate(chip, mapping), n_ops=len(graph.ops) if graph is not None and not args.stage
                      else None, roles=[args.role, *(s.split("=")[0] for s in args.stage)]
                      if args.stage else None)
        if ppa.note:
            notes.append(ppa.note)
    if args.json:
        print(json.dumps({**rep.to_dict(), "notes": notes,
                          **({"ppa": {"totals": ppa.totals, "components": ppa.components}} if ppa else {})},
                         indent=2, default=str))
    else:
        knobs = ", ".join(f"{k} = {json.dumps(v)}"
                          for k, v in mapping.model_dump(mode="json", exclude_none=True).items())
        print(f"recipe {rep.recipe} on {rep.chip}: {knobs}")
        if not rep.feasible:
            print(f"infeasible: {rep.reason}")
        else:
            c = rep.counters
            dma_in, dma_out = sum(c["dma_bytes_in"]), sum(c["dma_bytes_out"])
            print(f"emulated cycles       {rep.cycles:,}")
            print(f"DMA bytes             {dma_in + dma_out:,} ({dma_in:,} in, {dma_out:,} out)")
            print(f"shared memory used    {c['shared_bytes_used']:,} B, "
                  f"{sum(c['shared_channel_conflicts']):,} channel conflicts")
            print(f"peak private SRAM     {rep.peak_sram_bytes:,} B of {rep.private_sram_bytes:,} B per worker "
                  f"(per worker: {' '.join(f'{v:,}' for v in c['peak_allocated_bytes'])})")
            for k in ("instructions", "core_op_cycles", "matrix_busy_cycles", "dma_bytes_in", "dma_bytes_out",
                      "dma_bursts"):
                print(f"{k:<21} {' '.join(f'{v:,}' for v in c[k])}")
            for o in rep.ops:
                if "spans" in o:
                    print(f"  temporal spans (owned output rows per worker): {o['spans']}")
                elif o["how"] == "matrix":
                    print(f"  {o['op']}: matrix Ball, tile {'x'.join(map(str, o['tile']))}, batch {o['batch']}, "
                          f"{o['banks']} banks, {o['workers_used']} worker(s)")
            if ppa is not None and ppa.totals.get("energy_uj") == ppa.totals.get("energy_uj"):
                t = ppa.totals
                print(f"area                  {t['area_mm2']:.4g} mm2 held ({t['total_sram_bytes']:,.0f} B of SRAM)")
                print(f"energy                {t['energy_uj']:.4g} uJ ({t['leakage_energy_uj']:.4g} uJ leakage), "
                      f"{t['power_mw']:.4g} mW, {t['inferences_per_joule']:.4g} inferences/J")
                by = sorted(ppa.components["energy_uj"].items(), key=lambda kv: -kv[1])
                print("energy by component   " + ", ".join(f"{k} {v:.3g}" for k, v in by if v > 0))
            print(f"numerics              {rep.verdict.summary()}")
            for o in rep.verdict.outputs:  # every output on its own: logits, cache, ...
                print(f"  output {o.line()}")
            if rep.verdict.unmodified is not None:
                from ..numerics import unmodified_summary

                print(f"unmodified graph      {unmodified_summary(rep.verdict.unmodified)}")
        for note in notes:
            print(f"note: {note}")
    if not rep.feasible:
        return 3
    return 0 if rep.verdict.passed else 1


def emulate_chain_command(args, chain, chip, mapping) -> int:
    """`--recipe` naming a chain (a whole model's repeated layers): streamed stage by stage,
    each on the previous stage's emulated outputs (`dse.numerics.chain.check_chain`).
    0 passed, 1 failed, 3 a stage infeasible."""
    from ..errors import InputError
    from ..numerics.chain import check_chain, load_chain, with_params

    for flag in ("stage", "role", "check_unmodified"):
        if getattr(args, flag):
            raise InputError("(command line)", f"--{flag.replace('_', '-')}", getattr(args, flag),
                             "unset with a chain (its stages are its chain.toml's)")
    stages = with_params(load_chain(chain), parse_overrides(args.param, "--param", "seq=256"))
    graphs, emulated = check_chain(stages, chip, mapping, keep_outputs=False, check_every_layer=args.check_every_layer)
    if args.json:
        print(json.dumps({"chain": str(chain), "chip": chip.name, "stages": emulated.stages,
                          "cycles": emulated.cycles, "total_cycles": emulated.total_cycles,
                          "stage_passed": emulated.stage_passed, "reason": emulated.reason,
                          "frontend": emulated.checked,
                          "checks": [vars(c) for c in emulated.checks], "passed": emulated.passed,
                          "allocator": allocator.in_use()}, indent=2,
                         default=str))
    else:
        print(f"chain {chain} on {chip.name}: {len(stages)} stages")
        print("\n".join(emulated.lines()))
    if emulated.reason and not graphs.reason:
        return 3
    return 0 if emulated.passed else 1


def register(sub) -> None:
    emu = sub.add_parser("emulate", help="run a recipe on a chip in the emulator and check it against PyTorch")
    emu.add_argument("--chip", help="shipped chip name or TOML path")
    emu.add_argument("--recipe", help="recipe name or a folder with a model.py; or a chain (a folder with a "
                                      "chain.toml, e.g. llama3_8b: a whole model, streamed layer by layer)")
    # None: unset (the mapping's own default), so a --knob of the same field is no conflict
    emu.add_argument("--mapping", choices=POLICIES, help="tile policy (default search)")
    emu.add_argument("--workers", type=int, help="cores the products are split across (default 1)")
    emu.add_argument("--split", choices=("rows", "cols"), help="how outputs are split (default rows)")
    emu.add_argument("--dataflow", choices=("ws", "os", "is"), help="default ws")
    emu.add_argument("--partition", choices=("tiles", "spans"),
                     help="tiles (default): each product's output tiles split across workers (a barrier per op); "
                          "spans: temporal spans with halos, each worker runs the whole stack")
    emu.add_argument("--knob", action="append", metavar="KEY=VALUE",
                     help="a mapping knob as a spec sets it (mapping.KEY; the value read as TOML), e.g. "
                          "placement=pipeline, cuts=[42], requests=4, weights=shared, fusion=fuse, "
                          "channels_last=true, quantization=channel, workload.params.seq=8 (or 'workload={seq=8}')")
    emu.add_argument("--param", action="append", metavar="KEY=VALUE",
                     help="a recipe parameter, e.g. batch=8 (with --stage: to every stage whose recipe takes it)")
    emu.add_argument("--stage", action="append", metavar="ROLE=RECIPE",
                     help="another stage of the workload (e.g. decode=llama_decode), as a spec's workload.stages: "
                          "run with --recipe's stage (--role) as mapping.placement places them (spmd, phase, auto)")
    emu.add_argument("--role", help="the role of --recipe's stage beside --stage (e.g. prefill)")
    emu.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a chip field")
    emu.add_argument("--check-unmodified", action="store_true",
                     help="also lower and check the captured graph before the frontend steps")
    emu.add_argument("--check-every-layer", action="store_true",
                     help="with a chain: run every layer's frontend checks in full (default: a repeated stage's "
                          "later layers reuse the first one's checked structure with their own weights)")
    emu.add_argument("--json", action="store_true", help="print the report as JSON")
    emu.set_defaults(func=cmd_emulate_recipe)
