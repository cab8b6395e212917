"""A sweep's records do not depend on how its writes are batched: the same small grid
recorded one candidate a transaction and many a transaction gives the same rows, table by
table (times, process and host left out), notes included."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from dse.runner import run_sweep

SPEC = """
[experiment]
name = "batched"
hypothesis = "the records are the records"

[workload]
recipe = "mlp"

[baseline]
chip = "goban"

[[space]]
name = "banks"
target = "chip.banks.count"
values = [4, 16]

[[space]]
name = "rows"
target = "chip.banks.rows"
values = [128, 2048]

[[space]]
name = "workers"
target = "mapping.workers"
values = [1, 4]

[[objectives]]
metric = "latency_cycles"

[[objectives]]
metric = "private_sram_bytes"

[search]
sampler = "grid"
batch = {batch}
"""

# Columns that say when, where and by which process (and the spec's text, which states the
# batch): not what was recorded.
NOT_COMPARED = {"spec_text", "spec_hash", "created_at", "started_at", "finished_at", "heartbeat_at", "acquired_at", "updated_at", "pid",
                  "pid_start", "host", "git_commit", "git_dirty", "versions", "command", "spec_path", "path"}


def records(db: Path) -> dict[str, list[tuple]]:
    connection = sqlite3.connect(db)
    out = {}
    tables = [t for (t,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name "
                                                "NOT LIKE 'sqlite%' AND name != 'alembic_version'")]
    for table in tables:
        columns = [c[1] for c in connection.execute(f"PRAGMA table_info({table})") if c[1] not in NOT_COMPARED]
        out[table] = connection.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY "
                                        f"{', '.join(columns)}").fetchall()
    connection.close()
    return out


def test_a_sweep_records_the_same_rows_one_candidate_or_many_a_transaction(tmp_path):
    got = []
    for batch in (1, 64):
        spec = tmp_path / f"batch{batch}.toml"
        spec.write_text(SPEC.replace("{batch}", str(batch)))
        run_sweep(spec, tmp_path / f"batch{batch}.db", progress=False)
        got.append(records(tmp_path / f"batch{batch}.db"))
    one, many = got
    assert one.keys() == many.keys()
    for table in one:
        assert one[table] == many[table], table
    # (a run's metrics one packed row: run_id, layout_id, figures at 8 bytes a value; 0015)
    assert len(one["candidate"]) == 9 and sum(len(row[-1]) // 8 for row in one["run_metrics"]) > 9 * 10
    at = [c[1] for c in sqlite3.connect(tmp_path / "batch1.db").execute("PRAGMA table_info(candidate)")
          if c[1] not in NOT_COMPARED].index("notes")
    notes = [row[at] for row in one["candidate"]]
    assert sum("row-address field" in (n or "") for n in notes) == 4  # the rows = 2048 chips'
