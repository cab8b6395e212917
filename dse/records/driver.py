"""The SQLite driver's own cursor inside a transaction SQLAlchemy began: the sweep's hot
path (dse.records.writes, latest) without SQLAlchemy's work per statement and per row
read back, its errors raised as SQLAlchemy's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError


class DriverCursor:
    """The SQLite driver's own cursor, in a transaction SQLAlchemy began: the sweep's hot
    path without SQLAlchemy's work per statement (on a small statement, as much as the
    statement's own). Errors come out as SQLAlchemy's, as from `exec_driver_sql`, so the
    retries on a busy database and the callers see one kind."""

    def __init__(self, connection: Connection):
        self.dialect = connection.dialect
        self._cursor = connection.connection.driver_connection.cursor()
        self._error = self.dialect.loaded_dbapi.Error

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        try:
            return self._cursor.execute(sql, params)
        except self._error as error:
            raise DBAPIError.instance(sql, params, error, self._error, dialect=self.dialect) from None

    def executemany(self, sql: str, rows: list[Sequence[Any]]) -> Any:
        try:
            return self._cursor.executemany(sql, rows)
        except self._error as error:
            raise DBAPIError.instance(sql, rows, error, self._error, dialect=self.dialect, ismulti=True) from None


def executor(connection: Connection) -> Any:
    """A way to run one statement with its parameters in the connection's transaction: the
    driver's cursor on SQLite (`DriverCursor.execute`), `exec_driver_sql` elsewhere."""
    return DriverCursor(connection).execute if connection.dialect.name == "sqlite" else connection.exec_driver_sql
