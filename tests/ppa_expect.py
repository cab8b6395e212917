"""Shared by the tests of the area, energy and power views (report, Markdown, UI, compare):
what the store holds, read by the Store's own reads (not the views' queries), and the
Pareto fronts of latency, energy and area checked by hand on uiserver's "emulated" sweep.

That sweep: the MLP on goban with 20 banks, bank rows 128 or 1024 x 1, 2 or 4 workers (the
baseline: 1024 rows, one worker), the two fastest emulated. Its analytical figures, as
recorded (latency Mcycles, energy uJ, area mm2):

    rows  workers  latency  energy  area
    1024  1 (base)   37.4    6914   0.78
     128  1          50.9    6307   0.54
     128  2          25.5    6106   0.76
     128  4          12.7    6006   1.21   <- the verdict's best (1.5x faster, less SRAM)
    1024  2          18.7    6767   1.25
    1024  4          10.7    7323   2.18   <- the fastest

Fronts (minimising both): latency vs energy: the fastest, and 128 x 4 (less energy than
every slower one); latency vs area: 128 x 1, 2 and 4 (each the smallest of those at least as
fast) and the fastest (1024 x 2 is slower and larger than 128 x 4; the baseline slower and
larger than 128 x 2); energy vs area: 128 x 1, 2 and 4 (the rest spend more energy and area
than one of them).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dse.records import Store

# (x, y) -> the front by (bank rows, workers), as read off the table above.
HAND_FRONTS = {
    ("energy_uj", "latency_cycles"): {(128, 4), (1024, 4)},
    ("area_mm2", "latency_cycles"): {(128, 1), (128, 2), (128, 4), (1024, 4)},
    ("area_mm2", "energy_uj"): {(128, 1), (128, 2), (128, 4)},
}


@dataclass
class Stored:
    experiment_id: int
    baseline: int
    best: int
    by_knobs: dict  # (bank rows, workers) -> candidate id
    totals: dict  # kind -> metric_table (index candidate_id)
    components: dict  # kind -> metric_table at scope "component" (candidate_id, scope_key, area_mm2, energy_uj)
    op_energy: pd.DataFrame  # analytical per-op table (candidate_id, scope_key, energy_uj, cycles)

    def component(self, kind: str, candidate: int) -> pd.DataFrame:
        """One candidate's components of `kind`, indexed by component (metric_table's order)."""
        table = self.components[kind]
        rows = table[(table["candidate_id"] == candidate) & table["area_mm2"].notna()]
        return rows.set_index("scope_key")[["area_mm2", "energy_uj"]]

    def front(self, x: str, y: str) -> set[int]:
        """The front by definition (no other feasible candidate at most as large on both
        and smaller on one), from the stored analytical totals."""
        t = self.totals["analytical"]
        ok = t[t["status"] == "ok"]
        v = ok[[x, y]].to_numpy(dtype=float)
        dominated = ((v[None, :, :] <= v[:, None, :]).all(axis=2) & (v[None, :, :] < v[:, None, :]).any(axis=2)).any(axis=1)
        return {int(i) for i in ok.index[~dominated]}

    def hand_front(self, x: str, y: str) -> set[int]:
        return {self.by_knobs[k] for k in HAND_FRONTS[(x, y)]}


def stored(db: str, experiment: str) -> Stored:
    with Store(db) as store:
        exp = store.experiment(experiment)
        rationale = store.decisions(experiment).iloc[-1]["rationale"]
        cands = store.candidates(experiment)
        totals = {kind: store.metric_table(experiment, kind).set_index("candidate_id")
                  for kind in ("analytical", "emulator_cycles")}
        components = {kind: store.metric_table(experiment, kind, scope="component")
                      for kind in ("analytical", "emulator_cycles")}
        ops = store.metric_table(experiment, "analytical", scope="op")
    by_knobs = {}
    for ident, diff in zip(cands["id"], cands["diff"]):
        diff = json.loads(diff) if isinstance(diff, str) else (diff or {})
        rows = diff.get("config.banks.rows", [1024, 1024])[1]
        workers = diff.get("mapping.workers", [1, 1])[1]
        by_knobs[(rows, workers)] = int(ident)
    best = int(re.search(r"best is candidate (\d+)", rationale).group(1))
    return Stored(int(exp["id"]), int(exp["baseline_candidate_id"]), best, by_knobs, totals, components, ops)


def decode(values) -> np.ndarray:
    """A plotly JSON array: a list, or numpy's bytes as plotly writes them ({dtype, bdata})."""
    if isinstance(values, dict) and "bdata" in values:
        import base64

        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=np.dtype(values["dtype"]))
    return np.asarray(values)


def plotly_figures(page: str) -> dict[str, dict]:
    """The plotly figures a self-contained HTML page draws: div id -> {"data", "layout"}."""
    decoder = json.JSONDecoder()
    out = {}
    for match in re.finditer(r'Plotly\.newPlot\(\s*"([^"]+)",\s*', page):
        data, end = decoder.raw_decode(page, match.end())
        layout, _ = decoder.raw_decode(page, re.compile(r",\s*").match(page, end).end())
        out[match.group(1)] = {"data": data, "layout": layout}
    return out
