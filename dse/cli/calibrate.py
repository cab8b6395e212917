"""`dse calibrate --chip NAME|FILE`: fit the analytical model's constants to measured cycles.

By default the evidence is the emulator's overlapped cycles over the calibration set
(every shipped recipe at a small size, 1 and 4 workers where the chip has the cores, both
mapping policies); ``--evidence rtl_cycles --experiment NAME`` fits to imported RTL (or
FPGA) cycles of an experiment's candidates instead. The fit, with the model's error before
and after on every point, is stored as a calibration record; the model then uses the
newest calibration of that chip by default. ``dse calibrate --report [--chip ...]`` prints
the stored tables without running anything.
"""

from __future__ import annotations

import json
import sys
import time

from ..errors import InputError
from .common import add_db_argument, default_db, open_store


def _csv(text: str | None, field: str, allowed=None, cast=str) -> list:
    if not text:
        return []
    out = []
    for item in text.split(","):
        item = item.strip()
        try:
            value = cast(item)
        except ValueError:
            raise InputError("(command line)", field, item, "a comma-separated list of integers") from None
        if allowed is not None and value not in allowed:
            raise InputError("(command line)", field, item, ", ".join(map(str, allowed)))
        out.append(value)
    return out


def _print_table(cal: dict, out=None) -> None:
    out = out or sys.stdout  # looked up per call: a test may have swapped it
    b, a = cal["error_before"], cal["error_after"]
    print(f"calibration {cal['id']} of chip {cal['chip']} ({cal['source']}, {cal['model_version']}, "
          f"{cal['created_at']:%Y-%m-%d %H:%M} UTC)", file=out)
    print("constants: " + ", ".join(f"{k} {v:.4g}" for k, v in cal["constants"].items()), file=out)
    print("| point | measured cycles | model before | error before | model after | error after |", file=out)
    print("|---|---:|---:|---:|---:|---:|", file=out)
    for p in cal["points"]:
        m = p["measured"]
        print(f"| {p['label']} | {m:,.0f} | {p['before']:,.0f} | {100 * (p['before'] / m - 1):+.2f}% "
              f"| {p['after']:,.0f} | {100 * (p['after'] / m - 1):+.2f}% |", file=out)
    print(f"MAPE {b['mape']:.2f}% -> {a['mape']:.2f}%, max {b['max']:.2f}% -> {a['max']:.2f}% "
          f"over {a['points']} points", file=out)


def _evidence_points(store, experiment: str, kind: str, chip):
    """Points from imported evidence: each candidate of `experiment` on a chip of this
    name with a `kind` latency, paired with the model's features on the experiment's graph."""
    import tomllib

    from ..analytical.calibration import Point, features
    from ..frontend import run_pipeline
    from ..mapping import Candidate, mapping_from_dict
    from emulator.chip import chip_from_dict

    exp = store.experiment(experiment)
    table = store.metric_table(experiment, kind)
    if "latency_cycles" not in table.columns or table["latency_cycles"].notna().sum() == 0:
        raise InputError(experiment, "--evidence", kind,
                         f"an experiment with imported {kind} evidence (a latency_cycles figure per candidate)")
    spec = tomllib.loads(exp["spec_text"])
    workload = spec.get("workload", {})
    graph = run_pipeline(workload.get("recipe", exp["workload_recipe"]), workload.get("params", {})).graph
    points = []
    for row in table[table["latency_cycles"].notna()].itertuples():
        rec = store.candidate(int(row.candidate_id))
        cand = Candidate(chip_from_dict(rec["config"]), mapping_from_dict(rec["mapping"]))
        if cand.chip.name != chip.name:
            continue
        f = features(graph, [cand])[0]
        if f["feasible"]:
            points.append(Point(f"candidate {row.candidate_id}", float(row.latency_cycles), f["core"], f["ball"],
                                f["syncs"], f["default_sync"]))
    return points


