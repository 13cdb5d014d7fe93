"""The PandaStack client."""

from __future__ import annotations

import os
from typing import Any, Dict, Iterator, Mapping, Optional

from . import errors
from . import _context
from ._closing import Closing
from ._context import ClientContext
from ._http import LineIterator, Send, Transport
from .databases import Databases
from .apps import Apps
from .functions import Functions, Schedules
from .webhooks import Webhooks
from .sandbox import Sandboxes, Snapshots, Templates, Volumes

__all__ = ["PandaStack", "DEFAULT_BASE_URL"]

#: where the hosted API lives; a self-hosted `pandastack up` prints its own base URL
DEFAULT_BASE_URL = "https://api.pandastack.ai"


class PandaStack(Closing):
    """A client of the PandaStack API.

    ``token`` (alias ``api_key``) defaults to ``$PANDASTACK_API_KEY``, else ``$PANDASTACK_TOKEN``;
    ``base_url`` to ``$PANDASTACK_BASE_URL``, else ``https://api.pandastack.ai``. An explicit
    argument beats the environment.

    ``timeout`` (seconds, ``None`` for none) bounds waiting for an answer to an ordinary call;
    ``exec`` waits for its own ``timeout_seconds`` plus a minute, and ``create``/``fork``/
    ``snapshot``/``hibernate``/``wake`` wait up to ``create_timeout`` (the first create of a
    template bakes it). Idempotent calls are retried up to ``max_retries`` times on 429/503
    answers and broken connections, with exponential backoff.

    ``send`` replaces the one HTTP exchange under all of that (default: a new ``http.client``
    connection per request): a callable taking a :class:`~pandastack.HTTPRequest` and returning
    a response shaped like ``http.client.HTTPResponse``, e.g. a :class:`~pandastack.HTTPResponse`.
    Use it to answer from a script in tests (no server, no socket) or to route requests your
    own way; headers, retries and error mapping stay the SDK's.

    The client holds no open connections; it is safe to share between threads.
    """

    def __init__(
        self,
        token: Optional[str] = None,
        base_url: Optional[str] = None,
        timeout: Optional[float] = 60.0,
        *,
        api_key: Optional[str] = None,
        max_retries: int = 3,
        create_timeout: Optional[float] = 900.0,
        env: Optional[Mapping[str, str]] = None,
        send: Optional[Send] = None,
    ) -> None:
        environ = os.environ if env is None else env
        key = token or api_key or environ.get("PANDASTACK_API_KEY") or environ.get("PANDASTACK_TOKEN")
        if not key:
            raise errors.ConfigurationError(
                "no API key: pass PandaStack(token=...) or set PANDASTACK_API_KEY (pds_...)"
            )
        url = base_url or environ.get("PANDASTACK_BASE_URL") or DEFAULT_BASE_URL
        self.base_url = url.rstrip("/")
        self.timeout = timeout
        self.create_timeout = create_timeout
        self._http = Transport(self.base_url, key.strip(), timeout, max_retries, send=send)
        # The resources see the client only as a ClientContext (transport and timeouts).
        ctx: ClientContext = self
        self.sandboxes = Sandboxes(ctx)
        #: the same object as :attr:`sandboxes`
        self.sandbox = self.sandboxes
        self.snapshots = Snapshots(ctx)
        self.templates = Templates(ctx)
        self.volumes = Volumes(ctx)
        self.functions = Functions(ctx)
        self.schedules = Schedules(ctx)
        self.databases = Databases(ctx)
        self.apps = Apps(ctx)
        #: signed HTTP deliveries of the team's events (docs/events.md)
        self.webhooks = Webhooks(ctx)

    def info(self) -> Dict[str, Any]:
        """What the deployment enforces for every team: ``{"version", "egress": {"blocked",
        "private", "open", "also_blocked"}}`` — the destinations no egress policy opens, and the
        private ranges the operator opened (``GET /v1/info``)."""
        return self._http.request("GET", "/v1/info", idempotent=True).json()

    def usage(self) -> Dict[str, Any]:
        """The team's use against its quotas (``GET /v1/usage``): ``{"team_id", "sandboxes",
        "vcpus", "memory_mib", "volumes", "volume_mib", "databases", "apps", "functions", "snapshot_mib"}``, each ``{"used", "limit"}`` (``limit`` None: no limit)."""
        return self._http.request("GET", "/v1/usage", idempotent=True).json()

    def audit(self, since: Any = None, resource: Optional[str] = None, limit: Optional[int] = None,
              cursor: Optional[str] = None) -> Dict[str, Any]:
        """One page of the team's audit log, newest first (``GET /v1/audit``, admin keys):
        ``{"entries": [...], "next_cursor"}``; pass ``next_cursor`` back as ``cursor`` for the next
        page. ``since`` is an RFC 3339 string or an aware ``datetime``."""
        if hasattr(since, "isoformat"):
            since = since.isoformat()
        params = {"since": since, "resource": resource, "limit": limit, "cursor": cursor}
        page = self._http.get_json("/v1/audit", params=params)
        return {"entries": page.get("entries") or [], "next_cursor": page.get("next_cursor")}

    def events(self, timeout: Optional[float] = 60.0) -> Iterator[Dict[str, Any]]:
        """Follow the team's changes (``GET /v1/events``): yields ``{"type": "ready"}``, then
        ``{"type": "sandbox", "at", "sandbox": {...}}`` whenever a sandbox is created or changes
        state, host or error, ``{"type": "deployment", "at", "deployment": {...}}`` whenever an
        app deployment is made or changes state (built, failed, switched to, superseded),
        ``{"type": "change", "at", "change": {"method", "route",
        "resource_id", "status"}}`` for every call that changed one of the team's resources, and
        ``{"type": "ping"}`` after 15 s of silence (so a
        ``timeout`` above that only fires on a dead server). Ends when the key is revoked; stop
        early by closing the generator (``.close()``)."""
        return LineIterator(self._http.stream_lines("GET", "/v1/events", timeout=timeout))

    def close(self) -> None:
        """Nothing to release (connections are per request); kept for symmetry."""


    def __repr__(self) -> str:
        return "PandaStack(base_url=%r)" % self.base_url


_context._client_factory = PandaStack  # Sandbox.connect makes its client through this
