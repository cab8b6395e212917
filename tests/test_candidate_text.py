"""0018: a candidate's config and mapping are stored once per distinct text (candidate_text)
and read back as before, on SQLite and PostgreSQL; the migration moves a store's texts
there and its downgrade puts them back."""

from __future__ import annotations

import json

from alembic import command
from pg import pg_server, pg_url  # noqa: F401  (fixtures)
from sqlalchemy import create_engine, text

from dse.identity import canonical_json
from dse.records import Store
from dse.records.engine import alembic_config, database_url

CONFIGS = [{"banks": {"count": 16, "rows": 512}, "name": "goban"}, {"banks": {"count": 20, "rows": 512}, "name": "goban"}]
MAPPINGS = [{"workers": 2, "dataflow": "ws"}, {"workers": 4, "dataflow": "os"}]


def texts(url: str) -> list[str]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return sorted(connection.exec_driver_sql("SELECT text FROM candidate_text").scalars())
    finally:
        engine.dispose()


def test_each_distinct_config_and_mapping_is_written_once_and_reads_back(db):
    rows = [{"config": CONFIGS[i % 2], "mapping": MAPPINGS[i // 2], "origin": "grid"} for i in range(4)]
    with Store(db) as store:
        e = store.create_experiment("x", "h", [], "gemm", "w", "s", "s")
        ids = [cid for cid, _ in store.add_candidates(e, rows)]
        other = store.create_experiment("y", "h", [], "gemm", "w", "s2", "s2")
        again, created = store.add_candidate(other, CONFIGS[1], MAPPINGS[0], "baseline")  # texts known already
        frame = store.candidates("x")
        one = store.candidate(ids[3])
        url = store.engine.url.render_as_string(hide_password=False)
    assert created and len(set(ids)) == 4
    # 2 configs and 2 mappings: 4 texts for 5 candidates of two experiments
    assert texts(url) == sorted(canonical_json(v) for v in CONFIGS + MAPPINGS)
    assert frame["config"].tolist() == [canonical_json(r["config"]) for r in rows]
    assert frame["mapping"].tolist() == [canonical_json(r["mapping"]) for r in rows]
    assert (one["config"], one["mapping"]) == (CONFIGS[1], MAPPINGS[1])


def test_the_migration_moves_the_texts_and_its_downgrade_puts_them_back(db):
    url = database_url(db)
    command.upgrade(alembic_config(url), "0017")
    sqlite = url.startswith("sqlite")
    as_json = ":{}" if sqlite else "CAST(:{} AS JSON)"
    engine = create_engine(url)
    stored = [(canonical_json(CONFIGS[i % 2]), canonical_json(MAPPINGS[i // 2])) for i in range(3)]
    with engine.begin() as connection:
        connection.execute(text(
            "INSERT INTO experiment (id, name, hypothesis, status, acceptance, workload_recipe, workload_hash, "
            "spec_text, spec_hash, limitations, open_questions, created_at) VALUES "
            "(1, 'old', 'h', 'testing', '[]', 'gemm', 'w', 's', 'sh', '', '', '2026-01-01 00:00:00')"))
        for i, (config, mapping) in enumerate(stored):
            connection.execute(text(
                "INSERT INTO candidate (id, experiment_id, hash, config, mapping, origin, diff, created_at) VALUES "
                f"(:id, 1, :hash, {as_json.format('config')}, {as_json.format('mapping')}, 'grid', '{{}}', "
                "'2026-01-01 00:00:00')"), {"id": i + 1, "hash": f"h{i}", "config": config, "mapping": mapping})
    engine.dispose()
    with Store(db) as store:  # opening upgrades it
        frame = store.candidates("old")
        first = store.candidate(1)
    assert list(zip(frame["config"], frame["mapping"])) == stored
    assert (first["config"], first["mapping"]) == (CONFIGS[0], MAPPINGS[0])
    assert texts(url) == sorted({t for pair in stored for t in pair})  # 2 configs, 2 mappings
    command.downgrade(alembic_config(url), "0017")
    engine = create_engine(url)
    with engine.connect() as connection:
        back = connection.exec_driver_sql(
            "SELECT CAST(config AS TEXT), CAST(mapping AS TEXT) FROM candidate ORDER BY id").all()
    engine.dispose()
    assert [tuple(json.loads(v) for v in row) for row in back] == [tuple(json.loads(v) for v in row) for row in stored]


def test_deleting_an_experiment_deletes_the_texts_no_other_candidate_names(db):
    """0018's texts are shared between experiments: deleting one takes the texts only its
    candidates named, in the same transaction, and keeps those another experiment's name."""
    with Store(db) as store:
        x = store.create_experiment("x", "h", [], "gemm", "w", "s", "s")
        store.add_candidates(x, [{"config": CONFIGS[0], "mapping": MAPPINGS[0], "origin": "grid"},
                                 {"config": CONFIGS[1], "mapping": MAPPINGS[1], "origin": "grid"}])
        y = store.create_experiment("y", "h", [], "gemm", "w", "s2", "s2")
        store.add_candidates(y, [{"config": CONFIGS[1], "mapping": MAPPINGS[0], "origin": "grid"}])
        url = store.engine.url.render_as_string(hide_password=False)
        counts = store.delete_experiment("x")
        # y's candidate names CONFIGS[1] and MAPPINGS[0]: they stay, x's own two go
        assert counts["candidate"] == 2 and counts["candidate_text"] == 2
        assert texts(url) == sorted(canonical_json(v) for v in (CONFIGS[1], MAPPINGS[0]))
        assert store.candidates("y")["config"].tolist() == [canonical_json(CONFIGS[1])]
        # a text deleted with x is written again when a new candidate needs it
        again, created = store.add_candidate(y, CONFIGS[0], MAPPINGS[1], "baseline")
        assert created and store.candidate(again)["config"] == CONFIGS[0]
        assert store.delete_experiment("y")["candidate_text"] == 4
        assert texts(url) == []
