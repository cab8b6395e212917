"""Core groups and placement (#19) on the shipped tiny llama recipes: per candidate, the
emulated cycles, DMA bytes (in + out, every core), peak and asked-for private SRAM, the
numerics verdict, and the analytical model's latency error against the emulator.

    .venv/bin/python bench/bench_placement.py [--seq 16] [--past 15] [--requests 4]
        [--only gemm-grid|three-ranges|mlp-banks|qkv-shared-weights|pipeline-shared-weights]

Candidates: poly's phases on their own groups (placement "phase"), both phases one after
another on SPMD workers (placement None) of poly with its groups removed (5 identical
16-bank cores) at 5 and 4 workers and of poly's 3 prefill cores, each phase alone on its
group, the decode group's hardware moved one field at a time (16 banks; the chip's 4-cycle
core; an 8x8 matrix Ball of their own), and the infeasible ones (SPMD across poly's differing groups; decode cores with 8
banks), with their reasons; "auto" (the model's pick of SPMD and phase).

Then one graph (tiny llama prefill) in ranges of ops on poly's groups: SPMD on the 3 prefill
cores, "layers" and "pipeline" cut before op 10 or 42 with the hand-off through shared memory
or DRAM, "auto", for one request and for --requests requests (request k's tokens rotated by
k), with the shared memory the emulator saw against the model's, and the tensors between
ranges (the candidate's notes). Last, the GEMM recipe (x[32, 64] quantized on the first range,
its product and dequantize on the second), a DMA-bound case, on poly's groups and on blocks
of goban's 4 identical cores, with the shared-memory channel conflicts the emulator counted;
and the DMA-bound grid on poly: the GEMM at m = 32, 64, 128, "layers" (1 and --requests
requests) and "pipeline", with the shared or the DRAM hand-off; and tiny llama prefill in three
ranges (cut before ops 10 and 42) on poly's 5 cores in three groups (2 | 2 | 1), both boundaries
handed off at once in a pipeline, and with 3 shared banks, where the second does not fit;
and the MLP recipe (batch 32) cut before fc2 and fc3 on the same three groups with 64, 4, 3
and 1 shared banks, each hand-off holding the banks its picked A tiles take
(`handoff_banks`): with 4, fc3's A fits below fc2's 2 banks (a 16-row worst case for fc2
would hold 4 and send fc3 through DRAM); and tiny llama prefill cut before q (op 10) with one
shared copy of the weights against a copy per worker, on 64, 5, 4, 3 and 2 shared banks: q, k and v
all take their A from shared memory where they fit (`handoff_banks`, the last product's A at the
top, so each product's B tiles stay clear of the A of the products after it); and tiny llama
prefill pipelined (--requests requests) cut before op 58 or 10 with one shared copy of the
weights against a copy per worker, on 64, 28, 27, 8, 4, 2 and 1 shared banks, each range's weights
in a region of the shared banks of its own (`range_regions`), and its two stages at once on
poly's groups ("phase") on 66, 64, 8 and 1. `--only` runs one of the last five sections alone.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dse.analytical.placed import estimate_placed  # noqa: E402
from dse.chips import load_chip  # noqa: E402
from dse.mapping import Candidate, Mapping  # noqa: E402
from dse.mapping.candidate import mapping_from_dict  # noqa: E402
from dse.analytical.placed import estimate_layers  # noqa: E402
from dse.numerics.run import StageWork, emulate_graph, emulate_placed, prepare_recipe  # noqa: E402

LLAMA = dict(vocab=64, dim=32, layers=1, heads=2, kv_heads=1)


def work(role: str, recipe: str, params: dict) -> StageWork:
    prep = prepare_recipe(recipe, params)
    assert not prep.failed, prep.failed
    return StageWork(role, prep.graph, prep.inputs, prep.expected, prep.tolerance, prep.reference_kind,
                     prep.graph.trace(*prep.inputs))


def stage(role: str, recipe: str, **params) -> StageWork:
    return work(role, recipe, {**LLAMA, **params})


def gemm_work(m: int) -> StageWork:
    return work("gemm", "gemm", dict(m=m, n=64, k=64))


def emulated_and_modelled(work: StageWork, cand: Candidate):
    """`cand` on `work`'s graph: the emulator's report, the candidate it ran (auto's pick),
    and the model's totals row and notes for that candidate."""
    rep = emulate_graph(work.graph, cand, work.inputs, work.expected, work.tolerance, work.reference_kind,
                        reference=work.reference)
    picked = Candidate(cand.chip, mapping_from_dict(rep.mapping)) if cand.mapping.placement == "auto" else cand
    totals, _, notes = estimate_layers(work.graph, [picked])
    return rep, picked, totals.iloc[0], notes[0]


def figures(rep, t) -> str:
    """Emulated cycles, the model's, its error, DMA bytes (in + out, every core) and the model's."""
    c = rep.counters
    dma = sum(c["dma_bytes_in"]) + sum(c["dma_bytes_out"])
    return (f"{rep.cycles:10d} {t['latency_cycles']:10.0f} {t['latency_cycles'] / rep.cycles - 1:+7.2%} {dma:9d} "
            f"{t['dma_bytes']:9.0f}")


def shared(rep, t) -> str:
    """Shared-memory bytes the emulator saw and the model's."""
    return f"{rep.counters['shared_bytes_used']:8d} {t['shared_sram_bytes']:8.0f}"


def bit_exact(rep) -> str:
    return "PASS bit-exact" if rep.verdict.passed and rep.verdict.integer_bit_exact else "FAIL"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--past", type=int, default=15)
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--only", choices=("gemm-grid", "three-ranges", "mlp-banks", "qkv-shared-weights",
                                       "pipeline-shared-weights"), help="one section alone")
    args = ap.parse_args()
    if args.only == "gemm-grid":
        gemm_grid(args.requests)
        return
    if args.only == "three-ranges":
        three_ranges(args.seq, args.requests)
        return
    if args.only == "mlp-banks":
        mlp_banks()
        return
    if args.only == "qkv-shared-weights":
        qkv_shared_weights(args.seq)
        return
    if args.only == "pipeline-shared-weights":
        pipeline_shared_weights(args.seq, args.past, args.requests)
        return
    pre = stage("prefill", "llama_prefill", seq=args.seq)
    dec = stage("decode", "llama_decode", past=args.past)
    poly = load_chip("poly")
    same = load_chip("poly", {"cores.groups": []})

    def decode_group(**change):
        decode = {**poly.cores.groups[1].model_dump(mode="json"), **change}
        return load_chip("poly", {"cores.groups": [poly.cores.groups[0].model_dump(mode="json"),
                                                   {k: v for k, v in decode.items() if v is not None}]})

    narrow = decode_group(banks={"count": 8})
    wide = decode_group(banks={"count": 16})
    slow = decode_group(op_cycles_per_element=None)
    small_array = decode_group(ball_configs=[{"kind": "matrix", "read_ports": 2, "write_ports": 4, "array_rows": 8,
                                              "array_cols": 8,
                                              "latency": {"ws": "M*N*K/4 + M*N", "os": "M*N*K/4 + M*N/2"}}])
    split = "cols"
    rows = [
        ("phase: prefill 3 + decode 2 (poly)", [pre, dec], Candidate(poly, Mapping(split=split, placement="phase"))),
        ("spmd 5 identical cores, one after another", [pre, dec], Candidate(same, Mapping(split=split, workers=5))),
        ("spmd 4 identical cores, one after another", [pre, dec], Candidate(same, Mapping(split=split, workers=4))),
        ("spmd poly's 3 prefill cores, one after another", [pre, dec], Candidate(poly, Mapping(split=split, workers=3))),
        ("prefill alone, poly's 3 prefill cores", [pre], Candidate(poly, Mapping(split=split, workers=3))),
        ("decode alone, poly's 3 prefill cores", [dec], Candidate(poly, Mapping(split=split, workers=3))),
        ("phase: decode alone on poly's 2 decode cores", [dec], Candidate(poly, Mapping(split=split, placement="phase"))),
        ("phase, groups on two tiles (tile_size 3)", [pre, dec],
         Candidate(load_chip("poly", {"cores.tile_size": 3}), Mapping(split=split, placement="phase"))),
        ("phase, decode cores with 16 banks", [pre, dec], Candidate(wide, Mapping(split=split, placement="phase"))),
        ("phase, decode cores at the chip's 4 cycles", [pre, dec], Candidate(slow, Mapping(split=split, placement="phase"))),
        ("phase, decode cores with an 8x8 matrix Ball", [pre, dec],
         Candidate(small_array, Mapping(split=split, placement="phase"))),
        ("spmd 5 workers across poly's groups", [pre, dec], Candidate(poly, Mapping(split=split, workers=5))),
        ("phase with 8-bank decode cores", [pre, dec], Candidate(narrow, Mapping(split=split, placement="phase"))),
        ("auto (SPMD on 3 workers or phase)", [pre, dec], Candidate(poly, Mapping(split=split, workers=3,
                                                                                placement="auto"))),
    ]
    print(f"tiny llama (vocab 64, dim 32, layers 1, heads 2, kv_heads 1), prefill seq {args.seq}, "
          f"decode past {args.past}; split {split}")
    print(f"{'candidate':50s} {'emu cycles':>10s} {'model':>10s} {'err':>7s} {'DMA bytes':>9s} {'model DMA':>9s} "
          f"{'peak SRAM':>9s} {'asked SRAM':>10s}  numerics")
    for label, stages, cand in rows:
        totals, _ = estimate_placed([(s.role, s.graph) for s in stages], [cand])
        t = totals.iloc[0]
        rep = emulate_placed(stages, cand)
        if not rep.feasible or not t["feasible"]:
            print(f"{label:50s} infeasible; emulator: {rep.reason or '(feasible)'}")
            print(f"{'':50s} model: {t['reason'] or '(feasible)'}")
            continue
        dma = sum(rep.counters["dma_bytes_in"]) + sum(rep.counters["dma_bytes_out"])
        err = t["latency_cycles"] / rep.cycles - 1
        print(f"{label:50s} {rep.cycles:10d} {t['latency_cycles']:10.0f} {err:+7.2%} {dma:9d} {t['dma_bytes']:9.0f} "
              f"{rep.peak_sram_bytes:9d} {t['private_sram_bytes']:10.0f}  {rep.verdict.summary()[:40]}")
    ranges(pre, poly, same, split, args.requests)
    gemm_handoff(args.requests)
    gemm_grid(args.requests)
    three_ranges(args.seq, args.requests)
    mlp_banks()
    qkv_shared_weights(args.seq)


