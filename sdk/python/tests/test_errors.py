"""Error mapping against the real server, and retry behaviour against a scripted local server."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
import unittest
import urllib.error
import urllib.request
from typing import Any, Callable, Dict, List, Optional, Tuple

import pandastack
from support import ERROR_CLASSES, TEMPLATE, LiveTestCase


def raw_api_error(base_url: str, key: str, method: str, path: str, body: Any) -> Tuple[int, Dict[str, Any]]:
    """The API's own answer to a request, without the SDK."""
    req = urllib.request.Request(base_url + path, method=method, data=json.dumps(body).encode(),
                                 headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=30) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


class LiveErrors(LiveTestCase):
    def test_bad_key_is_unauthorized(self) -> None:
        for key, words in (("pds_bad", "malformed"), ("pds_" + "A" * 32, "no such key"), ("nope", "malformed")):
            c = pandastack.PandaStack(token=key, base_url=self.base_url)
            with self.assertRaises(pandastack.Unauthorized) as cm:
                c.sandboxes.list()
            e = cm.exception
            self.assertEqual((e.status, e.code), (401, "unauthorized"))
            self.assertIn(words, e.message)
            self.assertTrue(e.request_id)
            self.assertIsInstance(e, pandastack.PandaStackError)
            with self.assertRaises(pandastack.Unauthorized):
                c.sandboxes.create(template=TEMPLATE)

    def test_server_keeps_the_client_request_id(self) -> None:
        from unittest import mock

        with mock.patch("pandastack._http.new_request_id", return_value="req_fromtheclient0000001"):
            with self.assertRaises(pandastack.NotFound) as cm:
                self.client.sandboxes.get("sb_doesnotexist0002")
        self.assertEqual(cm.exception.request_id, "req_fromtheclient0000001")

    def test_missing_sandbox_is_not_found(self) -> None:
        with self.assertRaises(pandastack.NotFound) as cm:
            self.client.sandboxes.get("sb_doesnotexist0000")
        e = cm.exception
        self.assertEqual((e.status, e.code), (404, "not_found"))
        self.assertEqual(e.message, "sandbox sb_doesnotexist0000 not found")
        self.assertTrue(e.request_id)
        self.assertIn(e.request_id, str(e))
        self.assertIsInstance(e, LookupError)

    def test_calls_on_missing_sandbox(self) -> None:
        ghost = pandastack.Sandbox(self.client, {"id": "sb_doesnotexist0001"})
        for call in (lambda: ghost.exec("true"), lambda: ghost.filesystem.read("/etc/hostname"),
                     lambda: ghost.set_ttl(60), lambda: ghost.exec_stream("true")):
            with self.assertRaises(pandastack.NotFound):
                call()
        with self.assertRaises(pandastack.NotFound):
            ghost.filesystem.exists("/tmp")

    def test_bad_ttl_carries_the_api_message(self) -> None:
        status, body = raw_api_error(self.base_url, self.api_key, "POST", "/v1/sandboxes",
                                     {"template": TEMPLATE, "ttl_seconds": 0})
        self.assertEqual(status, 400)
        with self.assertRaises(pandastack.InvalidRequest) as cm:
            self.client.sandboxes.create(template=TEMPLATE, ttl_seconds=0)
        e = cm.exception
        self.assertEqual((e.status, e.code), (400, "invalid_request"))
        self.assertEqual(e.message, body["error"]["message"])
        self.assertIn("ttl_seconds", e.message)
        with self.assertRaises(pandastack.InvalidRequest) as cm:
            self.client.sandboxes.create(template=TEMPLATE, ttl_seconds=10 ** 9)
        self.assertIn("ttl_seconds must be between 1 and", cm.exception.message)
        sb = self.create(ttl_seconds=60)
        with self.assertRaises(pandastack.InvalidRequest) as cm:
            sb.set_ttl(-5)
        self.assertIn("ttl_seconds", cm.exception.message)

    def test_egress_never_opens_blocked_ranges(self) -> None:
        info = self.client.info()
        blocked = [r["range"] for r in info["egress"]["blocked"]]
        self.assertIn("169.254.0.0/16", blocked)
        self.assertIn("10.0.0.0/8", [r["range"] for r in info["egress"]["private"]])
        for allow in ("169.254.169.254", "::ffff:127.0.0.1", "10.0.0.0/8", "localhost"):
            with self.assertRaises(pandastack.InvalidRequest) as cm:
                self.client.sandboxes.create(template=TEMPLATE, egress={"internet": False, "allow": [allow]})
            self.assertIn("egress.allow", cm.exception.message)

    def test_other_invalid_requests(self) -> None:
        with self.assertRaises(pandastack.InvalidRequest) as cm:
            self.client.sandboxes.create(template="no-such-template-xyz")
        self.assertIn("no-such-template-xyz", cm.exception.message)
        with self.assertRaises(pandastack.InvalidRequest):
            self.client.sandboxes.create(template=TEMPLATE, env={"1BAD": "x"})
        sb = self.create()
        with self.assertRaises(pandastack.InvalidRequest):
            sb.exec("true", timeout_seconds=-1)
        with self.assertRaises(pandastack.InvalidRequest):
            sb.filesystem.list("/", depth=99)

    def test_exec_on_killed_is_conflict(self) -> None:
        sb = self.create()
        sb.kill()
        with self.assertRaises(pandastack.Conflict) as cm:
            sb.exec("true")
        self.assertEqual(cm.exception.status, 409)
        self.assertIn("killed", cm.exception.message)

    def test_template_refusals(self) -> None:
        # A spec the server refuses before building, and a catalog template, which is not ours.
        with self.assertRaises(pandastack.InvalidRequest) as cm:
            self.client.templates.build({"name": "x"})
        self.assertEqual((cm.exception.status, cm.exception.code), (400, "invalid_request"))
        self.assertIn("from", cm.exception.message)
        with self.assertRaises(pandastack.Conflict) as cm2:
            self.client.templates.delete(TEMPLATE)
        self.assertIn("catalog", cm2.exception.message)


