"""Where the results store is: a path (an SQLite file) or a database server's URL
(``postgresql://user@host:5432/dbname``), and how messages name it (never with its
password). Import-light: the command line reads ``--db`` with it."""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["DEFAULT_PATH", "ENV_VAR", "default_path", "is_url", "shown", "target"]

DEFAULT_PATH = "autotune.db"
ENV_VAR = "AUTOTUNE_DB"


def is_url(target: str | os.PathLike) -> bool:
    """Whether ``target`` names a database server (``postgresql://...``), not a file."""
    return isinstance(target, str) and re.match(r"^[a-z][a-z0-9+]*://", target) is not None


def target(db: str | os.PathLike | None = None) -> str | Path:
    """Where the store is: ``db``, else ``$AUTOTUNE_DB``, else ``autotune.db``; a URL stays
    a string, anything else is a path."""
    chosen = db if db is not None else (os.environ.get(ENV_VAR) or DEFAULT_PATH)
    return str(chosen) if is_url(chosen) else Path(chosen)


def default_path() -> str | Path:
    """``$AUTOTUNE_DB`` (a path or a URL), else ``autotune.db`` in the working directory."""
    return target(None)


def shown(db: str | os.PathLike | None) -> str:
    """How messages name the store ``db``: the path, or the URL without its password."""
    t = target(db)
    if isinstance(t, Path):
        return str(t)
    import sqlalchemy as sa
    from sqlalchemy import exc as sa_exc

    netloc = t.split("://", 1)[1].split("/", 1)[0]
    if netloc.count("@") > 1:  # an unescaped @ in the password: hide all before the host
        return re.sub(r"://[^/]*@", "://***@", t, count=1)
    try:
        url = sa.engine.make_url(t)
        if "password" in url.query:
            url = url.update_query_dict({"password": "***"})
        return url.render_as_string(hide_password=True)
    except (sa_exc.ArgumentError, ValueError):
        # unreadable: nothing before the host
        return re.sub(r"://[^/]*@", "://***@", t, count=1)