def ranges(pre: StageWork, poly, same, split: str, requests: int) -> None:
    """One graph in ranges of ops on poly's groups (layers, pipeline, auto) against SPMD."""
    print(f"\ntiny llama prefill (seq as above) in ranges of ops on poly's groups (prefill 3 cores | decode 2); "
          f"split {split}")
    print(f"{'candidate':44s} {'req':>3s} {'emu cycles':>10s} {'model':>10s} {'err':>7s} {'DMA bytes':>9s} "
          f"{'model DMA':>9s} {'peak SRAM':>9s} {'shared':>8s} {'model sh':>8s}  numerics")
    for n in (1, requests):
        def m(**knobs) -> Mapping:
            return Mapping(split=split, requests=n if n > 1 else None, **knobs)

        rows = [("spmd, poly's 3 prefill cores", poly, m(workers=3)),
                ("spmd, 5 identical 16-bank cores", same, m(workers=5))]
        for cut in (10, 42):
            for kind in ("layers", "pipeline") if n > 1 else ("layers",):
                rows += [(f"{kind}, cut {cut}, shared hand-off", poly, m(placement=kind, cuts=(cut,))),
                         (f"{kind}, cut {cut}, DRAM hand-off", poly, m(placement=kind, cuts=(cut,), handoff="dram"))]
        rows += [("auto", poly, m(workers=3, placement="auto"))]
        for label, chip, mapping in rows:
            rep, picked, t, notes = emulated_and_modelled(pre, Candidate(chip, mapping))
            if not rep.feasible or not t["feasible"]:
                print(f"{label:44s} {n:3d} infeasible; emulator: {rep.reason}; model: {t['reason']}")
                continue
            if mapping.placement == "auto":
                label += f" -> {picked.mapping.placement or 'spmd'} {list(picked.mapping.cuts or [])}"
            print(f"{label:44s} {n:3d} {figures(rep, t)} {rep.peak_sram_bytes:9d} {shared(rep, t)}  "
                  f"{rep.verdict.summary()[:30]}")
            if n == 1 and "shared hand-off" in label:
                print(f"{'':44s}     {notes[:150]}")


