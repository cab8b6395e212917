"""The notebooks run on a real Jupyter kernel against a real store, in the order a user
would open them."""

import re

import nbformat
import pytest
from nbclient import NotebookClient

from dse.records import Store

NOTEBOOKS = ["quickstart", "01-launch-a-sweep", "02-compare-candidates", "03-review-history"]


def execute(repo, name, cwd):
    nb = nbformat.read(repo / "notebooks" / f"{name}.ipynb", as_version=4)
    assert all(not c.get("outputs") and not c.get("execution_count") for c in nb.cells if c.cell_type == "code"), \
        f"{name}: commit notebooks without outputs"
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    texts = []
    for c in nb.cells:
        for o in c.get("outputs", []):
            assert o.get("output_type") != "error", f"{name}: {o.get('ename')}: {o.get('evalue')}"
            texts.append(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")))
    return "\n".join(texts), nb


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    return tmp_path_factory.mktemp("nb") / "nb.db"


def test_notebooks_execute_in_order(repo, store_path, monkeypatch):
    monkeypatch.setenv("DSE_DB", str(store_path))
    monkeypatch.setenv("PYTHONPATH", str(repo))
    out, nb = execute(repo, "quickstart", store_path.parent)
    # The interactive Pareto figure (plotly), not only a static image.
    assert any("application/vnd.plotly.v1+json" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
    with Store(store_path) as store:
        cands = store.candidates("quickstart")
    n, n_bad = len(cands), int((cands["status"] == "infeasible").sum())
    assert n >= 20 and f"{n} candidates, {n_bad} infeasible" in out and "confirmed" in out

    out, nb = execute(repo, "01-launch-a-sweep", store_path.parent)
    assert "grid size: 90" in out
    assert f"0 evaluated, {n} already recorded" in out  # the store already holds the sweep: resumed
    assert any(o.get("data", {}).get("image/png") for c in nb.cells for o in c.get("outputs", []))

    out, _ = execute(repo, "02-compare-candidates", store_path.parent)
    with Store(store_path) as store:
        table = store.metric_table("quickstart", "analytical")
        base = store.experiment("quickstart")["baseline_candidate_id"]
        verdict = store.decisions("quickstart").iloc[-1]["rationale"]
    # The best candidate is the verdict's (the best one passing acceptance), not the fastest feasible.
    best = int(re.search(r"best is candidate (\d+)", verdict).group(1))
    latency = table.set_index("candidate_id")["latency_cycles"]
    expected = float(latency[base]) / float(latency[best])
    assert f"best is {expected:.2f}x faster than the baseline" in out

    out, _ = execute(repo, "03-review-history", store_path.parent)
    assert "1 experiments, 1 decisions" in out
