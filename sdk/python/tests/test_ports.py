"""Private ports against a real PandaStack: the port proxy asks for the sandbox's traffic token."""

from __future__ import annotations

import http.client
import time
import unittest
import urllib.parse
from typing import Dict, Optional

from support import LiveTestCase

SERVE = "nohup setsid python3 -m http.server 8000 --directory /tmp >/dev/null 2>&1 & echo started"


def proxy_get(base_url: str, sandbox_id: str, headers: Optional[Dict[str, str]] = None) -> int:
    """GET / on port 8000 of the sandbox through the server's port proxy (proxy domain localhost)."""
    u = urllib.parse.urlsplit(base_url)
    conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port or 80, timeout=30)
    try:
        conn.request("GET", "/", headers={"Host": "8000-%s.localhost" % sandbox_id, **(headers or {})})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


class PrivatePorts(LiveTestCase):
    def test_private_ports_need_the_token(self) -> None:
        sb = self.create(public_ports=False)
        self.assertFalse(sb.public_ports)
        token = sb.traffic_token
        self.assertTrue(token and token.startswith("pdt_"), token)
        sb.refresh()  # a GET does not carry the token; the object keeps it
        self.assertEqual(sb.traffic_token, token)
        self.assertFalse(sb.public_ports)

        self.assertEqual(sb.exec(SERVE).stdout.strip(), "started")
        self.assertEqual(proxy_get(self.base_url, sb.id), 401)
        self.assertEqual(proxy_get(self.base_url, sb.id, {"X-PandaStack-Traffic-Token": "pdt_wrong"}), 401)
        deadline = time.monotonic() + 60
        status = 0
        while time.monotonic() < deadline:  # the guest's server may still be starting
            status = proxy_get(self.base_url, sb.id, {"X-PandaStack-Traffic-Token": token})
            if status == 200:
                break
            time.sleep(0.5)
        self.assertEqual(status, 200)

        child = sb.fork()
        self.track([child])
        self.assertFalse(child.public_ports)
        self.assertEqual(child.traffic_token, token)

    def test_public_by_default(self) -> None:
        sb = self.create()
        self.assertTrue(sb.public_ports)
        self.assertIsNone(sb.traffic_token)


if __name__ == "__main__":
    unittest.main()