def gemm_handoff(requests: int) -> None:
    """The GEMM recipe cut before its product: the hand-off's bytes, and the model where DMA dominates."""
    gemm = gemm_work(32)
    print("\ngemm m=32 n=64 k=64 cut before its product (op 1)")
    print(f"{'candidate':44s} {'req':>3s} {'emu cycles':>10s} {'model':>10s} {'err':>7s} {'DMA bytes':>9s} "
          f"{'model DMA':>9s} {'shared':>8s} {'model sh':>8s} {'sh conf':>7s}")
    for chip_name, workers, split in (("poly", 3, "cols"), ("goban", 4, "rows")):
        chip = load_chip(chip_name)
        for n in (1, requests):
            req = n if n > 1 else None
            rows = [("spmd", Mapping(split=split, workers=workers, requests=req)),
                    ("layers, shared hand-off", Mapping(split=split, workers=workers, placement="layers", cuts=(1,),
                                                        requests=req)),
                    ("layers, DRAM hand-off", Mapping(split=split, workers=workers, placement="layers", cuts=(1,),
                                                      requests=req, handoff="dram"))]
            if n > 1:
                rows += [(f"pipeline, {h} hand-off", Mapping(split=split, workers=workers, placement="pipeline", cuts=(1,),
                                                             requests=req, handoff=None if h == "shared" else h))
                         for h in ("shared", "dram")]
            for label, mapping in rows:
                rep, _, t, _ = emulated_and_modelled(gemm, Candidate(chip, mapping))
                print(f"{chip_name + ' ' + label:44s} {n:3d} {figures(rep, t)} {shared(rep, t)} "
                      f"{sum(rep.counters['shared_channel_conflicts']):7d}  {'PASS' if rep.verdict.passed else 'FAIL'}")


