"""The quickstart notebook runs on a real Jupyter kernel against a real store."""

import nbformat
from nbclient import NotebookClient

from dse.records import Store


def test_quickstart_notebook_executes(tmp_path, repo, monkeypatch):
    db = tmp_path / "nb.db"
    monkeypatch.setenv("DSE_DB", str(db))
    monkeypatch.setenv("PYTHONPATH", str(repo))
    nb = nbformat.read(repo / "notebooks" / "quickstart.ipynb", as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit notebooks without outputs"
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = "\n".join(
        o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
        for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "Error" not in outputs
    with Store(db) as store:
        n = len(store.candidates("quickstart"))
        n_bad = int((store.candidates("quickstart")["status"] == "infeasible").sum())
    assert n >= 20
    assert f"{n} candidates, {n_bad} infeasible" in outputs
    assert "confirmed" in outputs
