"""Git-deployed apps (``client.apps``): docs/apps.md."""

from __future__ import annotations

import fnmatch
import io
import os
import tarfile
import time
from typing import Any, Dict, List, Mapping, Optional, Union
from urllib.parse import quote

from ._context import ClientContext
from ._tree import source_bytes

__all__ = ["Apps", "pack_directory"]


def _ignores(path: str) -> List[str]:
    try:
        with open(os.path.join(path, ".gitignore"), encoding="utf-8") as f:
            return [l.strip() for l in f if l.strip() and not l.startswith("#") and not l.startswith("!")]
    except OSError:
        return []


def _ignored(rel: str, is_dir: bool, patterns: List[str]) -> bool:
    name = rel.rsplit("/", 1)[-1]
    for p in patterns:
        if p.endswith("/"):
            if not is_dir:
                continue
            p = p[:-1]
        if "/" in p:
            if fnmatch.fnmatchcase(rel, p.lstrip("/")):
                return True
        elif fnmatch.fnmatchcase(name, p):
            return True
    return False


def pack_directory(path: str) -> bytes:
    """A .tar.gz of directory ``path`` as a deploy takes it: .git and what its top-level
    .gitignore ignores are left out (the CLI also reads nested .gitignore files and ``!``)."""
    patterns = _ignores(path)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for root, dirs, files in os.walk(path):
            rel_root = os.path.relpath(root, path).replace(os.sep, "/")
            rel_root = "" if rel_root == "." else rel_root + "/"
            dirs[:] = sorted(d for d in dirs if d != ".git" and not _ignored(rel_root + d, True, patterns))
            for name in sorted(files):
                full = os.path.join(root, name)
                if os.path.isfile(full) and not os.path.islink(full) and not _ignored(rel_root + name, False, patterns):
                    tf.add(full, rel_root + name, recursive=False)
    return buf.getvalue()


def _app(app: str, sub: str = "") -> str:
    if not app:
        raise ValueError("app is required (its id or name)")
    return "/v1/apps/" + quote(app, safe="") + sub


