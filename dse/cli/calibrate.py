"""`dse calibrate --chip NAME|FILE`: fit the analytical model's constants to measured cycles.

By default the evidence is the emulator's overlapped cycles over the calibration set
(every shipped recipe at a small size, 1 and 4 workers where the chip has the cores, both
mapping policies); ``--evidence rtl_cycles --experiment NAME`` fits to imported RTL (or
FPGA) cycles of an experiment's candidates instead. The fit, with the model's error before
and after on every point, is stored as a calibration record; the model then uses the
newest calibration of that chip by default. ``--evidence synth_area|power --experiment
NAME`` fits instead one area (synth_area) or energy (power) factor per component to a
synthesis or power report imported by component (`dse.ppa.calibration`); sweeps use the
newest of each. ``dse calibrate --report [--chip ...]`` prints the stored tables without
running anything.
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
    from ..records.schema import PPA_CALIBRATION_SOURCES

    out = out or sys.stdout  # looked up per call: a test may have swapped it
    if cal["source"] in PPA_CALIBRATION_SOURCES:
        return _print_ppa_table(cal, out)
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


def _print_ppa_table(cal: dict, out) -> None:
    from ..ppa.calibration import PPA_EVIDENCE

    factor, unit = PPA_EVIDENCE[cal["source"]].factor, PPA_EVIDENCE[cal["source"]].unit
    b, a = cal["error_before"], cal["error_after"]
    print(f"calibration {cal['id']} of chip {cal['chip']} ({cal['source']}: {factor} factors, {cal['model_version']}, "
          f"{cal['created_at']:%Y-%m-%d %H:%M} UTC)", file=out)
    fitted = {p["component"] for p in cal["points"]}
    shown = [f"{k} {v:.4g}" for k, v in cal["constants"].items() if k in fitted or v != 1.0]
    print(f"{factor} factors: " + (", ".join(shown) or "none fitted") + " (every other component 1)", file=out)
    print(f"| point | measured {unit} | model before | error before | model after | error after |", file=out)
    print("|---|---:|---:|---:|---:|---:|", file=out)
    for p in cal["points"]:
        m = p["measured"]
        print(f"| {p['label']} | {m:.4g} | {p['before']:.4g} | {100 * (p['before'] / m - 1):+.2f}% "
              f"| {p['after']:.4g} | {100 * (p['after'] / m - 1):+.2f}% |", file=out)
    print(f"MAPE {b['mape']:.2f}% -> {a['mape']:.2f}%, max {b['max']:.2f}% -> {a['max']:.2f}% "
          f"over {a['points']} points", file=out)


def _family(source: str) -> str:
    """Calibrations a report shows the newest of: the cycles', and each PPA source's."""
    from ..records.schema import PPA_CALIBRATION_SOURCES

    return source if source in PPA_CALIBRATION_SOURCES else "cycles"


def _ppa_points(store, experiment: str, kind: str, chip):
    """Points from imported component figures: per candidate of `experiment` on a chip of
    this name with `kind` figures (`dse evidence import --kind synth_area|power`), each
    component's measured figure paired with the uncalibrated model's (the analytical
    stage's recorded figure divided by the PPA calibration factor its run's model_version
    names, if any). Returns the points and what was left out (why)."""
    from ..ppa.calibration import PPA_EVIDENCE, PpaPoint, modelled_power_mw
    from ..records.calibrations import ppa_factors, ppa_version_ids
    from emulator.chip import chip_from_dict

    evidence = PPA_EVIDENCE[kind]
    factor, metric = evidence.factor, evidence.metric
    store.experiment(experiment)  # an unknown experiment: bad input, with the known ones
    measured = store.metric_table(experiment, kind, scope="component")
    if metric not in measured.columns or measured[metric].notna().sum() == 0:
        raise InputError(experiment, "--evidence", kind,
                         f"an experiment with imported {kind} evidence (figures by component: "
                         f"`dse evidence import --kind {kind} TABLE --candidate ID`)")
    model = store.metric_table(experiment, "analytical", scope="component")
    if evidence.modelled not in model.columns:  # no candidate has figures by component
        model[evidence.modelled] = float("nan")
    model = model[model[evidence.modelled].notna()].set_index(["candidate_id", "scope_key"])
    modelled_candidates = set(model.index.get_level_values(0))
    totals = store.metric_table(experiment, "analytical").set_index("candidate_id")
    priors: dict[str, dict | None] = {}  # model_version -> the factors its figures carry (None: not known)
    points, left_out = [], []
    for cid, rows in measured[measured[metric].notna()].groupby("candidate_id", sort=True):
        cid = int(cid)
        rec = store.candidate(cid)
        cand_chip = chip_from_dict(rec["config"])
        if cand_chip.name != chip.name:
            left_out.append(f"candidate {cid}: chip {cand_chip.name}, not {chip.name}")
            continue
        if cid not in modelled_candidates:
            left_out.append(f"candidate {cid}: no analytical figures by component (status "
                            f"{totals.loc[cid, 'status'] if cid in totals.index else 'unknown'})")
            continue
        mine = model.loc[cid]
        version = mine["model_version"].iloc[0]
        if version not in priors:
            ids = ppa_version_ids(version)
            records = store.calibrations(ids=ids) if ids else []
            priors[version] = (ppa_factors([r for r in records if r["chip"] == chip.name])
                               if len(records) == len(ids) else None)
        prior = priors[version]
        if prior is None:
            left_out.append(f"candidate {cid}: its figures carry a PPA calibration no longer in the store ({version})")
            continue
        latency = float("nan")
        if factor == "energy":
            run = mine["metric_run_id"].iloc[0]
            if cid not in totals.index or totals.loc[cid, "metric_run_id"] != run:
                left_out.append(f"candidate {cid}: its latency is not of the run its figures by component are of")
                continue
            latency = float(totals.loc[cid, "latency_cycles"])
        for row in rows.itertuples():
            component = row.scope_key
            recorded = mine[evidence.modelled].get(component)
            if recorded is None or not recorded > 0:
                left_out.append(f"candidate {cid} {component}: the model has no {factor} figure for it")
                continue
            uncalibrated = float(recorded) / prior.get(component, {}).get(factor, 1.0)
            if factor == "energy":
                uncalibrated = modelled_power_mw(uncalibrated, latency, cand_chip.clock_mhz)
            points.append(PpaPoint(cid, component, float(getattr(row, metric)), uncalibrated))
    return points, left_out


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
    if args.report:
        with open_store(args.db) as store:
            chip_name = None
            if args.chip:
                from ..chips import load_chip
                chip_name = load_chip(args.chip).name
            found = store.calibrations(chip_name)
            if not found:
                raise InputError(args.db, "--chip", args.chip or "(any)",
                                 "a chip with a stored calibration (run `dse calibrate --chip NAME` first)")
            newest = {}  # per chip, the newest cycles calibration and the newest of each PPA source
            for cal in found:
                newest.setdefault((cal["chip"], _family(cal["source"])), cal)
            if args.json:
                print(json.dumps(list(newest.values()), indent=2, default=str))
                return 0
            for cal in newest.values():
                _print_table(cal)
                print()
            cycles = [cal for cal in newest.values() if _family(cal["source"]) == "cycles"]
            if len(cycles) > 1:
                rows = [p for cal in cycles for p in cal["points"]]
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
    import emulator

    chip = load_chip(args.chip)
    recipes = _csv(args.recipes, "--recipes", tuple(CALIBRATION_SET)) or list(CALIBRATION_SET)
    workers = _csv(args.workers, "--workers", cast=int) or [1, 4]
    policies = _csv(args.policies, "--policies", POLICIES) or list(POLICIES)
    if any(w < 1 for w in workers):
        raise InputError("(command line)", "--workers", args.workers, "positive worker counts")
    t0 = time.perf_counter()
    from ..records.schema import PPA_CALIBRATION_SOURCES

    if args.evidence in PPA_CALIBRATION_SOURCES:
        return _calibrate_ppa(args, chip, t0)
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
        cal_id = store.add_calibration(chip=chip.name, chip_hash=chip_hash(chip), source=source,
                                       model_version=MODEL_VERSION, emulator_version=emu_version,
                                       constants=result.constants, error_before=result.before,
                                       error_after=result.after, points=result.points, command=" ".join(sys.argv))
        cal = store.calibrations(chip.name)[0]
        assert cal["id"] == cal_id
    if args.json:
        print(json.dumps({**cal, "skipped": skipped}, indent=2, default=str))
    else:
        _print_table(cal)
        for s in skipped:
            print(f"skipped: {s}")
        print(f"stored as calibration {cal_id} in {args.db or default_db()} ({time.perf_counter() - t0:.1f} s)")
    return 0


def _calibrate_ppa(args, chip, t0: float) -> int:
    """`dse calibrate --evidence synth_area|power`: a factor per component, stored."""
    from ..analytical import MODEL_VERSION
    from ..chips import chip_hash
    from ..ppa.calibration import fit_factors
    from ..records import Store

    if not args.experiment:
        raise InputError("(command line)", "--experiment", None, "the experiment whose imported evidence to fit")
    with open_store(args.db) as store:
        points, left_out = _ppa_points(store, args.experiment, args.evidence, chip)
    if not points:
        raise InputError(args.experiment, "--chip", chip.name, "a chip some of whose candidates in the experiment have "
                         f"both imported {args.evidence} figures and the model's ({'; '.join(left_out)})")
    result = fit_factors(points)
    with Store(args.db or default_db()) as store:
        cal_id = store.add_calibration(chip=chip.name, chip_hash=chip_hash(chip), source=args.evidence,
                                       model_version=MODEL_VERSION, emulator_version=None, constants=result.constants,
                                       error_before=result.before, error_after=result.after, points=result.points,
                                       command=" ".join(sys.argv))
        (cal,) = store.calibrations(ids=[cal_id])
    if args.json:
        print(json.dumps({**cal, "skipped": left_out}, indent=2, default=str))
    else:
        _print_table(cal)
        for s in left_out:
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
    p.add_argument("--evidence", choices=("rtl_cycles", "fpga_cycles", "synth_area", "power"),
                   help="fit to imported evidence of this kind instead of running the emulator: cycles "
                        "(the model's constants), or synth_area / power by component (an area / energy "
                        "factor per component)")
    p.add_argument("--experiment", help="the experiment whose imported evidence --evidence fits")
    p.add_argument("--report", action="store_true", help="print the newest stored calibration(s), run nothing")
    p.add_argument("--json", action="store_true", help="print the calibration record as JSON")
    add_db_argument(p)
    p.set_defaults(func=cmd_calibrate)
