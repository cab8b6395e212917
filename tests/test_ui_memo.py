"""The workbench computes an experiment's judgement, search history and ranked candidate
list once per state of the records (`Store.revision`, `dse.ui.memo`): every write a figure
or a verdict reads changes the state, and the next page shows the new records."""

from __future__ import annotations

import re

from starlette.testclient import TestClient

from dse.records import MetricRow, Store
from dse.ui import create_app

SPEC = """
[[objectives]]
metric = "latency_cycles"
"""


def add(store: Store, exp: int, banks: int, latency: float | None) -> tuple[int, int]:
    """A candidate with a running analytical run, finished ok with `latency` unless None."""
    [(cid, _, run)] = store.add_candidates_and_start_runs(
        exp, [dict(config={"banks": banks}, mapping={}, origin="grid", diff={"config.banks": [4, banks]})],
        "analytical", baseline=banks == 4)
    if latency is not None:
        store.finish_runs([dict(run_id=run, status="ok",
                                metrics=[MetricRow("analytical", "latency_cycles", float(latency), "cycles")])])
    return cid, run


def best_line(client: TestClient, path: str) -> str:
    return re.search(r'<p id="search-best">([^<]+)</p>', client.get(path).text).group(1)


def test_a_page_shows_the_records_as_they_are_and_judges_them_once_a_state(tmp_path):
    with Store(tmp_path / "records.db") as store:
        exp = store.create_experiment("memo", "h", [], "mlp", "w" * 64, SPEC, "s")
        states = [store.revision()]
        c1, _ = add(store, exp, 4, 100.0)
        states.append(store.revision())
        c2, _ = add(store, exp, 8, 80.0)
        states.append(store.revision())
        client = TestClient(create_app(store), base_url="http://127.0.0.1")
        path = f"/experiments/{exp}?sort=latency_cycles"
        assert f"reached at candidate {c2}" in best_line(client, path)
        calls = []
        from dse.ui import app as ui_app

        original = ui_app.judge_experiment
        ui_app.judge_experiment = lambda *a, **k: calls.append(1) or original(*a, **k)
        try:
            for _ in range(3):  # the same records: judged once (then the memo's)
                assert f"reached at candidate {c2}" in best_line(client, path)
            assert calls == []
            # A run started, then finished with a better figure: a new state each time, shown.
            c3, run = add(store, exp, 16, None)
            states.append(store.revision())
            page = client.get(path).text
            assert f"reached at candidate {c2}" in best_line(client, path) and f'/candidates/{c3}"' in page
            store.finish_runs([dict(run_id=run, status="ok",
                                    metrics=[MetricRow("analytical", "latency_cycles", 50.0, "cycles")])])
            states.append(store.revision())
            assert f"reached at candidate {c3}" in best_line(client, path)
            assert len(calls) == 2  # one judgement a state: the two new ones
            # A run marked crashed (its process gone) is a state of its own too.
            _, run = add(store, exp, 32, None)
            states.append(store.revision())
            store.finish_run(run, "crashed", error="gone")
            states.append(store.revision())
        finally:
            ui_app.judge_experiment = original
        assert len(set(states)) == len(states), states
