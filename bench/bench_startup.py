"""Start-up of the CLI: commands that only read the store, against a bare interpreter and
an `import torch`, measured in the same run.

    .venv/bin/python bench/bench_startup.py [--repeat 7] [--against DIR]

Fills a fresh SQLite store with the quickstart sweep once (not timed), then times each
command as a fresh process (`python -m dse ...`) and prints medians and the ratio of each
to `import torch` (what every command paid before the CLI imported command modules lazily).
`--against DIR`: also each dse command from another source tree of dse (an earlier commit:
`git archive main | tar -x -C DIR`), on the same store, run by turns with this tree's, and
the ratio of this tree's time to that one's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed_once(argv: list[str], tree: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env, cwd=tree)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--against", type=Path, help="another dse source tree to time the same dse commands from")
    args = parser.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "records.db")
        subprocess.run([py, "-m", "dse", "sweep", "experiments/quickstart.toml", "--db", db], check=True,
                       stdout=subprocess.DEVNULL, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
        cases = {
            "python -c pass": [py, "-c", "pass"],
            "python -c 'import torch'": [py, "-c", "import torch"],
            "python -c 'import sqlalchemy'": [py, "-c", "import sqlalchemy"],
            "python -c 'import sqlalchemy.orm'": [py, "-c", "import sqlalchemy.orm"],
            "python -c 'import pandas'": [py, "-c", "import pandas"],
            "dse --help": [py, "-m", "dse", "--help"],
            "dse history": [py, "-m", "dse", "history", "--db", db],
            "dse history --decisions": [py, "-m", "dse", "history", "--decisions", "--db", db],
            "dse show quickstart": [py, "-m", "dse", "show", "quickstart", "--db", db],
            "dse show c5": [py, "-m", "dse", "show", "c5", "--db", db],
        }
        runs = [(name, argv, REPO) for name, argv in cases.items()]
        if args.against is not None:
            runs += [(name + " [against]", argv, args.against.resolve()) for name, argv in cases.items()
                     if argv[1:3] == ["-m", "dse"]]
        times: dict[str, list[float]] = {name: [] for name, _, _ in runs}
        for _ in range(args.repeat):  # by turns, so a loaded machine's swings fall on all alike
            for name, argv, tree in runs:
                times[name].append(timed_once(argv, tree))
    medians = {name: statistics.median(t) for name, t in times.items()}
    torch_time = medians["python -c 'import torch'"]
    print(f"median of {args.repeat} runs, each a fresh process" + (f"; [against]: {args.against}" if args.against
                                                                    else ""))
    print(f"{'command':36s} {'seconds':>8s} {'x import torch':>15s}" + (f" {'against':>8s} {'x against':>10s}"
                                                                         if args.against else ""))
    for name in cases:
        line = f"{name:36s} {medians[name]:8.3f} {medians[name] / torch_time:15.2f}"
        other = medians.get(name + " [against]")
        if other is not None:
            line += f" {other:8.3f} {medians[name] / other:10.2f}"
        print(line)


if __name__ == "__main__":
    main()
