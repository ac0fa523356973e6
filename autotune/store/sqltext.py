"""SQL text on either database: statements are written once, with ``?`` placeholders,
and run through SQLAlchemy's ``exec_driver_sql`` in the driver's own parameter style, so
values are always bound as parameters, never formatted into the SQL."""

from __future__ import annotations

import json
import re
from typing import Any, Iterable

import sqlalchemy as sa


def driver_sql(dialect: str, sql: str) -> str:
    """``sql`` with ``?`` placeholders in the driver's own style: unchanged for SQLite;
    for psycopg ``%s``, with a literal ``%`` doubled (outside and inside quotes alike, as
    psycopg reads them). A ``?`` inside a quoted string or identifier is left alone; one
    in a comment, a dollar-quoted string or PostgreSQL's jsonb ``?`` operator is taken
    for a placeholder (write ``jsonb_exists(...)`` instead)."""
    if dialect == "sqlite":
        return sql
    out = []
    for part in re.split(r"""('(?:[^']|'')*'|"(?:[^"]|"")*")""", sql):
        part = part.replace("%", "%%")
        out.append(part if part[:1] in ("'", '"') else part.replace("?", "%s"))
    return "".join(out)


def sql(c: sa.Connection, text: str, params: Iterable[Any] = ()) -> sa.CursorResult:
    """Run ``text`` (``?`` placeholders) with ``params`` on the open connection ``c``."""
    return c.exec_driver_sql(driver_sql(c.dialect.name, text), tuple(params))


def json_field_equals(dialect: str, column: str, name: str, value: Any) -> tuple[str, list]:
    """A ``where`` clause (and its parameters): the JSON text in ``column`` has ``name``
    equal to ``value`` (a number, string or bool; SQLite's ``json_extract`` reads JSON
    ``true`` as 1, PostgreSQL compares ``jsonb``)."""
    if dialect == "postgresql":
        return f"({column}::jsonb -> ?) = ?::jsonb", [name, json.dumps(value)]
    return f"json_extract({column}, ?) = ?", [f'$."{name}"', value]


def insert_ignoring(c: sa.Connection, table: sa.Table, key: str) -> Any:
    """``insert into table`` that does nothing where a row with the same ``key`` is there
    (SQLite's and PostgreSQL's ``on conflict do nothing``)."""
    return _dialect_insert(c, table).on_conflict_do_nothing(index_elements=[key])


def upsert(c: sa.Connection, table: sa.Table, key: str, row: dict[str, Any],
           update: dict[str, Any]) -> None:
    """Insert ``row``, or where a row with the same ``key`` is there, set ``update`` on it
    (``on conflict do update``: one statement, safe under concurrent writers)."""
    c.execute(_dialect_insert(c, table).values(row).on_conflict_do_update(
        index_elements=[key], set_=update))


def _dialect_insert(c: sa.Connection, table: sa.Table) -> Any:
    if c.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(table)
