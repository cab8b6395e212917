"""Calibration: fit the analytical model's free constants to measured cycles.

The model's cycles for a candidate are ``core x core_scale + ball x ball_scale + syncs x
sync_cycles`` summed over ops, where `core` is the core-op work on the busiest worker,
`ball` the Ball work with its transfers, and `syncs` the FENCEs / BARRIERs the lowering
inserts. Uncalibrated, the scales are 1 and a sync costs the chip's own
``front_end.barrier_cycles`` (several workers) or ``fence_cycles`` (one). A calibration
fits the three constants by least squares on the relative error (so a small recipe
weighs as much as a big one) against measured cycles: the emulator's ``overlapped``
cycles over a set of recipes and mappings (`calibration_points`), or imported RTL / FPGA
cycles of recorded candidates. The fit and the error before and after are stored in the
record store (`dse.records.calibrations`), and the model uses the newest one for a chip.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

import emulator

from ..frontend import run_pipeline
from ..mapping import Candidate, Mapping
from ..workload.recipes import instantiate, load_recipe
from .estimate import estimate

CONSTANTS = ("core_scale", "ball_scale", "sync_cycles")

# The calibration set: every shipped recipe at a size the emulator runs in seconds.
CALIBRATION_SET: dict[str, dict] = {
    "gemm": dict(m=64, n=64, k=64),
    "mlp": dict(batch=16),
    "lenet5": dict(batch=1),
    "resnet_block": dict(channels=16, size=8),
    "temporal_conv": dict(length=64, mels=16, channels=32, out_channels=16),
    "vit_block": dict(tokens=17, dim=32, heads=2, mlp_ratio=2),
    "llama_decode": dict(past=15, vocab=64, dim=32, layers=1, heads=2, kv_heads=1),
    "llama_prefill": dict(seq=16, vocab=64, dim=32, layers=1, heads=2, kv_heads=1),
    "resnet18": dict(size=32, batch=1, classes=10),
}
POLICIES = ("framework", "search")


@dataclass
class Point:
    """One measured run and the model's features for it."""

    label: str
    measured: float
    core: float
    ball: float
    syncs: float
    default_sync: float  # the chip's own cost of one sync for this mapping

    def model(self, constants: dict[str, float] | None) -> float:
        if constants is None:
            return self.core + self.ball + self.syncs * self.default_sync
        return (self.core * constants["core_scale"] + self.ball * constants["ball_scale"]
                + self.syncs * constants["sync_cycles"])


@dataclass
class Fit:
    constants: dict[str, float]
    before: dict[str, float]
    after: dict[str, float]
    points: list[dict] = field(default_factory=list)


def features(graph, candidates) -> list[dict]:
    """Per candidate: feasible, core, ball and syncs summed over the graph's ops, and the
    chip's own sync cost (uncalibrated model)."""
    per_op = estimate(graph, candidates)
    by_candidate = per_op.groupby("candidate", sort=True)
    sums = by_candidate[["core_cycles", "ball_cycles", "syncs"]].sum()
    feasible = by_candidate["feasible"].all()
    reason = per_op[~per_op["feasible"]].groupby("candidate")["reason"].first()
    out = []
    for index, cand in enumerate(candidates):
        front_end = cand.chip.front_end
        out.append({
            "feasible": bool(feasible.get(index, True)), "reason": reason.get(index, ""),
            "core": float(sums["core_cycles"].get(index, 0)), "ball": float(sums["ball_cycles"].get(index, 0)),
            "syncs": float(sums["syncs"].get(index, 0)),
            "default_sync": float(front_end.barrier_cycles if cand.mapping.workers > 1 else front_end.fence_cycles),
        })
    return out


def errors(points: Sequence[Point], constants: dict[str, float] | None) -> dict[str, float]:
    """Mean absolute and largest absolute percentage error of the model on `points`."""
    if not points:
        return {"mape": float("nan"), "max": float("nan"), "points": 0}
    rel = np.array([abs(point.model(constants) - point.measured) / point.measured for point in points]) * 100
    return {"mape": float(rel.mean()), "max": float(rel.max()), "points": len(points)}


