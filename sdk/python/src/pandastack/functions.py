"""Functions and cron schedules (``client.functions``, ``client.schedules``): docs/functions.md."""

from __future__ import annotations

import io
import json
import os
import uuid
import zipfile
from typing import Any, Dict, List, Mapping, Optional, Union
from urllib.parse import quote

from ._context import ClientContext
from ._tree import source_bytes

__all__ = ["Functions", "Schedules", "bundle_directory"]


def bundle_directory(path: str) -> bytes:
    """A .zip of the files under directory ``path`` (relative names), as a deploy takes it."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for root, _dirs, files in os.walk(path):
            for name in files:
                full = os.path.join(root, name)
                if os.path.isfile(full) and not os.path.islink(full):
                    zf.write(full, os.path.relpath(full, path).replace(os.sep, "/"))
    return buf.getvalue()


def _multipart(spec: Mapping[str, Any], bundle: bytes):
    boundary = "pandastack-" + uuid.uuid4().hex
    parts = [
        b"--" + boundary.encode() + b'\r\nContent-Disposition: form-data; name="spec"\r\n'
        b"Content-Type: application/json\r\n\r\n" + json.dumps(dict(spec)).encode() + b"\r\n",
        b"--" + boundary.encode() + b'\r\nContent-Disposition: form-data; name="bundle"; filename="bundle"\r\n'
        b"Content-Type: application/octet-stream\r\n\r\n" + bundle + b"\r\n",
        b"--" + boundary.encode() + b"--\r\n",
    ]
    return b"".join(parts), "multipart/form-data; boundary=" + boundary


def _fn(function_id: str, sub: str = "") -> str:
    if not function_id:
        raise ValueError("function_id is required")
    return "/v1/functions/" + quote(function_id, safe="") + sub


def _sch(schedule_id: str, sub: str = "") -> str:
    if not schedule_id:
        raise ValueError("schedule_id is required")
    return "/v1/schedules/" + quote(schedule_id, safe="") + sub


class Functions:
    """``client.functions``: deploy code bundles and invoke them. Every invocation runs in a fresh
    microVM restored from the version's warm snapshot (the handler already imported)."""

    def __init__(self, client: ClientContext) -> None:
        self._client = client
        self._http = client._http

    def deploy(self, name: str, bundle: Union[bytes, str], runtime: str = "python3", handler: str = "main.handler",
               env: Optional[Mapping[str, str]] = None, secrets: Optional[Mapping[str, str]] = None,
               timeout_seconds: Optional[int] = None, memory_mib: Optional[int] = None,
               max_concurrency: Optional[int] = None, retries: Optional[int] = None) -> Dict[str, Any]:
        """Deploy ``bundle`` (bytes of a .zip or .tar.gz, or a path: a directory is zipped, a
        file sent as is) as the next version of function ``name``; returns ``{id, name, version,
        state, ...}`` once its warm snapshot is baked."""
        bundle = source_bytes(bundle, bundle_directory)
        spec: Dict[str, Any] = {"name": name, "runtime": runtime, "handler": handler}
        for k, v in (("env", env), ("secrets", secrets), ("timeout_seconds", timeout_seconds), ("memory_mib", memory_mib),
                     ("max_concurrency", max_concurrency), ("retries", retries)):
            if v is not None:
                spec[k] = dict(v) if isinstance(v, Mapping) else v
        body, ctype = _multipart(spec, bundle)
        r = self._http.request("POST", "/v1/functions", data=body, headers={"Content-Type": ctype},
                               timeout=self._client.create_timeout)
        return r.json() or {}

    def list(self) -> List[Dict[str, Any]]:
        """Your team's functions, newest first."""
        return self._http.get_list("/v1/functions", "functions")

    def get(self, function_id: str) -> Dict[str, Any]:
        return self._http.get_json(_fn(function_id))

    def versions(self, function_id: str) -> List[Dict[str, Any]]:
        return self._http.get_list(_fn(function_id, "/versions"), "versions")

    def delete(self, function_id: str) -> None:
        self._http.request("DELETE", _fn(function_id), idempotent=True)

    def invoke(self, function_id: str, payload: Any = None, async_: bool = False) -> Dict[str, Any]:
        """Invoke the function with ``payload`` (any JSON value). Returns the run: ``{id, status,
        result, logs, duration_ms, error: {type, message, traceback}}``; with ``async_=True`` the
        queued run at once (poll :meth:`run`)."""
        params = {"async": "1"} if async_ else None
        timeout = None if not async_ else -1.0
        r = self._http.request("POST", _fn(function_id, "/invoke"), params=params, json_body={"payload": payload},
                               timeout=timeout)
        return r.json() or {}

    def runs(self, function_id: str, limit: Optional[int] = None) -> List[Dict[str, Any]]:
        d = self._http.get_json(_fn(function_id, "/runs"), params={"limit": limit})
        return d.get("runs") or []

    def run(self, function_id: str, run_id: str) -> Dict[str, Any]:
        return self._http.get_json(_fn(function_id, "/runs/" + quote(run_id, safe="")))


class Schedules:
    """``client.schedules``: cron schedules of a function or of a command in a fresh sandbox."""

    def __init__(self, client: ClientContext) -> None:
        self._http = client._http

    def create(self, cron: str, timezone: str = "UTC", function_id: Optional[str] = None, payload: Any = None,
               template: Optional[str] = None, cmd: Optional[str] = None, overlap: Optional[str] = None,
               missed: Optional[str] = None, enabled: Optional[bool] = None, name: Optional[str] = None,
               timeout_seconds: Optional[int] = None) -> Dict[str, Any]:
        """Create a schedule: ``cron`` is 5 fields or ``@hourly``-style, read in ``timezone``;
        ``overlap`` skip|queue|allow, ``missed`` skip|run_once."""
        body: Dict[str, Any] = {"cron": cron, "timezone": timezone}
        for k, v in (("function_id", function_id), ("payload", payload), ("template", template), ("cmd", cmd),
                     ("overlap", overlap), ("missed", missed), ("enabled", enabled), ("name", name),
                     ("timeout_seconds", timeout_seconds)):
            if v is not None:
                body[k] = v
        return self._http.request("POST", "/v1/schedules", json_body=body).json() or {}

    def list(self) -> List[Dict[str, Any]]:
        return self._http.get_list("/v1/schedules", "schedules")

    def get(self, schedule_id: str) -> Dict[str, Any]:
        return self._http.get_json(_sch(schedule_id))

    def delete(self, schedule_id: str) -> None:
        self._http.request("DELETE", _sch(schedule_id), idempotent=True)

    def pause(self, schedule_id: str) -> Dict[str, Any]:
        return self._http.request("POST", _sch(schedule_id, "/pause"), idempotent=True).json() or {}

    def resume(self, schedule_id: str) -> Dict[str, Any]:
        return self._http.request("POST", _sch(schedule_id, "/resume"), idempotent=True).json() or {}

    def trigger(self, schedule_id: str) -> Dict[str, Any]:
        """Run the schedule now; returns the run."""
        return self._http.request("POST", _sch(schedule_id, "/trigger")).json() or {}

    def runs(self, schedule_id: str, limit: Optional[int] = None) -> List[Dict[str, Any]]:
        d = self._http.get_json(_sch(schedule_id, "/runs"), params={"limit": limit})
        return d.get("runs") or []