def gemm_grid(requests: int) -> None:
    """The GEMM (n = k = 64) cut before its product on poly's groups, where DMA dominates: the
    pipeline's ranges start their transfers at once on the system bus (`bus_head_delays`)."""
    poly = load_chip("poly")
    print(f"\ngemm n=64 k=64 on poly, cut before its product (op 1), split cols; {requests} requests where > 1")
    print(f"{'m':>4s} {'candidate':28s} {'req':>3s} {'emu cycles':>10s} {'model':>10s} {'err':>7s} {'DMA bytes':>9s} "
          f"{'model DMA':>9s} {'shared':>8s} {'model sh':>8s}  numerics")
    for m in (32, 64, 128):
        gemm = gemm_work(m)
        for kind, n in (("layers", 1), ("layers", requests), ("pipeline", requests)):
            for handoff in ("shared", "dram"):
                cand = Candidate(poly, Mapping(split="cols", placement=kind, cuts=(1,), requests=n if n > 1 else None,
                                               handoff="dram" if handoff == "dram" else None))
                rep, _, t, _ = emulated_and_modelled(gemm, cand)
                print(f"{m:4d} {kind + ', ' + handoff + ' hand-off':28s} {n:3d} {figures(rep, t)} {shared(rep, t)}  "
                      f"{bit_exact(rep)}")


