"""Managed PostgreSQL databases (``client.databases``): docs/databases.md."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence
from urllib.parse import quote

from ._context import ClientContext

__all__ = ["Databases"]


def bytes_(b: Any) -> bytes:
    return bytes(b or b"")


def _db(database_id: str, sub: str = "") -> str:
    if not database_id:
        raise ValueError("database_id is required")
    return "/v1/databases/" + quote(database_id, safe="") + sub


class Databases:
    """``client.databases``: managed PostgreSQL, each database its own microVM restored from a
    baked snapshot. Connect with any PostgreSQL client to ``connection["uri"]`` (TLS through the
    server's router), or query over HTTP with :meth:`query`."""

    def __init__(self, client: ClientContext) -> None:
        self._client = client
        self._http = client._http

    def create(self, name: str, version: Optional[str] = None, extensions: Optional[Sequence[str]] = None,
               vcpus: Optional[int] = None, memory_mib: Optional[int] = None, storage_gib: Optional[int] = None,
               suspend_after_seconds: Optional[int] = None) -> Dict[str, Any]:
        """Create a database. The answer's ``password`` (and ``connection["uri"]``, which carries
        it) is shown once: keep it. ``version`` "16" is taken as 17 (``note`` says so)."""
        body: Dict[str, Any] = {"name": name}
        for k, v in (("version", version), ("extensions", list(extensions) if extensions is not None else None),
                     ("vcpus", vcpus), ("memory_mib", memory_mib), ("storage_gib", storage_gib),
                     ("suspend_after_seconds", suspend_after_seconds)):
            if v is not None:
                body[k] = v
        return self._http.request("POST", "/v1/databases", json_body=body, timeout=self._client.create_timeout).json() or {}

    def list(self) -> List[Dict[str, Any]]:
        """Your team's databases, newest first (without passwords)."""
        return self._http.get_list("/v1/databases", "databases")

    def get(self, database_id: str) -> Dict[str, Any]:
        return self._http.get_json(_db(database_id))

    def delete(self, database_id: str) -> None:
        """Delete the database and its data."""
        self._http.request("DELETE", _db(database_id), idempotent=True)

    def branch(self, database_id: str, name: str) -> Dict[str, Any]:
        """A new database that is a copy-on-write fork of this one now (same owner and password)."""
        return self._http.request("POST", _db(database_id, "/branches"), json_body={"name": name},
                                  timeout=self._client.create_timeout).json() or {}

    def rotate_password(self, database_id: str) -> Dict[str, Any]:
        """Give the owner a new password; the answer's ``password`` is shown once."""
        return self._http.request("POST", _db(database_id, "/password")).json() or {}

    def stats(self, database_id: str) -> Dict[str, Any]:
        """``{size_bytes, connections, transactions_committed, transactions_rolled_back, uptime_seconds}``."""
        return self._http.get_json(_db(database_id, "/stats"))

    def logs(self, database_id: str, bytes: Optional[int] = None) -> str:
        """The end of the database's postgres log (default 64 KiB)."""
        r = self._http.request("GET", _db(database_id, "/logs"), params={"bytes": bytes}, idempotent=True)
        return bytes_(r.body).decode("utf-8", "replace")

    def backup(self, database_id: str) -> Dict[str, Any]:
        """Back the database up now (a snapshot of its VM; ``published``: in the blob store)."""
        return self._http.request("POST", _db(database_id, "/backups"), timeout=self._client.create_timeout).json() or {}

    def backups(self, database_id: str) -> List[Dict[str, Any]]:
        return self._http.get_list(_db(database_id, "/backups"), "backups")

    def restore(self, database_id: str, name: str, to_time: Optional[str] = None, backup_id: Optional[str] = None) -> Dict[str, Any]:
        """A NEW database: recovered to the instant ``to_time`` (RFC 3339; with a blob store the
        WAL archive reaches any instant after the first base backup), or from backup ``backup_id``,
        else from the newest backup (at or before ``to_time``)."""
        body: Dict[str, Any] = {"name": name}
        if to_time is not None:
            body["to_time"] = to_time
        if backup_id is not None:
            body["backup_id"] = backup_id
        return self._http.request("POST", _db(database_id, "/restore"), json_body=body,
                                  timeout=self._client.create_timeout).json() or {}

    def query(self, database_id: str, query: str, params: Optional[Sequence[Any]] = None) -> Dict[str, Any]:
        """Run one statement as the owner (``$1``, ``$2``, … from ``params``). Returns ``{fields,
        rows, command, rowCount}``: rows are lists of values in PostgreSQL's text form (None for
        NULL). A statement the database refuses raises InvalidRequest whose message names it."""
        body: Dict[str, Any] = {"query": query}
        if params is not None:
            body["params"] = list(params)
        return self._http.request("POST", _db(database_id, "/query"), json_body=body).json() or {}
