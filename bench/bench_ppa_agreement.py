"""The model's energy and DRAM footprint against the emulator's, on the calibration set and
on every shipped spec that runs the emulator.

    .venv/bin/python bench/bench_ppa_agreement.py [--chip goban] [--specs] [--spec NAME ...]

The calibration set (`dse.ppa.agreement.agreement_points`): per point the model's and the
emulator's cycles, energy and energy without leakage (the actions alone), and the DRAM
footprint. With `--specs` (or `--spec NAME`), each shipped spec with an emulator stage is
swept into a fresh SQLite store and its candidates' analytical and emulator figures
compared: the largest energy error and whether every footprint is equal.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dse.chips import load_chip  # noqa: E402
from dse.ppa.agreement import agreement_points, relative_error  # noqa: E402


def calibration_set(chip_name: str) -> None:
    rows, skipped = agreement_points(load_chip(chip_name))
    print("| point | cycles | energy | actions alone | footprint |")
    print("|---|---:|---:|---:|---|")
    for r in rows:
        dynamic = relative_error(r["model_energy_uj"] - r["model_leakage_uj"],
                                 r["emulator_energy_uj"] - r["emulator_leakage_uj"])
        print(f"| {r['label']} | {100 * relative_error(r['model_cycles'], r['emulator_cycles']):+.2f}% "
              f"| {100 * relative_error(r['model_energy_uj'], r['emulator_energy_uj']):+.2f}% "
              f"| {100 * dynamic:+.2f}% | {'equal' if r['model_footprint'] == r['emulator_footprint'] else 'DIFFERS'} |")
    worst = max(abs(relative_error(r["model_energy_uj"], r["emulator_energy_uj"])) for r in rows)
    print(f"{len(rows)} points, largest energy error {100 * worst:.2f}%; not made: {skipped or 'none'}")


def shipped_specs(names: list[str]) -> None:
    from dse.records import Store
    from dse.runner import run_sweep

    for path in sorted((REPO / "experiments").glob("*.toml")):
        stages = tomllib.loads(path.read_text()).get("stages", {})
        if (names and path.stem not in names) or stages.get("emulator", "none") == "none":
            continue
        with tempfile.TemporaryDirectory() as tmp:
            result = run_sweep(path, Path(tmp) / "r.db", progress=False)
            with Store(Path(tmp) / "r.db") as store:
                model = store.metric_table(result.experiment_id, "analytical").set_index("candidate_id")
                emu = store.metric_table(result.experiment_id, "emulator_cycles").set_index("candidate_id")
        emu = emu[emu["energy_uj"].notna()] if "energy_uj" in emu else emu.iloc[:0]
        errors = [abs(relative_error(model.loc[c, "energy_uj"], emu.loc[c, "energy_uj"])) for c in emu.index]
        equal = all(model.loc[c, "dram_footprint_bytes"] == emu.loc[c, "dram_footprint_bytes"] for c in emu.index)
        print(f"{path.stem}: {len(errors)} emulated, largest energy error "
              f"{100 * max(errors, default=0):.2f}%, DRAM footprint {'equal' if equal else 'DIFFERS'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chip", default="goban")
    parser.add_argument("--specs", action="store_true", help="also every shipped spec with an emulator stage")
    parser.add_argument("--spec", action="append", default=[], help="only this shipped spec (repeatable)")
    args = parser.parse_args()
    calibration_set(args.chip)
    if args.specs or args.spec:
        shipped_specs(args.spec)


if __name__ == "__main__":
    main()