def three_ranges(seq: int, requests: int) -> None:
    """Tiny llama prefill in three ranges on three core groups: every boundary's hand-off."""
    pre = stage("prefill", "llama_prefill", seq=seq)
    groups = [{"role": "a", "count": 2}, {"role": "b", "count": 2, "op_cycles_per_element": 2.0},
              {"role": "c", "count": 1, "banks": {"count": 12}}]
    print(f"\ntiny llama prefill (seq {seq}) cut before ops 10 and 42 on poly's cores in groups 2 | 2 | 1; split cols")
    print(f"{'candidate':44s} {'req':>3s} {'emu cycles':>10s} {'model':>10s} {'err':>7s} {'DMA bytes':>9s} "
          f"{'model DMA':>9s} {'shared':>8s} {'model sh':>8s}  numerics")
    for banks in (64, 3):
        chip = load_chip("poly", {"cores.groups": groups, "shared_memory.banks": banks})
        for kind, n in (("layers", 1), ("layers", requests), ("pipeline", requests)):
            for handoff in ("shared", "dram"):
                cand = Candidate(chip, Mapping(split="cols", placement=kind, cuts=(10, 42), requests=n if n > 1 else None,
                                               handoff="dram" if handoff == "dram" else None))
                rep, _, t, notes = emulated_and_modelled(pre, cand)
                print(f"{kind + ', ' + handoff + f' hand-off, {banks} shared banks':44s} {n:3d} {figures(rep, t)} "
                      f"{shared(rep, t)}  {bit_exact(rep)}")
                if handoff == "shared" and kind == "pipeline":
                    said = [x for x in notes.split("; ") if "via shared" in x or "do not fit" in x]
                    print(f"{'':44s}     {'; '.join(said)}")


def mlp_banks(requests: int = 2) -> None:
    """The MLP cut before fc2 and fc3 (ops 4 and 7) on three groups: each hand-off's banks."""
    mlp = work("mlp", "mlp", dict(batch=32))
    groups = [{"role": "a", "count": 2}, {"role": "b", "count": 2, "op_cycles_per_element": 2.0},
              {"role": "c", "count": 1, "banks": {"count": 12}}]
    print("\nmlp batch 32 cut before fc2 and fc3 (ops 4 and 7) on poly's cores in groups 2 | 2 | 1; split cols")
    print(f"{'candidate':44s} {'req':>3s} {'emu cycles':>10s} {'model':>10s} {'err':>7s} {'DMA bytes':>9s} "
          f"{'model DMA':>9s} {'shared':>8s} {'model sh':>8s}  numerics")
    for banks in (64, 4, 3, 1):
        chip = load_chip("poly", {"cores.groups": groups, "shared_memory.banks": banks})
        for kind, n in (("layers", 1), ("pipeline", requests)):
            for handoff in ("shared", "dram"):
                cand = Candidate(chip, Mapping(split="cols", placement=kind, cuts=(4, 7), requests=n if n > 1 else None,
                                               handoff="dram" if handoff == "dram" else None))
                rep, _, t, notes = emulated_and_modelled(mlp, cand)
                print(f"{kind + ', ' + handoff + f' hand-off, {banks} shared banks':44s} {n:3d} {figures(rep, t)} "
                      f"{shared(rep, t)}  {bit_exact(rep)}")
                if handoff == "shared" and kind == "pipeline":
                    print(f"{'':44s}     {'; '.join(x[:110] for x in notes.split('; '))}")


def qkv_shared_weights(seq: int) -> None:
    """Tiny llama prefill cut before q (op 10) on poly's groups: the q, k, v hand-off with one
    shared copy of the weights against a copy per worker, by shared banks."""
    pre = stage("prefill", "llama_prefill", seq=seq)
    print(f"\ntiny llama prefill (seq {seq}) layers cut before q (op 10) on poly's groups; split cols")
    print(f"{'candidate':44s} {'emu cycles':>10s} {'model':>10s} {'err':>7s} {'DMA bytes':>9s} "
          f"{'model DMA':>9s} {'peak SRAM':>9s} {'shared':>8s} {'model sh':>8s}  numerics")
    for banks in (64, 5, 4, 3, 2):
        chip = load_chip("poly", {"shared_memory.banks": banks})
        for weights in ("per_worker", "shared"):
            cand = Candidate(chip, Mapping(split="cols", placement="layers", cuts=(10,), weights=weights))
            rep, _, t, notes = emulated_and_modelled(pre, cand)
            print(f"{f'weights {weights}, {banks} shared banks':44s} {figures(rep, t)} {rep.peak_sram_bytes:9d} "
                  f"{shared(rep, t)}  {bit_exact(rep)}")
            print(f"{'':44s} {notes.split('; ')[0][:110]}")


