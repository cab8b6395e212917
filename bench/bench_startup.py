"""Start-up of the CLI: commands that only read the store, against a bare interpreter and
an `import torch`, measured in the same run.

    .venv/bin/python bench/bench_startup.py [--repeat 7]

Fills a fresh SQLite store with the quickstart sweep once (not timed), then times each
command as a fresh process (`python -m dse ...`) and prints medians and the ratio of each
to `import torch` (what every command paid before the CLI imported command modules lazily).
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


def timed(argv: list[str], repeat: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env, cwd=REPO)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
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
            "dse show quickstart": [py, "-m", "dse", "show", "quickstart", "--db", db],
            "dse show c5": [py, "-m", "dse", "show", "c5", "--db", db],
        }
        medians = {name: timed(argv, args.repeat) for name, argv in cases.items()}
    torch_time = medians["python -c 'import torch'"]
    print(f"median of {args.repeat} runs, each a fresh process")
    print(f"{'command':36s} {'seconds':>8s} {'x import torch':>15s}")
    for name, seconds in medians.items():
        print(f"{name:36s} {seconds:8.3f} {seconds / torch_time:15.2f}")


if __name__ == "__main__":
    main()
