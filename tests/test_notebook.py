"""The notebooks run on a real Jupyter kernel against a real store, in the order a user
would open them."""

import re

import nbformat
import pytest
from nbclient import NotebookClient

from dse.records import Store

NOTEBOOKS = ["quickstart", "01-launch-a-sweep", "02-compare-candidates", "03-review-history"]


PLOTLY = "application/vnd.plotly.v1+json"


def figures(nb) -> list[dict]:
    """The plotly figures a notebook displayed (their JSON)."""
    return [o["data"][PLOTLY] for c in nb.cells for o in c.get("outputs", []) if PLOTLY in o.get("data", {})]


def values(array) -> list:
    """A figure's array as plotly's JSON holds it: a list, or typed binary ({dtype, bdata})."""
    import base64

    import numpy as np

    if isinstance(array, dict) and "bdata" in array:
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"]).tolist()
    return list(array)


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
            # tqdm.auto without ipywidgets warns so on stderr, and shows no bar
            assert "IProgress not found" not in o.get("text", ""), f"{name}: {o.get('text')}"
    return "\n".join(texts), nb


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    return tmp_path_factory.mktemp("nb") / "nb.db"


def test_notebooks_execute_in_order(repo, store_path, monkeypatch):
    monkeypatch.setenv("DSE_DB", str(store_path))
    monkeypatch.setenv("PYTHONPATH", str(repo))
    out, nb = execute(repo, "quickstart", store_path.parent)
    # The interactive figures (plotly) of `dse ui`: Pareto, parallel coordinates, cycles per op.
    shown = figures(nb)
    assert [f["data"][0]["type"] for f in shown[1:]] == ["parcoords", "bar"] and len(shown) == 3
    assert any(t.get("name", "").startswith("Pareto front") for t in shown[0]["data"])
    with Store(store_path) as store:
        cands = store.candidates("quickstart")
    n, n_bad = len(cands), int((cands["status"] == "infeasible").sum())
    assert n >= 20 and f"{n} candidates, {n_bad} infeasible" in out and "confirmed" in out

    out, nb = execute(repo, "01-launch-a-sweep", store_path.parent)
    assert "grid size: 90" in out
    assert f"0 evaluated, {n} already recorded" in out  # the store already holds the sweep: resumed
    assert any(o.get("data", {}).get("image/png") for c in nb.cells for o in c.get("outputs", []))
    # The spec built in Python, swept with a progress bar that is a Jupyter widget.
    widgets = [o for c in nb.cells for o in c.get("outputs", []) if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert widgets, out
    assert "mlp-workers-python grid size: 6" in out, [o for c in nb.cells for o in c.get("outputs", [])
                                                       if "mlp-workers-python" in str(o)]
    with Store(store_path) as store:
        built = store.candidates("mlp-workers-python")
    assert f"mlp-workers-python: {len(built)} candidates" in out and len(built) == 6

    out, nb = execute(repo, "02-compare-candidates", store_path.parent)
    with Store(store_path) as store:
        table = store.metric_table("quickstart", "analytical")
        base = store.experiment("quickstart")["baseline_candidate_id"]
        verdict = store.decisions("quickstart").iloc[-1]["rationale"]
    # The best candidate is the verdict's (the best one passing acceptance), not the fastest feasible.
    best = int(re.search(r"best is candidate (\d+)", verdict).group(1))
    latency = table.set_index("candidate_id")["latency_cycles"]
    expected = float(latency[base]) / float(latency[best])
    assert f"best is {expected:.2f}x faster than the baseline" in out
    ops = figures(nb)[0]["data"]
    assert all(t["y"] == [f"baseline (c{base})", f"best (c{best})"] for t in ops)
    assert sum(values(t["x"])[1] for t in ops) == latency[best]

    out, nb = execute(repo, "03-review-history", store_path.parent)
    assert "2 experiments, 2 decisions" in out  # quickstart's proposal, and the Python spec's
    timeline = figures(nb)[0]
    assert timeline["layout"]["xaxis"]["type"] == "date" and set(timeline["data"][0]["y"]) == {"quickstart", "mlp-workers-python"}
