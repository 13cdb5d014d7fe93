"""client.templates against a tiny in-process stand-in for the API (no server, no VMs needed):
what the SDK sends, and how it reads the build stream (progress lines, then the template or
the error). The server's own behaviour is tested in internal/api (templates_test.go).
"""

from __future__ import annotations

import http.server
import json
import threading
import unittest

import support  # noqa: F401  (puts src/ on sys.path)
import pandastack

WEB = {"name": "web", "owner": "team", "vcpus": 1, "memory_mib": 512, "disk_mib": 2048, "size_bytes": 1024,
       "bake_ms": 1200, "aliases": [], "metadata": {"v": "1"}, "available": True, "baked": True}
PG = {"name": "postgres-17", "owner": "catalog", "vcpus": 2, "memory_mib": 1024, "disk_mib": 4096,
      "aliases": ["postgres", "postgres-16"], "metadata": {"version": "17"}, "available": True, "baked": False}


class Fake(http.server.BaseHTTPRequestHandler):
    requests: list = []

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, status: int, body=None, ndjson=None) -> None:
        self.send_response(status)
        if ndjson is not None:
            self.send_header("Content-Type", "application/x-ndjson")
            self.end_headers()
            for ev in ndjson:
                self.wfile.write((json.dumps(ev) + "\n").encode())
                self.wfile.flush()
            return
        data = b"" if body is None else json.dumps(body).encode()
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        Fake.requests.append(("GET", self.path, None, None))
        if self.path == "/v1/templates":
            self._send(200, {"templates": [PG, WEB]})
        elif self.path in ("/v1/templates/postgres-16", "/v1/templates/postgres-17"):
            self._send(200, PG)
        elif self.path == "/v1/templates/web":
            self._send(200, WEB)
        else:
            self._send(404, {"error": {"code": "not_found", "message": "template not found"}})

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        Fake.requests.append(("POST", self.path, self.headers.get("Content-Type"), body))
        if "catalog-name" in body:
            self._send(409, {"error": {"code": "conflict", "message": "template name base is taken by the catalog"}})
        elif "exit 1" in body:
            self._send(200, ndjson=[{"progress": "step 1/1: exit 1"},
                                    {"error": {"code": "build_failed", "message": "step 1 failed (exit 1)"}}])
        else:
            self._send(200, ndjson=[{"progress": "building web"}, {"progress": "step 1/1: echo hi"}, {"template": WEB}])

    def do_DELETE(self) -> None:
        Fake.requests.append(("DELETE", self.path, None, None))
        if self.path == "/v1/templates/web":
            self._send(204)
        else:
            self._send(409, {"error": {"code": "conflict", "message": "template base is a catalog template"}})


class TemplatesOffline(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Fake)
        threading.Thread(target=cls.srv.serve_forever, daemon=True).start()
        cls.client = pandastack.PandaStack(token="pds_test", base_url="http://127.0.0.1:%d" % cls.srv.server_address[1])

    @classmethod
    def tearDownClass(cls) -> None:
        cls.srv.shutdown()
        cls.srv.server_close()

    def setUp(self) -> None:
        Fake.requests.clear()

    def test_list_and_get(self) -> None:
        ts = self.client.templates.list()
        self.assertEqual([(t.name, t.owner) for t in ts], [("postgres-17", "catalog"), ("web", "team")])
        self.assertEqual(ts[0].aliases, ["postgres", "postgres-16"])
        self.assertEqual(ts[1].metadata, {"v": "1"})
        self.assertEqual((ts[1].size_bytes, ts[1].bake_ms), (1024, 1200))
        self.assertEqual(self.client.templates.get("postgres-16").name, "postgres-17")
        with self.assertRaises(pandastack.NotFound):
            self.client.templates.get("nope")
        with self.assertRaises(ValueError):
            self.client.templates.get("")

    def test_build_dict_streams_progress(self) -> None:
        lines = []
        t = self.client.templates.build({"name": "web", "from": "base", "steps": ["echo hi"]}, on_progress=lines.append)
        self.assertEqual((t.name, t.owner, t.baked), ("web", "team", True))
        self.assertEqual(lines, ["building web", "step 1/1: echo hi"])
        _, path, ctype, body = Fake.requests[-1]
        self.assertEqual((path, ctype), ("/v1/templates", "application/json"))
        self.assertEqual(json.loads(body)["steps"], ["echo hi"])

    def test_build_yaml_string(self) -> None:
        t = self.client.templates.build("name: web\nfrom: base\n")
        self.assertEqual(t.name, "web")
        _, _, ctype, body = Fake.requests[-1]
        self.assertEqual((ctype, body), ("application/yaml", "name: web\nfrom: base\n"))

    def test_build_failures(self) -> None:
        lines = []
        with self.assertRaises(pandastack.BuildFailed) as cm:
            self.client.templates.build({"name": "x", "from": "base", "steps": ["exit 1"]}, on_progress=lines.append)
        self.assertEqual(cm.exception.code, "build_failed")
        self.assertIn("step 1 failed", cm.exception.message)
        self.assertEqual(lines, ["step 1/1: exit 1"])
        with self.assertRaises(pandastack.Conflict):
            self.client.templates.build({"name": "catalog-name", "from": "base"})
        with self.assertRaises(TypeError):
            self.client.templates.build(42)  # type: ignore[arg-type]

    def test_delete(self) -> None:
        self.client.templates.delete("web")
        self.assertEqual(Fake.requests[-1][:2], ("DELETE", "/v1/templates/web"))
        with self.assertRaises(pandastack.Conflict):
            self.client.templates.delete("base")


if __name__ == "__main__":
    unittest.main()