class ClientConfig(unittest.TestCase):
    def test_env_and_arguments(self) -> None:
        c = pandastack.PandaStack(env={"PANDASTACK_API_KEY": "pds_a", "PANDASTACK_TOKEN": "pds_t"})
        self.assertEqual(c._http._token, "pds_a")
        self.assertEqual(c.base_url, "https://api.pandastack.ai")
        c = pandastack.PandaStack(env={"PANDASTACK_TOKEN": "pds_t", "PANDASTACK_BASE_URL": "http://h:1/"})
        self.assertEqual((c._http._token, c.base_url), ("pds_t", "http://h:1"))
        c = pandastack.PandaStack("pds_arg", "http://x:2", env={"PANDASTACK_API_KEY": "pds_a",
                                                                 "PANDASTACK_BASE_URL": "http://h:1"})
        self.assertEqual((c._http._token, c.base_url), ("pds_arg", "http://x:2"))
        self.assertEqual(pandastack.PandaStack(api_key="pds_k", env={})._http._token, "pds_k")

    def test_missing_key(self) -> None:
        with self.assertRaises(pandastack.ConfigurationError) as cm:
            pandastack.PandaStack(env={})
        self.assertIn("PANDASTACK_API_KEY", str(cm.exception))

    def test_bad_base_url(self) -> None:
        with self.assertRaises(pandastack.ConfigurationError):
            pandastack.PandaStack(token="pds_x", base_url="ftp://nowhere")

    def test_connection_refused(self) -> None:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()  # nothing listens there now
        c = pandastack.PandaStack(token="pds_x", base_url="http://127.0.0.1:%d" % port, max_retries=1)
        with self.assertRaises(pandastack.APIConnectionError) as cm:
            c.sandboxes.list()
        self.assertIsNone(cm.exception.status)
        self.assertRegex(cm.exception.request_id or "", r"^req_[a-z0-9]{20}$")  # the id it sent


# -- a scripted server for retry behaviour --------------------------------------------------------

