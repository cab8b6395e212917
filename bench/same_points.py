"""Programs, DRAM images, per-op lowering records and model figures (overlapped and serial
timing) of every recipe of the
model's calibration set on toy, pebble and goban under 8 mappings (216 points): one sha256
per point, written to a JSON file. A refactor of the lowering or the model keeps them all:

    PYTHONPATH=<old tree> .venv/bin/python bench/same_points.py /tmp/old.json
    PYTHONPATH=<new tree> .venv/bin/python bench/same_points.py /tmp/new.json
    .venv/bin/python bench/same_points.py --compare /tmp/old.json /tmp/new.json

With --emulate (after the output path) each lowered point is also run on the emulator and
its final DRAM image and cycles join the hash: a change to the emulator keeps them all.

With --results (after the output path) each point's hash leaves where things sit in DRAM
out: the model's figures but its DRAM footprint, and (emulated) the cycles, the counters
but the host's time, each graph output's bytes and the instruction count: a change to the
DRAM layout alone (a smaller constant, another order) keeps them all.
"""
import hashlib
import json
import sys

from dse.analytical import estimate, summarize
from dse.analytical.calibration import CALIBRATION_SET
from dse.chips import load_chip
from dse.mapping import Candidate, Mapping
from dse.lower import lower, Infeasible
from dse.numerics.run import prepare_recipe

if len(sys.argv) < 2 or sys.argv[1].startswith("-") and sys.argv[1] != "--compare":
    # an option as the output path wrote the points to a file named "--help"
    print(__doc__.strip())
    sys.exit(0 if sys.argv[1:2] in (["-h"], ["--help"]) else 2)
if sys.argv[1] == "--compare":
    old, new = (json.load(open(path)) for path in sys.argv[2:4])
    differ = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    print(f"{len(old)} points before, {len(new)} after, {len(differ)} differ" + "".join(f"\n  {k}" for k in differ))
    sys.exit(1 if differ else 0)
emulate = "--emulate" in sys.argv[2:]
results = "--results" in sys.argv[2:]
if emulate or results:
    import emulator
LAYOUT_FIGURES = ("dram_footprint_bytes", "workspace_bytes")  # where things sit in DRAM
out = {}
for name, params in CALIBRATION_SET.items():
    prep = prepare_recipe(name, params)
    graph = prep.graph
    for chip in ("toy", "pebble", "goban"):
        for m in (dict(workers=1), dict(workers=4), dict(workers=2, split="rows"), dict(workers=1, policy="framework"),
                  dict(workers=4, fusion="fuse"), dict(workers=2, channels_last=True), dict(workers=4, weights="shared"),
                  dict(workers=1, dataflow="os")):
            cand = Candidate(load_chip(chip), Mapping(**m))
            rows = [summarize(estimate(graph, [cand], timing=timing), [cand]).iloc[0].to_dict()
                    for timing in ("overlapped", "serial")]
            if results:
                rows = [{k: v for k, v in row.items() if k not in LAYOUT_FIGURES} for row in rows]
            h = hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode())
            try:
                low = lower(graph, cand, prep.inputs)
                if results:
                    res = emulator.run(low.program, cand.chip, low.image.copy(), in_place=True)
                    counted = [r for r in res.counters.rows() if r["scope"] != "host"]
                    h.update(json.dumps([res.cycles, low.program.n_instructions, counted], sort_keys=True,
                                        default=str).encode())
                    for output in graph.outputs:
                        h.update(low.read(res.dram, output).tobytes())
                    out[f"{name}/{chip}/{m}"] = h.hexdigest()[:16]
                    continue
                h.update(low.image.tobytes())
                for core in low.program.cores:
                    h.update(repr(core).encode())
                h.update(repr(low.ops).encode())
                if emulate:
                    res = emulator.run(low.program, cand.chip, low.image.copy(), in_place=True)
                    h.update(res.dram.tobytes())
                    h.update(str(res.cycles).encode())
            except Infeasible as e:
                h.update(str(e).encode())
            out[f"{name}/{chip}/{m}"] = h.hexdigest()[:16]
json.dump(out, open(sys.argv[1], "w"), indent=0)
print(len(out), "points")