def cmd_calibrate(args) -> int:
    from ..records.calibrations import calibrations

    if args.report:
        with open_store(args.db) as store:
            chip_name = None
            if args.chip:
                from ..chips import load_chip
                chip_name = load_chip(args.chip).name
            found = calibrations(store, chip_name)
            if not found:
                raise InputError(args.db, "--chip", args.chip or "(any)",
                                 "a chip with a stored calibration (run `dse calibrate --chip NAME` first)")
            newest = {}
            for cal in found:
                newest.setdefault(cal["chip"], cal)
            if args.json:
                print(json.dumps(list(newest.values()), indent=2, default=str))
                return 0
            for cal in newest.values():
                _print_table(cal)
                print()
            if len(newest) > 1:
                rows = [p for cal in newest.values() for p in cal["points"]]
                for key in ("before", "after"):
                    rel = [abs(p[key] / p["measured"] - 1) * 100 for p in rows]
                    print(f"all chips, {key}: MAPE {sum(rel) / len(rel):.2f}%, max {max(rel):.2f}% "
                          f"over {len(rel)} points")
        return 0

    if not args.chip:
        raise InputError("(command line)", "--chip", None, "a shipped chip name or a chip TOML path")
    from ..analytical import MODEL_VERSION
    from ..analytical.calibration import CALIBRATION_SET, POLICIES, calibration_points, fit
    from ..chips import chip_hash, load_chip
    from ..records import Store
    from ..records.calibrations import add_calibration
    import emulator

    chip = load_chip(args.chip)
    recipes = _csv(args.recipes, "--recipes", tuple(CALIBRATION_SET)) or list(CALIBRATION_SET)
    workers = _csv(args.workers, "--workers", cast=int) or [1, 4]
    policies = _csv(args.policies, "--policies", POLICIES) or list(POLICIES)
    if any(w < 1 for w in workers):
        raise InputError("(command line)", "--workers", args.workers, "positive worker counts")
    t0 = time.perf_counter()
    if args.evidence:
        if not args.experiment:
            raise InputError("(command line)", "--experiment", None, "the experiment whose imported evidence to fit")
        with open_store(args.db) as store:
            points = _evidence_points(store, args.experiment, args.evidence, chip)
        skipped = []
        source, emu_version = args.evidence, None
    else:
        def show(p):
            if not args.json:  # above the progress bar, when one is shown
                from tqdm import tqdm

                tqdm.write(f"  {p.label}: {p.measured:,.0f} cycles", file=sys.stderr)
        points, skipped = calibration_points(chip, recipes, workers, policies, progress=show)
        source, emu_version = "emulator_cycles", emulator.VERSION
    if not points:
        raise InputError(args.chip, "--chip", chip.name, "a chip on which at least one calibration point runs "
                         f"({'; '.join(skipped) or 'no evidence for this chip'})")
    result = fit(points)
    with Store(args.db or default_db()) as store:
        cal_id = add_calibration(store, chip=chip.name, chip_hash=chip_hash(chip), source=source,
                                 model_version=MODEL_VERSION, emulator_version=emu_version,
                                 constants=result.constants, error_before=result.before, error_after=result.after,
                                 points=result.points, command=" ".join(sys.argv))
        cal = calibrations(store, chip.name)[0]
        assert cal["id"] == cal_id
    if args.json:
        print(json.dumps({**cal, "skipped": skipped}, indent=2, default=str))
    else:
        _print_table(cal)
        for s in skipped:
            print(f"skipped: {s}")
        print(f"stored as calibration {cal_id} in {args.db or default_db()} ({time.perf_counter() - t0:.1f} s)")
    return 0


def register(sub) -> None:
    p = sub.add_parser("calibrate", help="fit the analytical model's constants to emulator (or RTL) cycles")
    p.add_argument("--chip", help="shipped chip name or TOML path")
    p.add_argument("--recipes", help="comma-separated recipes of the calibration set (default: all)")
    p.add_argument("--workers", help="comma-separated worker counts (default 1,4; counts above the chip's "
                                     "cores are skipped)")
    p.add_argument("--policies", help="comma-separated mapping policies (default framework,search)")
    p.add_argument("--evidence", choices=("rtl_cycles", "fpga_cycles"),
                   help="fit to imported evidence of this kind instead of running the emulator")
    p.add_argument("--experiment", help="the experiment whose imported evidence --evidence fits")
    p.add_argument("--report", action="store_true", help="print the newest stored calibration(s), run nothing")
    p.add_argument("--json", action="store_true", help="print the calibration record as JSON")
    add_db_argument(p)
    p.set_defaults(func=cmd_calibrate)