Script = List[Callable[["Handler"], None]]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    script: Script
    seen: List[Tuple[str, str]]
    sent_ids: List[str]

    def log_message(self, *a: Any) -> None:
        pass

    def _any(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        self.seen.append((self.command, self.path))
        self.sent_ids.append(self.headers.get("X-Request-Id", ""))
        step = self.script.pop(0) if self.script else answer(500, {"error": {"code": "internal", "message": "x"}})
        step(self)

    do_GET = do_POST = do_PUT = do_DELETE = _any


def reply(h: Handler, status: int, data: bytes, headers: Dict[str, str]) -> None:
    """Send status, the headers (in order), Content-Length and data."""
    h.send_response(status)
    for k, v in headers.items():
        h.send_header(k, v)
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


def answer(status: int, body: Any, headers: Optional[Dict[str, str]] = None) -> Callable[[Handler], None]:
    def step(h: Handler) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        reply(h, status, data, {"Content-Type": "application/json", "X-Request-Id": "req_fake%d" % len(h.seen),
                                **(headers or {})})

    return step


def hang_up(h: Handler) -> None:
    """Close the connection without answering (a reset/dropped connection)."""
    h.close_connection = True
    try:
        h.connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


SB = {"id": "sb_fake", "template": "base", "state": "running", "created_at": "2026-01-01T00:00:00.000Z",
      "expires_at": "2026-01-01T00:05:00.000Z", "metadata": {}, "host": "h"}
BUSY = {"error": {"code": "capacity", "message": "no host has room"}}
SLOW = {"error": {"code": "rate_limited", "message": "slow down"}}


class Retries(unittest.TestCase):
    def setUp(self) -> None:
        Handler.script = []
        Handler.seen = []
        Handler.sent_ids = []
        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.addCleanup(self.srv.server_close)
        self.addCleanup(self.srv.shutdown)
        self.client = pandastack.PandaStack(token="pds_x", base_url="http://127.0.0.1:%d" % self.srv.server_port,
                                            max_retries=3, timeout=10)

    def test_idempotent_get_retries_503_and_429(self) -> None:
        Handler.script = [answer(503, BUSY), answer(429, SLOW, {"Retry-After": "0"}), answer(200, SB)]
        t0 = time.monotonic()
        sb = self.client.sandboxes.get("sb_fake")
        self.assertEqual(sb.id, "sb_fake")
        self.assertEqual(len(Handler.seen), 3)
        self.assertLess(time.monotonic() - t0, 5)

    def test_gives_up_after_max_retries(self) -> None:
        Handler.script = [answer(503, BUSY)] * 4
        with self.assertRaises(pandastack.Capacity) as cm:
            self.client.sandboxes.get("sb_fake")
        self.assertEqual(len(Handler.seen), 4)
        self.assertEqual(cm.exception.request_id, "req_fake4")
        self.assertEqual(cm.exception.message, "no host has room")

    def test_rate_limited_carries_retry_after(self) -> None:
        c = pandastack.PandaStack(token="pds_x", base_url=self.client.base_url, max_retries=0)
        Handler.script = [answer(429, SLOW, {"Retry-After": "7"})]
        with self.assertRaises(pandastack.RateLimited) as cm:
            c.sandboxes.get("sb_fake")
        self.assertEqual(cm.exception.retry_after, 7.0)

    def test_non_idempotent_create_and_exec_are_not_retried(self) -> None:
        Handler.script = [answer(503, BUSY), answer(201, SB)]
        with self.assertRaises(pandastack.Capacity):
            self.client.sandboxes.create(template="base")
        self.assertEqual(len(Handler.seen), 1)
        Handler.script = [hang_up, answer(200, {"stdout": "", "stderr": "", "exit_code": 0})]
        sb = pandastack.Sandbox(self.client, SB)
        with self.assertRaises(pandastack.APIConnectionError):
            sb.exec("true")
        self.assertEqual(len(Handler.seen), 2)

    def test_connection_reset_retried_for_idempotent(self) -> None:
        Handler.script = [hang_up, hang_up, answer(200, SB)]
        self.assertEqual(self.client.sandboxes.get("sb_fake").id, "sb_fake")
        self.assertEqual(len(Handler.seen), 3)
        Handler.script = [hang_up, answer(204, None)]
        pandastack.Sandbox(self.client, SB).kill()  # DELETE is idempotent
        self.assertEqual(len(Handler.seen), 5)

    def test_non_json_error_body(self) -> None:
        def html(h: Handler) -> None:
            reply(h, 502, b"<html>bad gateway</html>", {"Content-Type": "text/html"})

        Handler.script = [html]
        with self.assertRaises(pandastack.InternalError) as cm:
            self.client.sandboxes.get("sb_fake")
        self.assertEqual(cm.exception.status, 502)
        self.assertIn("bad gateway", cm.exception.message)
        # no X-Request-Id in that answer: the error names the one the client sent
        self.assertEqual(cm.exception.request_id, Handler.sent_ids[0])
        self.assertRegex(Handler.sent_ids[0], r"^req_[a-z0-9]{20}$")

    def test_error_inside_a_stream(self) -> None:
        def stream(h: Handler) -> None:
            lines = b'{"stdout":"partial\\n"}\n{"error":{"code":"internal","message":"the stream broke"}}\n'
            reply(h, 200, lines, {"Content-Type": "application/x-ndjson", "X-Request-Id": "req_stream"})

        Handler.script = [stream]
        sb = pandastack.Sandbox(self.client, SB)
        got = []
        with self.assertRaises(pandastack.InternalError) as cm:
            for ev in sb.exec_stream("true"):
                got.append(ev.data)
        self.assertEqual(got, ["partial\n"])
        self.assertEqual((cm.exception.message, cm.exception.request_id), ("the stream broke", "req_stream"))

    def test_stream_cut_short(self) -> None:
        def stream(h: Handler) -> None:
            reply(h, 200, b'{"stdout":"partial\\n"}\n', {})

        Handler.script = [stream]
        with self.assertRaises(pandastack.APIConnectionError):
            pandastack.Sandbox(self.client, SB).exec("true", on_stdout=lambda s: None)

    def test_request_shapes(self) -> None:
        Handler.script = [answer(201, SB), answer(200, {"sandboxes": [SB], "next_cursor": "c2"}),
                          answer(200, {"sandboxes": [SB], "next_cursor": None})]
        self.client.sandboxes.create(template="base", ttl_seconds=5, metadata={"a": "b"})
        got = self.client.sandboxes.list(metadata={"k": "v w"}, state=["running", "hibernated"])
        self.assertEqual(len(got), 2)
        self.assertEqual(Handler.seen[0], ("POST", "/v1/sandboxes"))
        self.assertEqual(Handler.seen[1][1], "/v1/sandboxes?state=running%2Chibernated&metadata.k=v+w&limit=100")
        self.assertEqual(Handler.seen[2][1],
                         "/v1/sandboxes?state=running%2Chibernated&metadata.k=v+w&limit=100&cursor=c2")

    def test_base_url_with_path_prefix(self) -> None:
        c = pandastack.PandaStack(token="pds_x", base_url=self.client.base_url + "/api/")
        Handler.script = [answer(200, SB)]
        c.sandboxes.get("sb_fake")
        self.assertEqual(Handler.seen[0][1], "/api/v1/sandboxes/sb_fake")


class Unit(unittest.TestCase):
    def test_python_39_syntax(self) -> None:
        import ast
        import glob
        import os

        src = os.path.dirname(pandastack.__file__)
        for path in glob.glob(os.path.join(src, "*.py")):
            with open(path, encoding="utf-8") as f:
                ast.parse(f.read(), path, feature_version=(3, 9))

    def test_parse_time(self) -> None:
        from pandastack.models import parse_time

        t = parse_time("2026-11-23T12:09:47.652452095Z")
        self.assertEqual((t.year, t.microsecond, t.utcoffset().total_seconds()), (2026, 652452, 0))
        self.assertEqual(parse_time("2026-11-23T12:09:47Z").second, 47)
        self.assertIsNone(parse_time(""))
        self.assertIsNone(parse_time("garbage"))

    def test_error_classes(self) -> None:
        from pandastack.errors import error_from_payload

        cases = ERROR_CLASSES
        for (status, code), cls in cases.items():
            e = error_from_payload(status, {"error": {"code": code, "message": "m"}}, "req_1")
            self.assertIs(type(e), cls)
            self.assertEqual((e.status, e.code, e.message, e.request_id), (status, code, "m", "req_1"))
        # unknown code: by status; no status: by code
        self.assertIs(type(error_from_payload(418, {"error": {"code": "teapot", "message": "m"}})),
                      pandastack.InvalidRequest)
        e = error_from_payload(None, {"error": {"code": "not_found", "message": "m"}})
        self.assertEqual((type(e), e.status), (pandastack.NotFound, 404))
        self.assertIs(pandastack.Unimplemented, pandastack.NotImplemented)


if __name__ == "__main__":
    unittest.main()
