"""A new store made from the schema snapshot (dse.records.snapshot) is the store alembic's
migrations make: the same tables, columns, types, indexes, constraints, triggers and
functions on SQLite and PostgreSQL, the snapshot files themselves those of a migrated
store (so they cannot drift from the migrations), and a store made either way downgrades
and upgrades alike."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from pg import pg_server, pg_url  # noqa: F401  (fixtures)
from sqlalchemy import create_engine

from dse.records import Store, snapshot
from dse.records.engine import SCHEMA_HEAD, alembic_config

# What PostgreSQL's catalogs say of the current schema's objects, each sorted.
PG_CATALOG = {
    # A column's place among its table's columns (a dropped column leaves a gap in
    # ordinal_position on a migrated store, 0018, none in one made from the snapshot).
    "columns": "SELECT table_name, row_number() OVER (PARTITION BY table_name ORDER BY ordinal_position), "
               "column_name, data_type, character_maximum_length, "
               "numeric_precision, is_nullable, column_default FROM information_schema.columns "
               "WHERE table_schema = current_schema() ORDER BY 1, 2",
    "indexes": "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() ORDER BY 1, 2",
    "constraints": "SELECT conrelid::regclass::text, conname, contype, pg_get_constraintdef(c.oid) FROM pg_constraint c "
                   "JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = current_schema() ORDER BY 1, 2",
    "triggers": "SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(t.oid) FROM pg_trigger t "
                "WHERE NOT tgisinternal ORDER BY 1, 2",
    "functions": "SELECT proname, pg_get_functiondef(p.oid) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                 "WHERE n.nspname = current_schema() ORDER BY 1",
    "sequences": "SELECT sequence_name, data_type, start_value, increment FROM information_schema.sequences "
                 "WHERE sequence_schema = current_schema() ORDER BY 1",
    "views": "SELECT table_name, view_definition FROM information_schema.views WHERE table_schema = current_schema() "
             "ORDER BY 1",
    "version": "SELECT version_num FROM alembic_version",
}


def schema_of(url: str) -> dict:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            if connection.dialect.name == "sqlite":
                return {"sqlite_master": snapshot.sqlite_schema(connection),
                        "version": connection.exec_driver_sql("SELECT version_num FROM alembic_version").all()}
            return {what: [tuple(r) for r in connection.exec_driver_sql(sql)] for what, sql in PG_CATALOG.items()}
    finally:
        engine.dispose()


def made_from_snapshot(url: str, monkeypatch) -> None:
    """A new store opened at `url`, made from the snapshot (not migrated: checked)."""
    made = []
    create = snapshot.create
    monkeypatch.setattr(snapshot, "create", lambda connection: made.append(create(connection)) or made[-1])
    with Store(url):
        pass
    monkeypatch.setattr(snapshot, "create", create)
    assert made == [True]


@pytest.fixture(params=["sqlite", "postgresql"])
def two_urls(request, tmp_path):
    """Two new, empty databases of one kind: (migrated, from the snapshot, pg_dump or None)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'migrated.db'}", f"sqlite:///{tmp_path / 'snapshot.db'}", None
    server = request.getfixturevalue("pg_server")
    first = request.getfixturevalue("pg_url")
    second = server.create_database()
    request.addfinalizer(lambda: server.drop_database(second))
    return first, server.url(second), str(Path(server.bin) / "pg_dump")


def test_a_store_from_the_snapshot_is_the_migrated_store(two_urls, monkeypatch):
    migrated, frozen, pg_dump = two_urls
    command.upgrade(alembic_config(migrated), "head")
    made_from_snapshot(frozen, monkeypatch)
    assert schema_of(frozen) == schema_of(migrated)
    assert schema_of(frozen)["version"] == [(SCHEMA_HEAD,)]
    # SQLite: the snapshot file is today's migrated schema, statement for statement.
    # PostgreSQL: pg_dump says the same of both (its text varies with its version: the
    # catalogs above are the check that holds on any).
    if pg_dump is None:
        assert snapshot.migrated_sqlite() == list(snapshot.statements("sqlite"))
    else:
        assert snapshot.dump_postgresql(frozen, pg_dump) == snapshot.dump_postgresql(migrated, pg_dump)
    # Either store goes down (past 0011's triggers) and up again alike.
    for url in (migrated, frozen):
        command.downgrade(alembic_config(url), "0010")
    assert schema_of(frozen) == schema_of(migrated)
    for url in (migrated, frozen):
        command.upgrade(alembic_config(url), "head")
    assert schema_of(frozen) == schema_of(migrated)


def test_a_snapshot_of_another_revision_is_not_used(monkeypatch, tmp_path):
    """A snapshot left behind by a new migration is ignored: the store is migrated."""
    monkeypatch.setattr(snapshot, "SCHEMA_HEAD", "0014")
    snapshot.statements.cache_clear()
    try:
        assert snapshot.statements("sqlite") is None
    finally:
        monkeypatch.undo()
        snapshot.statements.cache_clear()
    assert snapshot.statements("sqlite") is not None


def test_a_database_with_tables_is_migrated_not_made(tmp_path, monkeypatch):
    """Only an empty database is made from the snapshot: one holding a table (here a store
    at 0014) is migrated, its rows kept."""
    url = f"sqlite:///{tmp_path / 'old.db'}"
    command.upgrade(alembic_config(url), "0014")
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.exec_driver_sql("INSERT INTO experiment (id, name, hypothesis, status, acceptance, workload_recipe, "
                                   "workload_hash, spec_text, spec_hash, limitations, open_questions, created_at) "
                                   "VALUES (1, 'old', 'h', 'testing', '[]', 'gemm', 'w', 's', 'sh', '', '', "
                                   "'2026-01-01 00:00:00')")
    engine.dispose()
    made = []
    create = snapshot.create
    monkeypatch.setattr(snapshot, "create", lambda connection: made.append(create(connection)) or made[-1])
    with Store(url) as store:
        assert store.experiments()["name"].tolist() == ["old"]
    assert made == [False]
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    command.upgrade(alembic_config(fresh), "head")
    assert schema_of(url) == schema_of(fresh)
