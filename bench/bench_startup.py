"""Start-up of the CLI: commands that only read the store, against a bare interpreter and
an `import torch`, measured in the same run.

    .venv/bin/python bench/bench_startup.py [--repeat 7] [--against DIR] [--big DB]

Fills a fresh SQLite store with the quickstart sweep once (not timed), then times each
command as a fresh process (`python -m dse ...`) and prints medians and the ratio of each
to `import torch` (what every command paid before the CLI imported command modules lazily).
`--against DIR`: also each dse command from another source tree of dse (an earlier commit:
`git archive main | tar -x -C DIR`), on the same store, run by turns with this tree's, and
the ratio of this tree's time to that one's, and whether the two printed the same.
`--big DB`: also `dse show` of an experiment, a candidate and a run, and `dse history`, on a
store of 100,000 candidates at DB (`bench_records.populate`'s: 200,000 runs, 720,000
metrics), built there first when DB does not exist (a few minutes; kept for the next run).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


BIG_CANDIDATES = 100_000


def timed_once(argv: list[str], tree: Path) -> tuple[float, bytes]:
    """Seconds and stdout of one fresh process (in `tree`: `-m dse` imports its dse)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    start = time.perf_counter()
    out = subprocess.run(argv, check=True, stdout=subprocess.PIPE, env=env, cwd=tree).stdout
    return time.perf_counter() - start, out


def big_store(db: Path) -> dict[str, list[str]]:
    """The commands timed on the big store at `db` (built first if missing): a candidate and
    a run from the middle of its big experiment."""
    if not db.exists():
        sys.path[:0] = [str(REPO), str(REPO / "bench"), str(REPO / "tests")]
        from bench_records import populate

        start = time.perf_counter()
        populate(str(db), 2 * BIG_CANDIDATES)
        print(f"built {db} in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    connection = sqlite3.connect(db)
    try:
        (candidate,) = connection.execute(
            "SELECT c.id FROM candidate c JOIN experiment e ON c.experiment_id = e.id WHERE e.name = 'big' "
            "ORDER BY c.id LIMIT 1 OFFSET ?", (BIG_CANDIDATES // 2,)).fetchone()
        (run,) = connection.execute("SELECT max(id) FROM run WHERE candidate_id = ?", (candidate,)).fetchone()
    finally:
        connection.close()
    py, at = sys.executable, ["--db", str(db)]
    return {"100k: dse show big": [py, "-m", "dse", "show", "big", *at],
            f"100k: dse show c{candidate}": [py, "-m", "dse", "show", f"c{candidate}", *at],
            f"100k: dse show r{run}": [py, "-m", "dse", "show", f"r{run}", *at],
            "100k: dse history": [py, "-m", "dse", "history", *at]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--against", type=Path, help="another dse source tree to time the same dse commands from")
    parser.add_argument("--big", type=Path, help="also time the record commands on this 100,000-candidate store "
                                                 "(built there when missing)")
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
            "dse show r5": [py, "-m", "dse", "show", "r5", "--db", db],
            **(big_store(args.big.resolve()) if args.big is not None else {}),
        }
        runs = [(name, argv, REPO) for name, argv in cases.items()]
        if args.against is not None:
            runs += [(name + " [against]", argv, args.against.resolve()) for name, argv in cases.items()
                     if argv[1:3] == ["-m", "dse"]]
        times: dict[str, list[float]] = {name: [] for name, _, _ in runs}
        printed: dict[str, bytes] = {}
        for _ in range(args.repeat):  # by turns, so a loaded machine's swings fall on all alike
            for name, argv, tree in runs:
                seconds, printed[name] = timed_once(argv, tree)
                times[name].append(seconds)
    medians = {name: statistics.median(t) for name, t in times.items()}
    torch_time = medians["python -c 'import torch'"]
    print(f"median of {args.repeat} runs, each a fresh process" + (f"; [against]: {args.against}" if args.against
                                                                    else ""))
    print(f"{'command':36s} {'seconds':>8s} {'x import torch':>15s}" + (
        f" {'against':>8s} {'x against':>10s}  same output" if args.against else ""))
    for name in cases:
        line = f"{name:36s} {medians[name]:8.3f} {medians[name] / torch_time:15.2f}"
        other = medians.get(name + " [against]")
        if other is not None:
            same = printed[name] == printed[name + " [against]"]
            line += f" {other:8.3f} {medians[name] / other:10.2f}  {'yes' if same else 'NO'}"
        print(line)


if __name__ == "__main__":
    main()