class Apps:
    """``client.apps``: apps built in microVMs from a source upload (or a git push), released as
    snapshots of the started app, served at ``<name>.apps.<domain>``, switched blue-green."""

    def __init__(self, client: ClientContext) -> None:
        self._http = client._http

    def create(self, name: str, env: Optional[Mapping[str, str]] = None, secrets: Optional[Mapping[str, str]] = None,
               build: Optional[Mapping[str, Any]] = None, **settings: Any) -> Dict[str, Any]:
        """Create app ``name`` (its host name). ``build`` overrides the detected plan
        (``framework``, ``install``, ``build``, ``start``, ``port``); ``settings`` are the other
        fields of docs/apps.md (``branch``, ``suspend_after_seconds``, ``health_timeout_seconds``…)."""
        body: Dict[str, Any] = {"name": name, **settings}
        for k, v in (("env", env), ("secrets", secrets), ("build", build)):
            if v is not None:
                body[k] = dict(v)
        return self._http.request("POST", "/v1/apps", json_body=body).json() or {}

    def list(self) -> List[Dict[str, Any]]:
        return self._http.get_list("/v1/apps", "apps")

    def get(self, app: str) -> Dict[str, Any]:
        return self._http.get_json(_app(app))

    def update(self, app: str, **settings: Any) -> Dict[str, Any]:
        """Change settings (from the next deploy): any field of create but the name."""
        return self._http.request("PATCH", _app(app), json_body=settings).json() or {}

    def delete(self, app: str) -> None:
        self._http.request("DELETE", _app(app), idempotent=True)

    def set_env(self, app: str, env: Mapping[str, str]) -> Dict[str, Any]:
        """Add or change environment variables, keeping the others (from the next deploy)."""
        return self.update(app, set_env=dict(env))

    def set_secrets(self, app: str, secrets: Mapping[str, str]) -> Dict[str, Any]:
        """Add or change secrets, keeping the others (from the next deploy)."""
        return self.update(app, set_secrets=dict(secrets))

    def unset(self, app: str, *names: str) -> Dict[str, Any]:
        """Remove variables by name, from env or secrets (each must be set)."""
        return self.update(app, unset=list(names))

    def previews(self, app: str) -> List[Dict[str, Any]]:
        """The app's branch previews: ``{slug, branch, deployment_id, url}``."""
        return self._http.get_list(_app(app, "/previews"), "previews")

    def delete_preview(self, app: str, branch: str) -> None:
        """Delete a branch's preview (by branch or slug): its route and instance go; its release
        stays for a rollback."""
        self._http.request("DELETE", _app(app, "/previews/" + quote(branch, safe="")), idempotent=True)

    def deploy(self, app: str, source: Union[bytes, str], branch: Optional[str] = None,
               clean: bool = False) -> Dict[str, Any]:
        """Deploy ``source`` (bytes of a .tar.gz or .zip, or a path: a directory is packed with
        :func:`pack_directory`, a file sent as is); returns the queued deployment (see :meth:`wait`).
        A ``branch`` other than the app's deploys its preview (``<app>--<branch>.apps.<domain>``).
        ``clean`` skips the build cache (a new build sandbox, the install run)."""
        return self._http.request("POST", _app(app, "/deployments"), data=source_bytes(source, pack_directory),
                                  params={"branch": branch, "clean": clean or None},
                                  headers={"Content-Type": "application/gzip"}).json() or {}

    def connect_github(self, app: str, repo: str, branch: Optional[str] = None,
                       token: Optional[str] = None) -> Dict[str, Any]:
        """Connect the app to GitHub repository ``repo`` ("owner/name"): returns ``{webhook_url,
        secret, ...}`` to add as the repository's webhook (the secret is shown once). ``token``
        reads a private repository (sealed on the server, never answered)."""
        body: Dict[str, Any] = {"repo": repo}
        if branch:
            body["branch"] = branch
        if token:
            body["token"] = token
        return self._http.request("POST", _app(app, "/github"), json_body=body).json() or {}

    def deployments(self, app: str, limit: Optional[int] = None) -> List[Dict[str, Any]]:
        d = self._http.get_json(_app(app, "/deployments"), params={"limit": limit})
        return d.get("deployments") or []

    def deployment(self, app: str, deployment_id: str) -> Dict[str, Any]:
        return self._http.get_json(_app(app, "/deployments/" + quote(deployment_id, safe="")))

    def wait(self, app: str, deployment_id: str, timeout: float = 900.0, interval: float = 0.5) -> Dict[str, Any]:
        """Poll the deployment until it is ``live`` or ``failed`` (or ``timeout`` seconds pass:
        TimeoutError) and return it."""
        deadline = time.monotonic() + timeout
        while True:
            d = self.deployment(app, deployment_id)
            if d.get("state") in ("live", "failed"):
                return d
            if time.monotonic() > deadline:
                raise TimeoutError("deployment %s is still %s" % (deployment_id, d.get("state")))
            time.sleep(interval)

    def build_logs(self, app: str, deployment_id: str) -> str:
        """A deployment's build logs so far (secrets redacted)."""
        path = _app(app, "/deployments/" + quote(deployment_id, safe="") + "/logs")
        return self._http.request("GET", path, idempotent=True).body.decode("utf-8", "replace")

    def logs(self, app: str) -> str:
        """The live instances' output so far, each line prefixed ``[sb_…] `` (secrets redacted)."""
        return self._http.request("GET", _app(app, "/logs"), idempotent=True).body.decode("utf-8", "replace")

    def rollback(self, app: str, deployment_id: str) -> Dict[str, Any]:
        """Serve an earlier deployment's release again (no rebuild); returns it, live."""
        return self._http.request("POST", _app(app, "/rollback"), json_body={"deployment_id": deployment_id}).json() or {}
