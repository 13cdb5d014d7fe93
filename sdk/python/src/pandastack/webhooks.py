"""Webhooks (``client.webhooks``) and verifying their deliveries (:func:`verify_webhook`): docs/events.md."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any, Dict, List, Optional, Sequence, Union
from urllib.parse import quote

from ._context import ClientContext


def _wh(webhook_id: str, sub: str = "") -> str:
    return "/v1/webhooks/" + quote(webhook_id, safe="") + sub


class Webhooks:
    """``client.webhooks``: signed HTTP deliveries of the team's events."""

    def __init__(self, client: ClientContext) -> None:
        self._http = client._http

    def create(self, url: str, events: Sequence[str]) -> Dict[str, Any]:
        """Create a webhook for ``events`` (``"*"``: all); keep the answer's ``secret``: it is shown this once."""
        return self._http.request("POST", "/v1/webhooks", json_body={"url": url, "events": list(events)}).json() or {}

    def list(self) -> List[Dict[str, Any]]:
        return self._http.get_list("/v1/webhooks", "webhooks")

    def get(self, webhook_id: str) -> Dict[str, Any]:
        return self._http.get_json(_wh(webhook_id))

    def delete(self, webhook_id: str) -> None:
        self._http.request("DELETE", _wh(webhook_id), idempotent=True)

    def deliveries(self, webhook_id: str, limit: Optional[int] = None) -> List[Dict[str, Any]]:
        """The webhook's deliveries, newest first."""
        d = self._http.get_json(_wh(webhook_id, "/deliveries"), params={"limit": limit})
        return d.get("deliveries") or []


class WebhookSignatureError(ValueError):
    """A delivery whose PandaStack-Signature does not verify."""


def verify_webhook(secret: str, signature: Optional[str], body: Union[bytes, str], tolerance_seconds: float = 300,
                   now: Optional[float] = None) -> Dict[str, Any]:
    """Verify a delivery (``signature``: its PandaStack-Signature header; ``body``: the raw body) and
    return the parsed event; raises :class:`WebhookSignatureError` if it does not match ``secret``
    or is older (or newer) than ``tolerance_seconds``."""
    parts = dict(p.strip().split("=", 1) for p in (signature or "").split(",") if "=" in p)
    try:
        ts = int(parts.get("t", ""))
    except ValueError:
        raise WebhookSignatureError("malformed PandaStack-Signature header") from None
    if not parts.get("v1"):
        raise WebhookSignatureError("malformed PandaStack-Signature header")
    if abs((time.time() if now is None else now) - ts) > tolerance_seconds:
        raise WebhookSignatureError("PandaStack-Signature is too old (or from the future)")
    raw = body.encode() if isinstance(body, str) else body
    want = hmac.new(secret.encode(), str(ts).encode() + b"." + raw, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, parts["v1"]):
        raise WebhookSignatureError("PandaStack-Signature does not match")
    return json.loads(raw)
