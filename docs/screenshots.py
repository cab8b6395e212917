"""Screenshots of the main `dse ui` pages for the docs, taken by Debian's Chromium.

    .venv/bin/python docs/screenshots.py [NAME.png ...]   # all, or only these

Sweeps the tests' small experiments into a temporary store (tests/uiserver.py), serves it
with `dse ui`, records one decision from the page, and writes docs/ui-*.png; ui-live.png is
the page of a sweep in progress (a slowed sweep in another process, test_ui_live.py's).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))
sys.path.insert(0, str(DOCS.parent / "tests"))

from test_ui_live import SLOW_SWEEP, wait_for_sweep  # noqa: E402
from uiserver import REPO, SPEC, chromium, dse_ui_process, make_store  # noqa: E402


def live_shot(page, base: str, db: str, folder: Path) -> None:
    """The experiment page of a sweep part done (a slowed sweep in another process)."""
    spec, script, gate = folder / "live.toml", folder / "slow_sweep.py", folder / "go"
    spec.write_text(SPEC.format(name="live", banks="[4, 8, 16, 20]") + "batch = 6\n")
    script.write_text(SLOW_SWEEP)
    sweep = subprocess.Popen([sys.executable, str(script), str(spec), db, str(gate)], cwd=REPO, text=True,
                             stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        exp_id = wait_for_sweep(db, "live", sweep)
        gate.write_text("go")
        page.goto(f"{base}/experiments/{exp_id}")
        page.wait_for_function("Number(document.getElementById('live').dataset.percent) > 30")
        page.screenshot(path=str(DOCS / "ui-live.png"))
        print(DOCS / "ui-live.png")
        page.wait_for_selector("#live[data-refreshed='1']", timeout=180_000)
    finally:
        sweep.wait(timeout=180)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="dse-shots-") as folder:
        db = make_store(Path(folder))
        with dse_ui_process(db) as (base, _proc), chromium() as browser:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(base + "/experiments/1")
            page.wait_for_selector("#pareto[data-ready='1']")
            page.fill("#decide-form input[name=candidate]", page.inner_text("#pareto-summary").split("candidate ")[-1])
            page.fill("#decide-form input[name=author]", "ada")
            page.fill("#decide-form textarea[name=why]", "fastest candidate within the SRAM budget")
            page.click("#decide")
            page.wait_for_url("**/experiments/1#decisions")
            page.select_option("#note-form select[name=kind]", "open_question")
            page.fill("#note-form input[name=author]", "ada")
            page.fill("#note-form textarea[name=text]", "does the DMA bound four workers on the real chip?")
            page.click("#add-note")
            page.wait_for_url("**/experiments/1#note-*")
            array_id, counters_id = _emulated_artifacts(db)
            shots = {
                "ui-experiments.png": ("/", "#timeline[data-ready='1']", None),
                "ui-experiment.png": ("/experiments/1?sort=latency_cycles", "#pareto[data-ready='1']", "#pareto"),
                "ui-candidates.png": ("/experiments/1?sort=latency_cycles&status=ok", "#candidates", "#candidates"),
                "ui-knobs-and-ops.png": ("/experiments/3", "#ops[data-ready='1']", "#parallel"),
                "ui-model-vs-emulator.png": ("/experiments/3", "#model-vs-emulator[data-ready='1']",
                                             "#model-vs-emulator"),
                "ui-candidate.png": ("/candidates/5", "#diff", None),
                "ui-compare.png": ("/compare?c=1&c=5&c=9&c=27", "#compare", None),
                "ui-notes.png": ("/experiments/1", "#note-list", "#notes"),
                "ui-artifact-array.png": (f"/artifacts/{array_id}/view", "#heatmap[data-ready='1']", None),
                "ui-artifact-counters.png": (f"/artifacts/{counters_id}/view?q=bank", "#counters", None),
            }
            only = set(sys.argv[1:])
            if not only or "ui-live.png" in only:
                live_shot(page, base, db, Path(folder))
            for name, (path, ready, scroll_to) in shots.items():
                if only and name not in only:
                    continue
                page.goto(base + path)
                page.wait_for_selector(ready)
                if scroll_to:
                    page.locator(scroll_to).scroll_into_view_if_needed()
                page.wait_for_timeout(500)
                page.screenshot(path=str(DOCS / name))
                print(DOCS / name)


def _emulated_artifacts(db: str) -> tuple[int, int]:
    """The ids of an emulated run's first output array and its counters."""
    from dse.records import Store

    with Store(db) as store:
        arts = store.artifacts()
    arts = arts[arts["run_id"].notna()]
    return (int(arts[arts["name"].str.endswith(".npy")]["id"].iloc[0]),
            int(arts[arts["name"] == "counters.json"]["id"].iloc[0]))


if __name__ == "__main__":
    main()