def _solve(Xw: np.ndarray, yw: np.ndarray, theta0: np.ndarray) -> np.ndarray:
    """Least squares with every constant >= 0: a constant the fit drives negative is pinned
    to 0 and the rest refitted; a constant no point exercises keeps `theta0`."""
    theta = theta0.copy()
    free = [j for j in range(Xw.shape[1]) if np.any(Xw[:, j] > 0)]
    while free:
        fixed = [j for j in range(Xw.shape[1]) if j not in free]
        sol, *_ = np.linalg.lstsq(Xw[:, free], yw - Xw[:, fixed] @ theta[fixed], rcond=None)
        if np.all(sol >= 0):
            theta[free] = sol
            break
        worst = free[int(np.argmin(sol))]
        theta[worst] = 0.0
        free.remove(worst)
    return theta


def fit(points: Sequence[Point], iterations: int = 30) -> Fit:
    """The constants that minimise the mean absolute percentage error on `points`
    (least squares on relative errors, reweighted towards absolute ones); if no fit beats
    the uncalibrated model on its own points, the uncalibrated constants are kept."""
    if not points:
        raise ValueError("no measured points to fit")
    X = np.array([[point.core, point.ball, point.syncs] for point in points], dtype=np.float64)
    y = np.array([point.measured for point in points], dtype=np.float64)
    Xr = X / y[:, None]  # model / measured per unit constant: residuals are relative errors
    default = np.array([1.0, 1.0, float(np.mean([point.default_sync for point in points]))])
    theta = _solve(Xr, np.ones_like(y), default)
    for _ in range(iterations):  # IRLS: weights 1/|r| turn squares into absolute values
        r = np.abs(Xr @ theta - 1.0)
        w = 1.0 / np.sqrt(np.maximum(r, 1e-6))
        theta = _solve(Xr * w[:, None], w, theta)
    constants = dict(zip(CONSTANTS, map(float, theta)))
    before = errors(points, None)
    after = errors(points, constants)
    if after["mape"] > before["mape"]:
        constants = {"core_scale": 1.0, "ball_scale": 1.0, "sync_cycles": float(default[2])}
        after = errors(points, constants)
    rows = [{"label": point.label, "measured": point.measured, "before": point.model(None),
             "after": point.model(constants)}
            for point in points]
    return Fit(constants, before, after, rows)


def calibration_points(chip, recipes: Iterable[str] | None = None, workers: Iterable[int] = (1, 4),
                       policies: Iterable[str] = POLICIES, progress=None) -> tuple[list[Point], list[str]]:
    """Run the calibration set on the emulator (overlapped timing) and pair each run with
    the model's features. Returns the points and the runs that could not be made (why)."""
    from tqdm import tqdm

    from ..lower import Infeasible, lower

    points, skipped = [], []
    recipes = list(recipes or CALIBRATION_SET)
    workers = [workers_count for workers_count in workers if workers_count <= chip.cores.count]
    policies = list(policies)
    # Each point is a whole emulator run: a bar on a terminal, nothing otherwise (disable=None).
    with tqdm(total=len(recipes) * len(workers) * len(policies), desc=f"calibrate {chip.name}", unit="run",
              leave=False, disable=None) as bar:
        for recipe in recipes:
            params = CALIBRATION_SET.get(recipe, {})
            bar.set_description(f"calibrate: {recipe} frontend")
            pipe = run_pipeline(recipe, params)
            _, inputs = instantiate(load_recipe(recipe), **params)
            for workers_count in workers:
                for policy in policies:
                    label = f"{recipe} {chip.name} w{workers_count} {policy}"
                    bar.set_description(f"calibrate: {label}")
                    cand = Candidate(chip, Mapping(policy=policy, workers=workers_count))
                    feat = features(pipe.graph, [cand])[0]
                    try:
                        if not feat["feasible"]:
                            skipped.append(f"{label}: {feat['reason']}")
                            continue
                        try:
                            lowered = lower(pipe.graph, cand, inputs)
                        except Infeasible as exc:
                            skipped.append(f"{label}: {exc}")
                            continue
                        res = emulator.run(lowered.program, chip, lowered.image, functional=False)
                        points.append(Point(label, float(res.cycles), feat["core"], feat["ball"], feat["syncs"],
                                            feat["default_sync"]))
                        if progress:
                            progress(points[-1])
                    finally:
                        bar.update()
        bar.refresh()  # the last run's update drawn before the bar goes (within mininterval it is not)
    return points, skipped


__all__ = ["CALIBRATION_SET", "CONSTANTS", "Fit", "Point", "calibration_points", "errors", "features", "fit"]
