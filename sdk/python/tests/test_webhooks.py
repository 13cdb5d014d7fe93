"""Webhooks against a real PandaStack (docs/events.md): a receiver on loopback (`pandastack up`
allows loopback destinations) gets the team's events, signed; deliveries are listed."""

from __future__ import annotations

import http.server
import threading
import time
import unittest

import pandastack
from support import LiveTestCase


class _Receiver(http.server.BaseHTTPRequestHandler):
    got: list = []

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        type(self).got.append((self.headers, body))  # names are case-insensitive here
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


class Webhooks(LiveTestCase):
    def test_events_reach_a_receiver_signed(self) -> None:
        _Receiver.got = []
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.shutdown)
        url = "http://127.0.0.1:%d/hook" % srv.server_address[1]

        hook = self.client.webhooks.create(url, ["sandbox.created", "sandbox.killed"])
        self.cleanup_quietly(self.client.webhooks.delete, hook["id"])
        self.assertTrue(hook["secret"].startswith("whsec_"))
        self.assertNotIn("secret", self.client.webhooks.get(hook["id"]))
        with self.assertRaises(pandastack.InvalidRequest):
            self.client.webhooks.create("ftp://example.com/x", ["*"])
        with self.assertRaises(pandastack.InvalidRequest):
            self.client.webhooks.create(url, ["sandbox.exploded"])

        sb = self.create(metadata={"suite": "py-webhooks"})
        sb.kill()
        seen = {}
        for _ in range(600):  # the deliveries come within a second or two; give a loaded host time
            for headers, body in _Receiver.got:
                ev = pandastack.verify_webhook(hook["secret"], headers.get("PandaStack-Signature"), body)
                if ev["sandbox"]["id"] == sb.id:
                    seen[ev["type"]] = headers.get("PandaStack-Delivery")
            if len(seen) == 2:
                break
            time.sleep(0.2)
        self.assertEqual(sorted(seen), ["sandbox.created", "sandbox.killed"])
        with self.assertRaises(pandastack.WebhookSignatureError):
            headers, body = _Receiver.got[0]
            pandastack.verify_webhook("whsec_wrong", headers.get("PandaStack-Signature"), body)

        ids = {d["id"] for d in self.client.webhooks.deliveries(hook["id"]) if d["state"] == "succeeded"}
        self.assertTrue(set(seen.values()) <= ids, (seen, ids))
        self.client.webhooks.delete(hook["id"])
        with self.assertRaises(pandastack.NotFound):
            self.client.webhooks.get(hook["id"])


if __name__ == "__main__":
    unittest.main()
