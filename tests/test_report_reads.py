"""The report's reads at scale give what the plain reads give: the judgement on the figures
the view read itself (`judge_experiment(figures=...)`) is the one `judge_experiment` reads;
the importance's trials, built once-checked (`search_history._trials`), give optuna's
importances of trials each made by `create_trial`; the linking runs the report lists are
those `Store.runs` names."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from dse.records import MetricIn, Store
from dse.report.data import experiment_view, reused_evidence
from dse.runner.acceptance import judge_experiment

SPEC_TEXT = '[[objectives]]\nmetric = "latency_cycles"\n\n[[objectives]]\nmetric = "private_sram_bytes"\n'


def _run(store, cand, stage, status, metrics=()):
    store.finish_run(store.start_run(cand, stage), status, list(metrics),
                     reason=None if status == "ok" else "needs 12 banks")


def test_the_view_judges_on_its_own_read_as_judge_experiment_reads(tmp_path):
    with Store(tmp_path / "r.db") as store:
        e = store.create_experiment(
            "hand", "faster in the emulator, smaller in the model",
            [{"expr": "latency_cycles < baseline_latency_cycles and private_sram_bytes <= baseline_private_sram_bytes",
              "prose": "faster, no bigger"},
             {"expr": "emulator.latency_cycles < 0.9 * baseline.emulator.latency_cycles", "prose": "emulated"}],
            "gemm", "h" * 64, SPEC_TEXT, "s")
        base, fast, big, late, redo = (store.add_candidate(e, {"banks": b}, {}, "grid")[0] for b in (16, 20, 24, 8, 12))
        store.set_baseline(e, base)
        model = lambda cycles, sram: [MetricIn("analytical", "latency_cycles", cycles, "cycles"),  # noqa: E731
                                      MetricIn("analytical", "private_sram_bytes", sram, "bytes")]
        emulated = lambda cycles: [MetricIn("emulator_cycles", "latency_cycles", cycles, "cycles")]  # noqa: E731
        for cand, cycles, sram in ((base, 3000.0, 1000.0), (fast, 1000.0, 900.0), (big, 900.0, 2000.0),
                                   (late, 800.0, 100.0), (redo, 500.0, 500.0)):
            _run(store, cand, "analytical", "ok", model(cycles, sram))
        _run(store, redo, "analytical", "infeasible")  # its latest analytical run: no figures
        for cand, cycles in ((base, 2900.0), (fast, 1200.0), (big, 2800.0)):
            _run(store, cand, "emulator", "ok", emulated(cycles))
        view = experiment_view(store, e)
        alone = judge_experiment(store, store.experiment(e))
        ids = [base, fast, big, late, redo]
        assert view.judgement.outcomes_of(ids) == alone.outcomes_of(ids) == [None, "pass", "fail", "waiting", None]
        assert (view.best_id, view.judgement.passing_ids) == (alone.best, alone.passing_ids) == (fast, [fast])
        for kind, metric in (("analytical", "latency_cycles"), ("emulator_cycles", "latency_cycles")):
            assert np.array_equal(view.judgement.values(kind, metric), alone.values(kind, metric), equal_nan=True)
        # The table shows the figures of each candidate's latest analytical run: none for `redo`.
        table = view.table.set_index("candidate_id")
        assert table.loc[fast, "latency_cycles"] == 1000.0 and table.loc[late, "private_sram_bytes"] == 100.0
        assert table.loc[redo, "status"] == "infeasible" and pd.isna(table.loc[redo, "latency_cycles"])
        assert view.reused == reused_evidence(store, e) == []  # no linking run here (test_evidence_reuse has them)


def test_importance_trials_give_optunas_importances():
    optuna = pytest.importorskip("optuna")
    from optuna.distributions import CategoricalDistribution, FloatDistribution
    from optuna.importance import PedAnovaImportanceEvaluator, get_param_importances

    from dse.report.search_history import _importances

    rng = np.random.default_rng(3)
    n = 400
    knobs = pd.DataFrame({"config.banks.count": rng.choice([8, 16, 32], n), "mapping.workers": rng.choice([1, 2, 4], n),
                          "config.policy": rng.choice(["lru", "fifo"], n)})
    values = pd.Series(1e6 / knobs["mapping.workers"] + 10 * knobs["config.banks.count"] + rng.normal(0, 1e3, n))
    mine = _importances(knobs, values, "minimize")
    # The same trials, each made and checked by optuna, in a real study.
    distributions = {"config.banks.count": FloatDistribution(8.0, 32.0), "mapping.workers": FloatDistribution(1.0, 4.0),
                     "config.policy": CategoricalDistribution(["fifo", "lru"])}
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(direction="minimize")
    study.add_trials([optuna.trial.create_trial(
        params={"config.banks.count": float(b), "mapping.workers": float(w), "config.policy": p},
        distributions=distributions, value=float(v))
        for b, w, p, v in zip(knobs["config.banks.count"], knobs["mapping.workers"], knobs["config.policy"], values)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        theirs = get_param_importances(study, evaluator=PedAnovaImportanceEvaluator(), normalize=True)
    assert mine == pytest.approx({k.removeprefix("config.").removeprefix("mapping."): v for k, v in theirs.items()})
    assert list(mine)[0] == "workers"


def test_the_png_and_the_interactive_plot_draw_the_same_sample():
    from dse.report import figures, interactive

    for n in (10, figures.MAX_POINTS_PNG, figures.MAX_POINTS_PNG + 1, 12_345, 100_000):
        rows = pd.DataFrame({"candidate_id": np.arange(n)})
        png, png_label = figures._sample(rows, "feasible")
        html, html_label = interactive._thin(rows, "feasible")
        assert png["candidate_id"].tolist() == html["candidate_id"].tolist()
        assert len(png) <= interactive.MAX_POINTS and png_label == html_label


def test_a_big_table_shows_the_telling_rows_then_the_best_by_the_objective():
    from dse.report.html import MAX_ROWS, _shown_rows

    rng = np.random.default_rng(5)
    n = MAX_ROWS + 700
    value = rng.choice([1.0, 2.0, 3.0, np.nan], n)  # ties and missing figures
    table = pd.DataFrame({"candidate_id": np.arange(1, n + 1), "latency_cycles": value})
    first = {7, 11, int(np.flatnonzero(np.isnan(value))[0]) + 1}  # one telling row without the figure
    for direction in ("minimize", "maximize"):
        shown = _shown_rows(table, first, {"metric": "latency_cycles", "direction": direction})
        # By hand: the telling rows, then those with the figure, best first, ties by id.
        rest = table[~table["candidate_id"].isin(first)].assign(missing=lambda t: t["latency_cycles"].isna())
        rest = rest.sort_values(["missing", "latency_cycles", "candidate_id"],
                                ascending=[True, direction == "minimize", True])
        expected = sorted([*first, *rest["candidate_id"].head(MAX_ROWS - len(first))])
        assert shown["candidate_id"].tolist() == expected
    assert _shown_rows(table.head(10), set(), {"metric": "latency_cycles"})["candidate_id"].tolist() == list(range(1, 11))