def pipeline_shared_weights(seq: int, past: int, requests: int) -> None:
    """Tiny llama prefill pipelined on poly's groups, and prefill + decode at once ("phase"),
    with one shared copy of the weights against a copy per worker, by shared banks: each
    part's weights in a region of the tile's shared banks of its own (`range_regions`,
    `stage_regions`), the regions (bank counts, the plan's) beside the figures."""
    import numpy as np

    from dse.mapping import CandidateArrays
    from dse.plan.graph_plan import plan_graph
    from dse.plan.placement import handoff_banks, handoffs, range_candidate, range_regions, schedule

    pre = stage("prefill", "llama_prefill", seq=seq)
    dec = stage("decode", "llama_decode", past=past)

    def regions(cand) -> str:
        plans = plan_graph(pre.graph, cand.mapping.fusion, cand.mapping.channels_last)
        lay, _ = schedule(cand.chip, cand.mapping, len(plans))
        params = [CandidateArrays.from_candidates([range_candidate(p, cand.mapping)]) for p in lay.places]
        held = handoff_banks(plans, lay.ranges, handoffs(plans, lay.ranges), lay.handoff_sets, lay.overlap, params)
        (r,) = range_regions(plans, lay.ranges, held, lay.handoff_sets, lay.overlap, params,
                             [[p.role for p in lay.places]], [cand.chip.name])
        return f"B {'+'.join(map(str, r.banks))} A {sum(held[0].banks.values())}"

    print(f"\ntiny llama prefill (seq {seq}) x{requests} pipelined on poly's groups; split cols; regions in banks")
    print(f"{'candidate':40s} {'regions':>10s} {'emu cycles':>10s} {'model':>10s} {'err':>7s} {'DMA bytes':>9s} "
          f"{'model DMA':>9s} {'peak SRAM':>9s} {'shared':>8s} {'model sh':>8s}  numerics")
    for cut in (58, 10):
        for banks in (64, 28, 27, 8, 4, 2, 1):
            chip = load_chip("poly", {"shared_memory.banks": banks})
            for weights in ("per_worker", "shared"):
                cand = Candidate(chip, Mapping(split="cols", placement="pipeline", cuts=(cut,), requests=requests,
                                               weights=weights))
                rep, _, t, _ = emulated_and_modelled(pre, cand)
                name = f"cut {cut}, {weights}, {banks} banks"
                if not rep.feasible:
                    print(f"{name:40s} infeasible (model: {'same reason' if rep.reason == t['reason'] else t['reason']})"
                          f": {rep.reason[:120]}")
                    continue
                print(f"{name:40s} {regions(cand):>10s} {figures(rep, t)} {rep.peak_sram_bytes:9d} {shared(rep, t)}  "
                      f"{bit_exact(rep)}")
    print(f"\ntiny llama prefill (seq {seq}) + decode (past {past}) at once (placement phase) on poly's groups")
    print(f"{'candidate':40s} {'emu cycles':>10s} {'model':>10s} {'err':>7s} {'DMA bytes':>9s} "
          f"{'model DMA':>9s} {'peak SRAM':>9s} {'shared':>8s} {'model sh':>8s}  numerics")
    pairs = [(w.role, w.graph) for w in (pre, dec)]
    for banks in (66, 64, 8, 1):
        chip = load_chip("poly", {"shared_memory.banks": banks})
        for weights in ("per_worker", "shared"):
            cand = Candidate(chip, Mapping(split="cols", placement="phase", weights=weights))
            rep = emulate_placed([pre, dec], cand)
            t = estimate_placed(pairs, [cand])[0].iloc[0]
            name = f"phase, {weights}, {banks} banks"
            if not rep.feasible:
                print(f"{name:40s} infeasible (model: {'same reason' if rep.reason == t['reason'] else t['reason']})"
                      f": {rep.reason[:120]}")
                continue
            sh = np.float64(t["shared_sram_bytes"])
            print(f"{name:40s} {figures(rep, t)} {rep.peak_sram_bytes:9d} {rep.counters['shared_bytes_used']:8d} "
                  f"{sh:8.0f}  {bit_exact(rep)}")


if __name__ == "__main__":
    main()
