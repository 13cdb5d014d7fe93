"""Offline unit tests: the SDK driven through its injected ``send`` (PandaStack(send=...)), with
answers scripted in memory. No server, no socket: they run before or without sdk/test.sh's
server. What they check is the client's side of the wire (requests it builds, answers it
decodes, errors it maps, retries it makes); the live tests check the server's side.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
import json
import os
import re
import runpy
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest
import urllib.parse
from typing import Any, Callable, Dict, List, Optional
from unittest import mock

from support import ERROR_CLASSES, HERE, SRC, EachSeed

import pandastack
from pandastack import HTTPRequest, HTTPResponse

PKG = os.path.join(SRC, "pandastack")
PYPROJECT = os.path.join(os.path.dirname(HERE), "pyproject.toml")

SB = {"id": "sb_one", "template": "base", "state": "running", "created_at": "2026-01-01T00:00:00.123456789Z",
      "expires_at": "2026-01-01T00:10:00Z", "metadata": {"task": "t"}, "host": "h1", "ip": "10.0.0.2"}


def ok(body: Any = None, status: int = 200, **headers: str) -> HTTPResponse:
    return HTTPResponse(status, body, headers)


def err(status: int, code: str, message: str, **headers: str) -> HTTPResponse:
    return HTTPResponse(status, {"error": {"code": code, "message": message}}, headers)


def ndjson(*objs: Any, **headers: str) -> HTTPResponse:
    return HTTPResponse(200, b"".join(json.dumps(o).encode() + b"\n" for o in objs),
                        dict({"Content-Type": "application/x-ndjson"}, **headers))


class Script:
    """A ``send`` that answers with the given steps in order and records every request. A step is
    a response, an exception to raise (a broken connection), or a callable taking the request."""

    def __init__(self, *steps: Any) -> None:
        self.steps = list(steps)
        self.requests: List[HTTPRequest] = []
        self.responses: List[Any] = []

    def __call__(self, req: HTTPRequest) -> Any:
        self.requests.append(req)
        if not self.steps:
            raise AssertionError("unexpected request %s %s" % (req.method, req.url))
        step = self.steps.pop(0)
        if isinstance(step, BaseException):
            raise step
        if callable(step) and not isinstance(step, HTTPResponse):
            step = step(req)
        self.responses.append(step)
        return step

    def path(self, i: int = -1) -> str:
        u = urllib.parse.urlsplit(self.requests[i].url)
        return u.path + ("?" + u.query if u.query else "")

    def query(self, i: int = -1) -> Dict[str, List[str]]:
        return urllib.parse.parse_qs(urllib.parse.urlsplit(self.requests[i].url).query)


class OfflineCase(unittest.TestCase):
    """A client whose every request goes to ``self.script``; retries do not really sleep."""

    def setUp(self) -> None:
        self.script = Script()
        self.client = pandastack.PandaStack(token="pds_offline", base_url="http://pandastack.invalid:8080",
                                            send=self.script, env={}, max_retries=3)
        self.sleeps: List[float] = []
        self.client._http._sleep = self.sleeps.append

    def answer(self, *steps: Any) -> Script:
        self.script.steps.extend(steps)
        return self.script

    def sandbox(self, **over: Any) -> pandastack.Sandbox:
        return pandastack.Sandbox(self.client, dict(SB, **over))


# -- create / get / list ---------------------------------------------------------------------------


class Create(OfflineCase):
    def test_create_request_and_result(self) -> None:
        s = self.answer(ok(SB, 201, **{"X-Request-Id": "req_srv"}))
        sb = self.client.sandboxes.create(template="base", ttl_seconds=600, metadata={"task": "t"},
                                          env={"A": "1"}, volumes=[{"volume_id": "vol_1", "mount_path": "/data"}])
        req = s.requests[0]
        self.assertEqual((req.method, req.url), ("POST", "http://pandastack.invalid:8080/v1/sandboxes"))
        self.assertEqual(req.json(), {"template": "base", "ttl_seconds": 600, "metadata": {"task": "t"},
                                      "env": {"A": "1"}, "volumes": [{"volume_id": "vol_1", "mount_path": "/data"}]})
        self.assertEqual(req.headers["Authorization"], "Bearer pds_offline")
        self.assertEqual(req.headers["Content-Type"], "application/json")
        self.assertEqual(req.headers["Accept"], "application/json")
        self.assertEqual(req.headers["User-Agent"], "pandastack-python/" + pandastack.__version__)
        self.assertRegex(req.headers["X-Request-Id"], r"^req_[a-z0-9]{20}$")
        self.assertEqual(req.timeout, 900.0)  # create may bake a template: create_timeout
        self.assertEqual((sb.id, sb.template, sb.state, sb.host, sb.ip, sb.metadata),
                         ("sb_one", "base", "running", "h1", "10.0.0.2", {"task": "t"}))
        self.assertEqual((sb.created_at.year, sb.created_at.microsecond), (2026, 123456))
        self.assertEqual(sb.raw, SB)
        self.assertIs(self.client.sandbox, self.client.sandboxes)

    def test_create_validates_before_sending(self) -> None:
        with self.assertRaises(TypeError):
            self.client.sandboxes.create()
        with self.assertRaises(TypeError):
            self.client.sandboxes.create(template="base", volumes=[{"volume_id": "v", "path": "/data"}])
        with self.assertRaises(ValueError):
            self.client.sandboxes.get("")
        self.assertEqual(self.script.requests, [])

    def test_get_quotes_the_id_and_list_follows_cursors(self) -> None:
        s = self.answer(ok(SB), ok({"sandboxes": [SB], "next_cursor": "c2"}),
                        ok({"sandboxes": [dict(SB, id="sb_two")], "next_cursor": None}))
        self.client.sandboxes.get("sb/../x")
        self.assertEqual(s.path(0), "/v1/sandboxes/sb%2F..%2Fx")
        got = self.client.sandboxes.list(metadata={"k": "v w"}, state=["running", "hibernated"])
        self.assertEqual([x.id for x in got], ["sb_one", "sb_two"])
        self.assertEqual(s.path(1), "/v1/sandboxes?state=running%2Chibernated&metadata.k=v+w&limit=100")
        self.assertEqual(s.query(2)["cursor"], ["c2"])
        self.assertEqual(s.requests[1].body, None)

    def test_metrics(self) -> None:
        m = {"at": "2026-01-01T00:00:00Z", "vcpus": 1, "cpu_used_pct": 12.5, "mem_total_bytes": 4, "mem_used_bytes": 2,
             "mem_cache_bytes": 1, "disk_total_bytes": 8, "disk_used_bytes": 3, "host_cpu_seconds": 0.5, "host_mem_bytes": 5}
        s = self.answer(ok(SB), ok(m))
        self.assertEqual(self.client.sandboxes.get("sb_one").metrics(), m)
        self.assertEqual(s.path(1), "/v1/sandboxes/sb_one/metrics")
        self.assertEqual(s.requests[1].method, "GET")

    def test_list_limit_stops_early(self) -> None:
        s = self.answer(ok({"sandboxes": [SB, SB], "next_cursor": "more"}))
        self.assertEqual(len(self.client.sandboxes.list(limit=2)), 2)
        self.assertEqual((len(s.requests), s.query(0)["limit"]), (1, ["2"]))

    def test_base_url_with_path_prefix_and_env(self) -> None:
        s = Script(ok(SB))
        c = pandastack.PandaStack(send=s, env={"PANDASTACK_TOKEN": " pds_env ",
                                               "PANDASTACK_BASE_URL": "https://example.invalid/api/"})
        c.sandboxes.get("sb_one")
        self.assertEqual(s.requests[0].url, "https://example.invalid/api/v1/sandboxes/sb_one")
        self.assertEqual(s.requests[0].headers["Authorization"], "Bearer pds_env")

    def test_send_must_be_callable(self) -> None:
        with self.assertRaises(pandastack.ConfigurationError):
            pandastack.PandaStack(token="pds_x", base_url="http://h", send="not a function")


# -- code interpreter ------------------------------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n" + b"x" * 10


class Code(OfflineCase):
    def test_run_code_buffered(self) -> None:
        import base64
        s = self.answer(ok({"results": [{"text": "2", "is_main_result": True},
                                        {"png": base64.b64encode(PNG).decode(), "json": "[1, 2]"}],
                            "logs": {"stdout": ["hi\n"], "stderr": []},
                            "error": {"name": "ValueError", "value": "v", "traceback": "tb"},
                            "execution_count": 3, "duration_ms": 9}))
        ctx = pandastack.CodeContext({"id": "c1", "language": "python", "cwd": "/"})
        x = self.sandbox().run_code("1+1", context=ctx, timeout=30)
        self.assertEqual(s.path(), "/v1/sandboxes/sb_one/code")
        self.assertEqual(s.requests[0].json(), {"code": "1+1", "context_id": "c1", "timeout_seconds": 30})
        self.assertEqual((x.text, x.results[1].png, x.results[1].json, x.logs.stdout), ("2", PNG, [1, 2], ["hi\n"]))
        self.assertEqual((x.error.name, x.execution_count, x.results[1].is_main_result), ("ValueError", 3, False))

    def test_run_code_streams_to_callbacks(self) -> None:
        s = self.answer(ndjson({"stdout": "a"}, {"result": {"html": "<table/>", "is_main_result": True}},
                               {"end": {"execution_count": 1, "duration_ms": 2}}))
        got: List[Any] = []
        x = self.sandbox().run_code("df", on_stdout=got.append, on_result=got.append)
        self.assertEqual(s.requests[0].headers["Accept"], "application/x-ndjson")
        self.assertEqual((got[0], got[1].html, x.execution_count), ("a", "<table/>", 1))

    def test_javascript(self) -> None:
        s = self.answer(ok({"results": [{"text": "[ 2, 4 ]", "json": "[2, 4]", "is_main_result": True}],
                            "logs": {"stdout": [], "stderr": []}, "execution_count": 1, "duration_ms": 1}),
                        ok({"id": "c2", "language": "javascript", "cwd": "/home/user"}, status=201))
        x = self.sandbox().run_code("[1, 2].map((v) => v * 2)", language="js")
        self.assertEqual((s.requests[0].json(), x.text, x.results[0].json),
                         ({"code": "[1, 2].map((v) => v * 2)", "language": "js"}, "[ 2, 4 ]", [2, 4]))
        c = self.sandbox().create_code_context(language="javascript")
        self.assertEqual((c.language, s.requests[1].json()), ("javascript", {"language": "javascript"}))

    def test_javascript_rich_results(self) -> None:
        import base64
        s = self.answer(ndjson({"result": {"svg": "<svg/>", "is_main_result": False}},
                               {"result": {"png": base64.b64encode(PNG).decode(), "is_main_result": False}},
                               {"result": {"text": "[ { a: 1 } ]", "html": "<table border=\"1\" class=\"dataframe\"></table>",
                                           "json": "[{\"a\":1}]", "is_main_result": True}},
                               {"end": {"execution_count": 2, "duration_ms": 3}}))
        got: List[Any] = []
        x = self.sandbox().run_code("display.svg(s); display.png(buf); [{a: 1}]", language="javascript", on_result=got.append)
        self.assertEqual(s.requests[0].json()["language"], "javascript")
        self.assertEqual([r.formats() for r in x.results], [["svg"], ["png"], ["text", "html", "json"]])
        self.assertEqual((x.results[0].svg, x.results[1].png, x.results[2].json, x.text, len(got)),
                         ("<svg/>", PNG, [{"a": 1}], "[ { a: 1 } ]", 3))

    def test_run_code_stream_error(self) -> None:
        self.answer(ndjson({"stdout": "a"}, {"stream_error": {"code": "upstream_unreachable", "message": "gone"}}))
        with self.assertRaises(pandastack.PandaStackError):
            self.sandbox().run_code("x", on_stdout=lambda _: None)

    def test_contexts(self) -> None:
        s = self.answer(ok({"id": "c1", "language": "python", "cwd": "/tmp"}, status=201), ok(None, status=204))
        c = self.sandbox().create_code_context(cwd="/tmp")
        self.assertEqual((c.id, s.requests[0].json()), ("c1", {"language": "python", "cwd": "/tmp"}))
        self.sandbox().interrupt_code(c)
        self.assertEqual((s.path(), s.requests[1].json()), ("/v1/sandboxes/sb_one/code/interrupt", {"context_id": "c1"}))


# -- exec ------------------------------------------------------------------------------------------


class Exec(OfflineCase):
    def test_exec_waits_for_the_result(self) -> None:
        s = self.answer(ok({"stdout": "1024\n", "stderr": "", "exit_code": 0, "duration_ms": 12}))
        r = self.sandbox().exec("python -c 'print(2 ** 10)'", timeout_seconds=30)
        self.assertEqual((r.stdout, r.exit_code, r.ok, r.timed_out, r.duration_ms), ("1024\n", 0, True, False, 12))
        self.assertEqual(s.path(), "/v1/sandboxes/sb_one/exec")
        self.assertEqual(s.requests[0].json(), {"cmd": "python -c 'print(2 ** 10)'", "timeout_seconds": 30})
        self.assertEqual(s.requests[0].timeout, 90.0)  # its own 30 s plus a minute of grace

    def test_exec_argv_and_options(self) -> None:
        s = self.answer(ok({"stdout": "", "stderr": "boom", "exit_code": 3, "timed_out": True,
                            "stdout_truncated": True}))
        r = self.sandbox().exec(["ls", "-l"], env={"A": "b"}, cwd="/tmp", user="root", stdin=b"in")
        self.assertEqual(s.requests[0].json(), {"argv": ["ls", "-l"], "env": {"A": "b"}, "cwd": "/tmp",
                                                "user": "root", "stdin": "in"})
        self.assertEqual(s.requests[0].timeout, 120.0)  # the server's default 60 s plus grace
        self.assertEqual((r.exit_code, r.timed_out, r.ok, r.stderr, r.stdout_truncated), (3, True, False, "boom", True))
        for bad in ([], [1], b"ls"):
            with self.assertRaises(TypeError):
                self.sandbox().exec(bad)
        self.assertEqual(len(s.requests), 1)

    def test_exec_with_callbacks_streams(self) -> None:
        s = self.answer(ndjson({"stdout": "a"}, {"stderr": "e"}, {"stdout": "b"},
                               {"exit_code": 0, "duration_ms": 5}))
        out: List[str] = []
        err_: List[str] = []
        r = self.sandbox().exec("x", on_stdout=out.append, on_stderr=err_.append)
        self.assertEqual((out, err_), (["a", "b"], ["e"]))
        self.assertEqual((r.stdout, r.stderr, r.exit_code, r.duration_ms), ("ab", "e", 0, 5))
        self.assertEqual(s.requests[0].headers["Accept"], "application/x-ndjson")
        self.assertTrue(s.responses[0].closed)

    def test_exec_stream_events(self) -> None:
        self.answer(ndjson({"stdout": "hi\n"}, {"exit_code": 7, "timed_out": False, "duration_ms": 3},
                           **{"X-Request-Id": "req_stream"}))
        st = self.sandbox().exec_stream("echo hi; exit 7")
        self.assertEqual(st.request_id, "req_stream")
        evs = list(st)
        self.assertEqual([(e.type, e.data) for e in evs], [("stdout", "hi\n"), ("exit", "")])
        self.assertEqual((st.exit_code, evs[-1].exit_code, st.duration_ms), (7, 7, 3))

    def test_exec_stream_closed_early(self) -> None:
        s = self.answer(ndjson({"stdout": "1"}, {"stdout": "2"}, {"exit_code": 0}))
        with self.sandbox().exec_stream("seq 2") as st:
            first = next(iter(st))
        self.assertEqual(first.data, "1")
        self.assertTrue(s.responses[0].closed)

    def test_error_inside_the_stream(self) -> None:
        self.answer(ndjson({"stdout": "partial"}, {"error": {"code": "internal", "message": "it broke"}},
                           **{"X-Request-Id": "req_s"}))
        got: List[str] = []
        with self.assertRaises(pandastack.InternalError) as cm:
            for ev in self.sandbox().exec_stream("x"):
                got.append(ev.data)
        self.assertEqual(got, ["partial"])
        e = cm.exception
        self.assertEqual((e.message, e.request_id, e.status, e.code), ("it broke", "req_s", 500, "internal"))

    def test_stream_cut_short_and_malformed(self) -> None:
        self.answer(ndjson({"stdout": "partial"}), HTTPResponse(200, b'{"stdout": "x"}\nnot json\n'))
        with self.assertRaises(pandastack.APIConnectionError):
            self.sandbox().exec("x", on_stdout=lambda _: None)
        with self.assertRaises(pandastack.PandaStackError) as cm:
            list(self.sandbox().exec_stream("x"))
        self.assertEqual(cm.exception.code, "bad_stream")

    def test_stream_refused_before_it_starts(self) -> None:
        self.answer(err(409, "conflict", "sandbox sb_one is killed", **{"X-Request-Id": "req_c"}))
        with self.assertRaises(pandastack.Conflict) as cm:
            self.sandbox().exec_stream("x")
        self.assertEqual((cm.exception.status, cm.exception.request_id), (409, "req_c"))


# -- files -----------------------------------------------------------------------------------------


class Files(OfflineCase):
    def test_write_read(self) -> None:
        info = {"name": "n.txt", "path": "/tmp/n.txt", "type": "file", "size": 5, "mode": "0755",
                "mtime": "2026-01-01T00:00:00Z"}
        s = self.answer(ok(info, 201), ok(b"hello"), ok("h\xe9".encode("latin-1")))
        fs = self.sandbox().filesystem
        got = fs.write("/tmp/n.txt", "hello", mode=0o755, user="root")
        self.assertEqual((got.path, got.size, got.mode, got.is_file), ("/tmp/n.txt", 5, "0755", True))
        req = s.requests[0]
        self.assertEqual((req.method, req.body, req.headers["Content-Type"]), ("PUT", b"hello", "application/octet-stream"))
        self.assertEqual(s.query(0), {"path": ["/tmp/n.txt"], "mode": ["0755"], "user": ["root"]})
        self.assertEqual(fs.read("/tmp/n.txt"), "hello")
        self.assertEqual(s.requests[1].headers["Accept"], "application/octet-stream")
        self.assertEqual(s.path(1), "/v1/sandboxes/sb_one/files?path=%2Ftmp%2Fn.txt")
        self.assertEqual(fs.read("/x", encoding="latin-1"), "h\xe9")
        self.assertIs(self.sandbox().files.__class__, pandastack.Filesystem)

    def test_write_file_object_is_streamed_and_not_retried(self) -> None:
        s = self.answer(ConnectionResetError("reset"))
        body = io.BytesIO(b"data")
        with self.assertRaises(pandastack.APIConnectionError):
            self.sandbox().filesystem.write("/f", body)
        self.assertIs(s.requests[0].body, body)
        self.assertEqual(len(s.requests), 1)
        self.answer(ConnectionResetError("reset"), ok({"path": "/f", "type": "file"}))
        self.sandbox().filesystem.write("/f", b"bytes can be sent again")
        self.assertEqual(len(s.requests), 3)
        with self.assertRaises(TypeError):
            self.sandbox().filesystem.write("/f", 42)

    def test_list_stat_mkdir_remove_move(self) -> None:
        s = self.answer(ok({"entries": [{"name": "a", "path": "/d/a", "type": "dir"}]}),
                        ok({"name": "a", "path": "/d/a", "type": "dir", "size": 0}),
                        ok(None, 204), ok(None, 204), ok(None, 204))
        fs = self.sandbox().filesystem
        entries = fs.list("/d", depth=2)
        self.assertEqual([(e.path, e.is_dir) for e in entries], [("/d/a", True)])
        self.assertEqual(s.path(0), "/v1/sandboxes/sb_one/files/list?path=%2Fd&depth=2")
        self.assertTrue(fs.stat("/d/a").is_dir)
        fs.mkdir("/d/b", user="root")
        self.assertEqual((s.path(2), s.requests[2].json()), ("/v1/sandboxes/sb_one/files/mkdir",
                                                             {"path": "/d/b", "user": "root"}))
        fs.remove("/d", recursive=True)
        self.assertEqual((s.requests[3].method, s.query(3)), ("DELETE", {"path": ["/d"], "recursive": ["true"]}))
        fs.move("/d/a", "/d/c")
        self.assertEqual(s.requests[4].json(), {"from": "/d/a", "to": "/d/c"})

    def test_exists(self) -> None:
        self.answer(ok({"path": "/x", "type": "file"}), err(404, "not_found", "no such file /y"),
                    err(404, "not_found", "sandbox sb_one not found"))
        fs = self.sandbox().filesystem
        self.assertTrue(fs.exists("/x"))
        self.assertFalse(fs.exists("/y"))
        with self.assertRaises(pandastack.NotFound):  # a missing sandbox is not a missing file
            fs.exists("/z")


# -- errors ----------------------------------------------------------------------------------------


class BackgroundProcesses(OfflineCase):
    def test_start_list_kill_signal_stdin(self) -> None:
        proc = {"pid": 42, "cmd": "sleep 9", "cwd": "/home/user", "user": "user", "state": "exited", "exit_code": 137,
                "signal": "SIGKILL", "started_at": "2026-01-01T00:00:00Z", "stdin": False, "output_start": 0,
                "output_end": 3}
        s = self.answer(ok({"pid": 42}, 201), ok({"processes": [dict(proc, state="running", exit_code=None)]}),
                        ok(None, 204), ok(None, 204), ok(proc))
        sb = self.sandbox()
        h = sb.processes.start(["python3", "-u", "srv.py"], env={"A": "1"}, cwd="/srv", stdin=True)
        self.assertEqual(h.pid, 42)
        self.assertEqual((s.requests[0].method, s.path(0)), ("POST", "/v1/sandboxes/sb_one/processes"))
        self.assertEqual(s.requests[0].json(), {"argv": ["python3", "-u", "srv.py"], "env": {"A": "1"}, "cwd": "/srv",
                                                "stdin": True})
        ps = sb.processes.list()
        self.assertEqual((ps[0].pid, ps[0].running, ps[0].output_end), (42, True, 3))
        h.send_stdin(b"hi\n", eof=True)
        self.assertEqual((s.path(2), s.requests[2].json()), ("/v1/sandboxes/sb_one/processes/42/stdin",
                                                             {"data": "hi\n", "eof": True}))
        sb.processes.signal(42, "TERM")
        self.assertEqual((s.path(3), s.requests[3].json()), ("/v1/sandboxes/sb_one/processes/42/signal",
                                                             {"signal": "TERM"}))
        p = sb.processes.kill(42)
        self.assertEqual((s.requests[4].method, s.path(4)), ("DELETE", "/v1/sandboxes/sb_one/processes/42"))
        self.assertEqual((p.state, p.exit_code, p.signal), ("exited", 137, "SIGKILL"))

    def test_pty_start_and_resize(self) -> None:
        s = self.answer(ok({"pid": 7}, 201), ok(None, 204), ok({"processes": [{"pid": 7, "state": "running", "pty": True,
                                                                               "stdin": True}]}))
        sb = self.sandbox()
        h = sb.processes.start("bash", pty={"cols": 120, "rows": 40})
        self.assertEqual(s.requests[0].json(), {"cmd": "bash", "pty": {"cols": 120, "rows": 40}})
        h.resize(100, 30)
        self.assertEqual((s.path(1), s.requests[1].json()), ("/v1/sandboxes/sb_one/processes/7/resize",
                                                             {"cols": 100, "rows": 30}))
        self.assertTrue(sb.processes.list()[0].pty)

    def test_output_events_and_offsets(self) -> None:
        s = self.answer(ndjson({"offset": 5, "next": 8, "stdout": "ab\n"}, {"offset": 8, "next": 10, "stderr": "e\n"},
                               {"next": 10, "running": True}))
        h = self.sandbox().processes.connect(42, offset=5)
        evs = list(h.output())
        self.assertEqual(s.requests[0].method, "GET")
        self.assertEqual(s.path(0), "/v1/sandboxes/sb_one/processes/42/output?offset=5")
        self.assertIsNone(s.requests[0].body)
        self.assertEqual([(e.type, e.data, e.offset) for e in evs], [("stdout", "ab\n", 5), ("stderr", "e\n", 8),
                                                                    ("running", "", None)])
        self.assertEqual(h.offset, 10)

    def test_wait_resumes_a_dropped_stream_from_its_offset(self) -> None:
        s = self.answer(ndjson({"offset": 0, "next": 2, "stdout": "1\n"}),  # ends without an end line
                        ndjson({"offset": 2, "next": 4, "stdout": "2\n"}, {"next": 4, "exit_code": 3}))
        seen: List[str] = []
        r = self.sandbox().processes.connect(7).wait(on_stdout=seen.append)
        self.assertEqual((r.exit_code, r.stdout, seen), (3, "1\n2\n", ["1\n", "2\n"]))
        self.assertEqual([s.query(i) for i in (0, 1)], [{"offset": ["0"], "follow": ["1"]},
                                                         {"offset": ["2"], "follow": ["1"]}])

    def test_connect_wakes_a_hibernated_sandbox(self) -> None:
        s = self.answer(ok(dict(SB, state="hibernated")), ok(SB))
        sb = self.client.sandboxes.connect("sb_one")
        self.assertEqual(sb.state, "running")
        self.assertEqual([(r.method, self.script.path(i)) for i, r in enumerate(s.requests)],
                         [("GET", "/v1/sandboxes/sb_one"), ("POST", "/v1/sandboxes/sb_one/wake")])
        self.answer(ok(dict(SB, state="killed")))
        with self.assertRaises(pandastack.Conflict):
            self.client.sandboxes.connect("sb_one")


class ErrorMapping(OfflineCase):
    CASES = ERROR_CLASSES

    def test_every_status_maps_to_its_class(self) -> None:
        c = pandastack.PandaStack(token="pds_x", base_url="http://h.invalid", max_retries=0, env={},
                                  send=Script(*[err(st, code, "said %s" % code, **{"X-Request-Id": "req_%d" % st})
                                                for (st, code) in self.CASES]))
        for (status, code), cls in self.CASES.items():
            with self.assertRaises(pandastack.PandaStackError) as cm:
                c.sandboxes.get("sb_one")
            e = cm.exception
            self.assertIs(type(e), cls, code)
            self.assertEqual((e.status, e.code, e.message, e.request_id),
                             (status, code, "said %s" % code, "req_%d" % status))
            self.assertIn("req_%d" % status, str(e))

    def test_not_json_and_unknown(self) -> None:
        s = self.answer(HTTPResponse(502, b"<html>bad gateway</html>", {"Content-Type": "text/html"}),
                        err(418, "teapot", "short and stout"))
        with self.assertRaises(pandastack.InternalError) as cm:
            self.client.sandboxes.get("sb_one")
        self.assertEqual(cm.exception.status, 502)
        self.assertIn("bad gateway", cm.exception.message)
        self.assertEqual(cm.exception.request_id, s.requests[0].headers["X-Request-Id"])  # the id it sent
        with self.assertRaises(pandastack.InvalidRequest) as cm2:
            self.client.sandboxes.create(template="base")
        self.assertEqual((cm2.exception.code, cm2.exception.status), ("teapot", 418))

    def test_rate_limited_carries_retry_after(self) -> None:
        self.client._http.max_retries = 0
        self.answer(err(429, "rate_limited", "slow down", **{"Retry-After": "7"}))
        with self.assertRaises(pandastack.RateLimited) as cm:
            self.client.sandboxes.list()
        self.assertEqual(cm.exception.retry_after, 7.0)

    def test_client_timeout_and_unreachable(self) -> None:
        s = self.answer(socket.timeout("timed out"))
        with self.assertRaises(pandastack.Timeout) as cm:
            self.client.sandboxes.get("sb_one")
        self.assertEqual((cm.exception.code, cm.exception.status), ("client_timeout", None))
        self.assertEqual(len(s.requests), 1)  # a timeout is not retried: the call may still be running
        self.answer(*[ConnectionRefusedError("refused")] * 4)
        with self.assertRaises(pandastack.APIConnectionError) as cm2:
            self.client.sandboxes.list()
        self.assertIsNone(cm2.exception.status)
        self.assertIn("pandastack.invalid", cm2.exception.message)
        self.assertEqual(len(s.requests), 5)

    def test_unimplemented_is_the_501_class(self) -> None:
        self.answer(err(501, "not_implemented", "not here"))
        with self.assertRaises(pandastack.NotImplemented) as cm:  # the old name still catches it
            self.client.templates.list()
        self.assertIsInstance(cm.exception, pandastack.Unimplemented)
        self.assertIsInstance(cm.exception, NotImplementedError)


# -- retries ---------------------------------------------------------------------------------------


class Retries(OfflineCase):
    def test_idempotent_calls_retry_503_and_429(self) -> None:
        s = self.answer(err(503, "capacity", "busy"), err(429, "rate_limited", "slow", **{"Retry-After": "7"}),
                        ok(SB))
        self.assertEqual(self.client.sandboxes.get("sb_one").id, "sb_one")
        self.assertEqual(len(s.requests), 3)
        self.assertEqual(len({r.headers["X-Request-Id"] for r in s.requests}), 1)  # one call, one id
        self.assertEqual(self.sleeps[1], 7.0)  # the server's Retry-After
        self.assertTrue(0.125 <= self.sleeps[0] <= 0.25, self.sleeps)  # first backoff step, jittered

    def test_backoff_grows_and_gives_up(self) -> None:
        s = self.answer(*[err(503, "capacity", "no host has room", **{"X-Request-Id": "req_%d" % i})
                          for i in range(1, 5)])
        with self.assertRaises(pandastack.Capacity) as cm:
            self.client.snapshots.get("snap_1")
        self.assertEqual(len(s.requests), 4)  # 1 + max_retries
        self.assertEqual((cm.exception.request_id, cm.exception.message), ("req_4", "no host has room"))
        for i, (lo, hi) in enumerate(((0.125, 0.25), (0.25, 0.5), (0.5, 1.0))):
            self.assertTrue(lo <= self.sleeps[i] <= hi, self.sleeps)

    def test_retry_after_is_capped(self) -> None:
        self.answer(err(503, "capacity", "busy", **{"Retry-After": "3600"}), ok(SB))
        self.client.sandboxes.get("sb_one")
        self.assertEqual(self.sleeps, [30.0])

    def test_broken_connections_retried_only_when_idempotent(self) -> None:
        s = self.answer(ConnectionResetError("reset"), BrokenPipeError("pipe"), ok(SB))
        self.client.sandboxes.get("sb_one")
        self.assertEqual(len(s.requests), 3)
        self.answer(ConnectionResetError("reset"), ok(None, 204))
        self.sandbox().kill()  # DELETE is idempotent
        self.assertEqual(len(s.requests), 5)
        self.answer(ConnectionResetError("reset"))
        with self.assertRaises(pandastack.APIConnectionError):
            self.sandbox().exec("true")  # exec is not: it may have run
        self.answer(err(503, "capacity", "busy"))
        with self.assertRaises(pandastack.Capacity):
            self.client.sandboxes.create(template="base")
        self.assertEqual(len(s.requests), 7)

    def test_max_retries_zero(self) -> None:
        s = Script(err(503, "capacity", "busy"))
        c = pandastack.PandaStack(token="pds_x", base_url="http://h.invalid", max_retries=0, send=s, env={})
        with self.assertRaises(pandastack.Capacity):
            c.sandboxes.list()
        self.assertEqual(len(s.requests), 1)


# -- lifecycle, snapshots, volumes, templates -------------------------------------------------------


class Lifecycle(OfflineCase):
    def test_fork(self) -> None:
        kids = [dict(SB, id="sb_k%d" % i, fork_of="sb_one") for i in range(3)]
        s = self.answer(ok({"sandboxes": kids[:1]}, 201), ok({"sandboxes": kids}, 201), ok({"sandboxes": []}, 201))
        sb = self.sandbox()
        one = sb.fork()
        self.assertEqual((one.id, one.fork_of), ("sb_k0", "sb_one"))
        self.assertEqual((s.path(0), s.requests[0].json(), s.requests[0].timeout), ("/v1/sandboxes/sb_one/fork", {}, 900.0))
        self.assertEqual([k.id for k in sb.fork(count=3)], ["sb_k0", "sb_k1", "sb_k2"])
        self.assertEqual(s.requests[1].json(), {"count": 3})
        with self.assertRaises(pandastack.PandaStackError) as cm:
            sb.fork()
        self.assertEqual(cm.exception.code, "bad_response")
        for bad in (0, -1, True, 1.5):
            with self.assertRaises(ValueError):
                sb.fork(count=bad)
        self.assertEqual(len(s.requests), 3)

    def test_snapshot_hibernate_wake_ttl_kill(self) -> None:
        snap = {"id": "snap_1", "sandbox_id": "sb_one", "template": "base", "size_bytes": 10}
        s = self.answer(ok(snap, 201), ok(dict(SB, state="hibernated")), ok(dict(SB, state="running")),
                        ok(dict(SB, expires_at="2026-01-02T00:00:00Z")), ok(None, 204),
                        err(404, "not_found", "sandbox sb_one not found"))
        sb = self.sandbox()
        sn = sb.snapshot()
        self.assertEqual((sn.id, sn.sandbox_id, sn.size_bytes), ("snap_1", "sb_one", 10))
        self.assertEqual(sb.hibernate().state, "hibernated")
        self.assertEqual(sb.wake().state, "running")
        self.assertEqual(sb.set_ttl(86400).expires_at.day, 2)
        self.assertEqual(s.requests[3].json(), {"ttl_seconds": 86400})
        with sb:
            pass  # kills on exit
        self.assertEqual((sb.state, s.requests[4].method, s.path(4)), ("killed", "DELETE", "/v1/sandboxes/sb_one"))
        with self.sandbox():
            pass  # an already-gone sandbox is fine on exit
        self.assertEqual([r.timeout for r in s.requests[:3]], [900.0, 900.0, 900.0])

    def test_refresh_after_an_answer_for_another_id(self) -> None:
        s = self.answer(ok({"ok": True}), ok(dict(SB, state="hibernated")))
        self.assertEqual(self.sandbox().hibernate().state, "hibernated")  # re-read it
        self.assertEqual([r.method for r in s.requests], ["POST", "GET"])

    def test_snapshots_collection(self) -> None:
        s = self.answer(ok({"snapshots": [{"id": "snap_1"}], "next_cursor": None}), ok({"id": "snap_1"}),
                        ok(None, 204), ok(None, 204))
        self.assertEqual([x.id for x in self.client.snapshots.list(sandbox_id="sb_one")], ["snap_1"])
        self.assertEqual(s.query(0), {"sandbox_id": ["sb_one"], "limit": ["100"]})
        got = self.client.snapshots.get("snap_1")
        got.delete()
        self.client.snapshots.delete("snap_2")
        self.assertEqual([(r.method, s.path(i)) for i, r in enumerate(s.requests)][2:],
                         [("DELETE", "/v1/snapshots/snap_1"), ("DELETE", "/v1/snapshots/snap_2")])

    def test_volumes(self) -> None:
        vol = {"id": "vol_1", "name": "data", "size_mib": 64, "host_id": "h1",
               "attachments": [{"sandbox_id": "sb_one", "mount_path": "/data", "read_only": True}]}
        s = self.answer(ok(vol, 201), ok({"volumes": [vol]}), ok(vol), ok(dict(vol, size_mib=128)),
                        ok(dict(vol, size_mib=256)), ok(dict(vol, size_mib=256)), ok(None, 204), ok(None, 204))
        v = self.client.volumes.create(64, name="data")
        self.assertEqual((s.requests[0].json(), s.requests[0].timeout), ({"size_mib": 64, "name": "data"}, 900.0))
        self.assertEqual([(a.sandbox_id, a.read_only) for a in v.attachments], [("sb_one", True)])
        self.assertEqual(v.mount("/m"), {"volume_id": "vol_1", "mount_path": "/m", "read_only": False})
        self.assertEqual([x.id for x in self.client.volumes.list()], ["vol_1"])
        self.assertEqual(self.client.volumes.get("vol_1").name, "data")
        self.assertEqual(self.client.volumes.resize("vol_1", 128).size_mib, 128)
        self.assertEqual((s.path(3), s.requests[3].json(), s.requests[3].timeout),
                         ("/v1/volumes/vol_1/resize", {"size_mib": 128}, 900.0))
        self.assertIs(v.resize(256), v)
        self.assertEqual(v.size_mib, 256)
        self.assertEqual(v.refresh().size_mib, 256)
        v.delete()
        self.client.volumes.delete("vol_2")
        self.assertEqual([s.path(i) for i in (6, 7)], ["/v1/volumes/vol_1", "/v1/volumes/vol_2"])
        with self.assertRaises(ValueError):
            self.client.volumes.get("")
        with self.assertRaises(ValueError):
            pandastack.Volume({}, self.client).refresh()
        self.assertEqual(len(s.requests), 8)

    def test_templates(self) -> None:
        tpl = {"name": "mine", "owner": "team", "vcpus": 2, "aliases": ["m"], "baked": True}
        s = self.answer(ok({"templates": [tpl]}), ok(tpl),
                        ndjson({"progress": "step 1"}, {"progress": "step 2"}, {"template": tpl}),
                        ndjson({"progress": "step 1"}, {"error": {"code": "build_failed", "message": "step 2 failed"}}),
                        ok(None, 204))
        self.assertEqual([t.name for t in self.client.templates.list()], ["mine"])
        self.assertEqual(self.client.templates.get("mine").aliases, ["m"])
        progress: List[str] = []
        built = self.client.templates.build({"name": "mine", "from": "base"}, on_progress=progress.append)
        self.assertEqual((built.name, progress), ("mine", ["step 1", "step 2"]))
        self.assertEqual(s.requests[2].json(), {"name": "mine", "from": "base"})
        with self.assertRaises(pandastack.BuildFailed) as cm:
            self.client.templates.build("name: mine\nfrom: base\n")
        self.assertEqual((cm.exception.message, cm.exception.status), ("step 2 failed", None))
        self.assertEqual((s.requests[3].headers["Content-Type"], s.requests[3].body),
                         ("application/yaml", b"name: mine\nfrom: base\n"))
        self.client.templates.delete("mine")
        self.assertEqual((s.requests[4].method, s.path(4)), ("DELETE", "/v1/templates/mine"))


# -- directory watch, archives, port URLs, the asyncio client ---------------------------------------


def targz(*members: Any) -> bytes:
    """A .tar.gz of (name, content) files, (name/, None) directories and (name, "->target") links."""
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, content in members:
            info = tarfile.TarInfo(name)
            if content is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(info)
            elif content.startswith("->"):
                info.type, info.linkname = tarfile.SYMTYPE, content[2:]
                tf.addfile(info)
            else:
                data = content.encode()
                info.size, info.mode = len(data), 0o644
                tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class FileTree(OfflineCase):
    def test_watch(self) -> None:
        s = self.answer(ndjson({"type": "ready", "path": "/w"}, {"type": "create", "path": "/w/a"},
                               {"type": "rename", "path": "/w/b", "from": "/w/a"},
                               {"type": "error", "error": {"code": "internal", "message": "the watch broke"}}))
        h = self.sandbox().files.watch("/w", recursive=True)
        self.assertEqual((h.path, s.path(0)), ("/w", "/v1/sandboxes/sb_one/files/watch?path=%2Fw&recursive=1"))
        got = [next(h), next(h)]
        self.assertEqual([(e.type, e.path, e.from_path) for e in got], [("create", "/w/a", None), ("rename", "/w/b", "/w/a")])
        with self.assertRaises(pandastack.InternalError) as cm:
            next(h)
        self.assertIn("the watch broke", str(cm.exception))
        self.assertTrue(h.closed)
        self.answer(err(400, "invalid_request", "/w/f is not a directory"))
        with self.assertRaises(pandastack.InvalidRequest):
            self.sandbox().files.watch("/w/f")

    def test_upload_dir_sends_a_targz_of_the_tree(self) -> None:
        import tarfile
        src = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, src)
        os.makedirs(os.path.join(src, "sub"))
        with open(os.path.join(src, "sub", "f.txt"), "w") as f:
            f.write("hi")
        os.symlink("sub/f.txt", os.path.join(src, "link"))
        sent: Dict[str, Any] = {}

        def check(req: HTTPRequest) -> HTTPResponse:
            with tarfile.open(fileobj=io.BytesIO(req.body.read()), mode="r:gz") as tf:
                sent["names"] = sorted((m.name, m.type, m.linkname) for m in tf.getmembers())
            return ok({"entries": 3, "bytes": 2})

        s = self.answer(check)
        self.assertEqual(self.sandbox().files.upload_dir(src, "/dst"), {"entries": 3, "bytes": 2})
        self.assertEqual((s.requests[0].method, s.path(0)), ("PUT", "/v1/sandboxes/sb_one/files/archive?path=%2Fdst"))
        self.assertEqual(sent["names"], [("link", tarfile.SYMTYPE, "sub/f.txt"), ("sub", tarfile.DIRTYPE, ""),
                                         ("sub/f.txt", tarfile.REGTYPE, "")])
        with self.assertRaises(NotADirectoryError):
            self.sandbox().files.upload_dir(os.path.join(src, "link"), "/dst")

    def test_download_dir_unpacks_and_stays_inside(self) -> None:
        dst = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, dst)
        s = self.answer(ok(targz(("d/", None), ("d/f.txt", "hello"), ("l", "->d/f.txt"), ("out", "->/etc/hostname"))))
        self.assertEqual(self.sandbox().files.download_dir("/src", os.path.join(dst, "copy")), 4)
        self.assertEqual(s.query(0), {"path": ["/src"], "format": ["tar.gz"]})
        with open(os.path.join(dst, "copy", "l")) as f:
            self.assertEqual(f.read(), "hello")
        self.assertEqual(os.readlink(os.path.join(dst, "copy", "out")), "/etc/hostname")
        outside = os.path.join(dst, "outside")
        os.mkdir(outside)
        for evil in (targz(("../outside/x", "bad")), targz(("/tmp/x-abs", "bad")),
                     targz(("l2", "->" + outside), ("l2/x", "bad"))):
            self.answer(ok(evil))
            with self.assertRaises(pandastack.PandaStackError):
                self.sandbox().files.download_dir("/src", os.path.join(dst, "evil"))
            self.assertEqual(os.listdir(outside), [])

    def test_get_url(self) -> None:
        s = self.answer(ok({"version": "v", "egress": {}, "proxy_domain": "sbx.example"}))
        sb = self.sandbox()
        self.assertEqual(sb.get_url(8000), "http://8000-sb_one.sbx.example:8080")
        self.assertEqual(sb.get_url(3000), "http://3000-sb_one.sbx.example:8080")  # info asked once
        self.assertEqual(len(s.requests), 1)
        private = self.sandbox(public_ports=False, traffic_token="pdt_a/b")
        self.assertEqual(private.get_url(80), "http://80-sb_one.sbx.example:8080/?pandastack_traffic_token=pdt_a%2Fb")
        with self.assertRaises(ValueError):
            sb.get_url(0)
        other = pandastack.PandaStack(token="k", base_url="https://api.example", send=Script(ok({"version": "v"})), env={})
        with self.assertRaises(pandastack.ConfigurationError):
            pandastack.Sandbox(other, SB).get_url(80)


class AsyncClient(unittest.TestCase):
    """AsyncPandaStack: the sync client's calls, run in worker threads (never on the loop's)."""

    def test_same_surface_off_the_loop(self) -> None:
        import asyncio
        import threading
        threads: List[str] = []
        script = Script(ok(SB, 201), ok({"stdout": "hi\n", "stderr": "", "exit_code": 0}),
                        ndjson({"type": "ready", "path": "/w"}, {"type": "write", "path": "/w/a"}),
                        ndjson({"type": "ready"}, {"type": "ping"}), ok(SB))

        def send(req: HTTPRequest) -> Any:
            threads.append(threading.current_thread().name)
            return script(req)

        async def main() -> None:
            loop_thread = threading.current_thread().name
            async with pandastack.AsyncPandaStack(token="k", base_url="http://x.invalid", send=send, env={}) as client:
                sb = await client.sandboxes.create(template="base")
                self.assertEqual((sb.id, sb.state), ("sb_one", "running"))
                seen: List[str] = []

                async def on_stdout(text: str) -> None:  # an async callback runs on the loop
                    seen.append(threading.current_thread().name)

                r = await sb.exec("echo hi")
                self.assertEqual((r.stdout, r.exit_code), ("hi\n", 0))
                watch = await sb.files.watch("/w")
                self.assertEqual(watch.path, "/w")
                async for ev in watch:
                    self.assertEqual((ev.type, ev.path), ("write", "/w/a"))
                    break
                await watch.aclose()
                types = [e["type"] async for e in client.events()]
                self.assertEqual(types, ["ready", "ping"])
                again = await client.sandboxes.get("sb_one")
                self.assertEqual(again, sb)
                self.assertNotIn(loop_thread, threads)
                self.assertTrue(all(t.startswith("pandastack") for t in threads), threads)
                del on_stdout, seen

        asyncio.run(main())

    def test_errors_are_raised_in_the_awaiting_task(self) -> None:
        import asyncio

        async def main() -> None:
            client = pandastack.AsyncPandaStack(token="k", base_url="http://x.invalid", env={},
                                                send=Script(err(404, "not_found", "sandbox sb_x not found")))
            with self.assertRaises(pandastack.NotFound):
                await client.sandboxes.get("sb_x")
            await client.close()

        asyncio.run(main())


# -- structure: the ClientContext seam, the version, the NotImplemented name -----------------------


class UsageAndAudit(OfflineCase):
    def test_events(self) -> None:
        sb = {"id": "sb_one", "state": "hibernated", "host": "h1"}
        s = self.answer(ndjson({"type": "ready", "at": "t0"}, {"type": "sandbox", "at": "t1", "sandbox": sb}, {"type": "ping", "at": "t2"}))
        got = list(self.client.events())
        self.assertEqual([e["type"] for e in got], ["ready", "sandbox", "ping"])
        self.assertEqual((got[1]["sandbox"]["state"], s.path(0), s.requests[0].headers["Accept"]),
                         ("hibernated", "/v1/events", "application/x-ndjson"))

    def test_usage_and_audit(self) -> None:
        usage = {"team_id": "team_a", "sandboxes": {"used": 2, "limit": 3}, "vcpus": {"used": 2, "limit": None},
                 "memory_mib": {"used": 1024, "limit": None}}
        entry = {"id": "aud_1", "key_id": "key_a", "method": "DELETE", "route": "/v1/sandboxes/{id}",
                 "resource_id": "sb_one", "status": 204, "request_id": "req_1", "source": "127.0.0.1",
                 "created_at": "2026-01-01T00:00:00Z"}
        s = self.answer(ok(usage), ok({"entries": [entry], "next_cursor": "c2"}), ok({"entries": [], "next_cursor": None}))
        u = self.client.usage()
        self.assertEqual((u["sandboxes"]["limit"], u["vcpus"]["limit"], s.path(0)), (3, None, "/v1/usage"))
        p = self.client.audit(since="2026-01-01T00:00:00Z", resource="sb_one", limit=10)
        self.assertEqual((p["entries"][0]["route"], p["next_cursor"]), ("/v1/sandboxes/{id}", "c2"))
        self.assertEqual(s.query(1), {"since": ["2026-01-01T00:00:00Z"], "resource": ["sb_one"], "limit": ["10"]})
        p = self.client.audit(cursor="c2")
        self.assertEqual((p["entries"], p["next_cursor"], s.path(2)), ([], None, "/v1/audit?cursor=c2"))


class MinimalContext:
    """Only what the ClientContext protocol names: a transport and the long timeout."""

    def __init__(self, send: Script) -> None:
        self._http = pandastack._http.Transport("http://ctx.invalid", "pds_ctx", 5.0, 0, send=send)
        self.create_timeout = 42.0


class ClientContextSeam(unittest.TestCase):
    def test_resource_modules_do_not_import_the_client(self) -> None:
        for mod in ("sandbox.py", "models.py", "_context.py", "_http.py", "errors.py"):
            with open(os.path.join(PKG, mod), encoding="utf-8") as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom):
                    self.assertNotIn("client", (node.module or "").split("."), "%s imports %s" % (mod, node.module))
                    self.assertNotIn("client", [a.name for a in node.names], mod)

    def test_sandbox_module_imports_on_its_own(self) -> None:
        # A stub package object stands in for pandastack/__init__.py (which imports the client),
        # so whatever sandbox.py imports is all that gets loaded.
        code = ("import sys, types\n"
                "pkg = types.ModuleType('pandastack'); pkg.__path__ = [%r]; sys.modules['pandastack'] = pkg\n"
                "import pandastack.sandbox as s\n"
                "assert 'pandastack.client' not in sys.modules, 'sandbox.py pulled in client.py'\n"
                "print(s.ClientContext.__name__)\n" % PKG)
        p = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.strip(), "ClientContext")

    def test_a_minimal_context_drives_every_resource(self) -> None:
        vol = {"id": "vol_1", "size_mib": 8}
        s = Script(ok(SB, 201), ok({"sandboxes": [dict(SB, id="sb_kid")]}, 201), ok({"id": "snap_1"}, 201),
                   ok(None, 204), ok(vol), ok(vol), ok(None, 204), ok({"templates": []}))
        ctx = MinimalContext(s)
        sb = pandastack.Sandboxes(ctx).create(template="base")
        self.assertEqual(sb.fork().id, "sb_kid")
        sb.snapshot().delete()
        v = pandastack.Volumes(ctx).get("vol_1")
        v.resize(8)
        v.delete()
        pandastack.Templates(ctx).list()
        self.assertEqual([r.timeout for r in s.requests[:3]], [42.0, 42.0, 42.0])
        self.assertEqual([(r.method, urllib.parse.urlsplit(r.url).path) for r in s.requests][3:7],
                         [("DELETE", "/v1/snapshots/snap_1"), ("GET", "/v1/volumes/vol_1"),
                          ("POST", "/v1/volumes/vol_1/resize"), ("DELETE", "/v1/volumes/vol_1")])
        self.assertEqual(s.requests[0].headers["Authorization"], "Bearer pds_ctx")

    def test_client_satisfies_the_protocol(self) -> None:
        from pandastack._context import ClientContext

        c = pandastack.PandaStack(token="pds_x", base_url="http://h.invalid", env={}, create_timeout=5.0)
        for name in ClientContext.__annotations__:
            self.assertTrue(hasattr(c, name), name)
        self.assertEqual(set(ClientContext.__annotations__), {"_http", "create_timeout"})
        self.assertIs(c.sandboxes._client, c)


def _pyproject_text() -> str:
    with open(PYPROJECT, encoding="utf-8") as f:
        return f.read()


class Version(unittest.TestCase):
    def test_version_is_written_once(self) -> None:
        text = _pyproject_text()
        project = re.search(r"(?ms)^\[project\]\n(.*?)(?=^\[)", text)
        self.assertIsNotNone(project)
        self.assertIsNone(re.search(r"(?m)^version\s*=", project.group(1)), "[project] sets a static version")
        self.assertRegex(project.group(1), r'(?m)^dynamic\s*=\s*\[[^]]*"version"')
        try:
            import tomllib
        except ImportError:  # Python < 3.11: the textual checks below still hold
            tomllib = None
        if tomllib is not None:
            cfg = tomllib.loads(text)
            self.assertIn("version", cfg["project"]["dynamic"])
            self.assertNotIn("version", cfg["project"])
            self.assertEqual(cfg["tool"]["setuptools"]["dynamic"]["version"],
                             {"attr": "pandastack._version.__version__"})
        from pandastack import _version

        self.assertEqual(pandastack.__version__, _version.__version__)
        self.assertRegex(pandastack.__version__, r"^\d+\.\d+\.\d+")

    def _built_version(self, version: Optional[str]) -> str:
        """Version: in the metadata setuptools builds from a copy of the project (the copy's
        _version.py rewritten to ``version`` when given)."""
        try:
            import setuptools.build_meta  # noqa: F401
        except ImportError:
            self.skipTest("setuptools is not installed")
        root = os.path.dirname(HERE)
        tmp = tempfile.mkdtemp(prefix="pandastack-meta-")
        self.addCleanup(shutil.rmtree, tmp, True)
        proj = os.path.join(tmp, "proj")
        os.mkdir(proj)
        for name in ("pyproject.toml", "README.md"):
            shutil.copy(os.path.join(root, name), proj)
        shutil.copytree(os.path.join(root, "src"), os.path.join(proj, "src"),
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        if version is not None:
            with open(os.path.join(proj, "src", "pandastack", "_version.py"), "w", encoding="utf-8") as f:
                f.write("__version__ = %r\n" % version)
        out = os.path.join(tmp, "out")
        os.mkdir(out)
        code = ("import sys, setuptools.build_meta as b; "
                "print(b.prepare_metadata_for_build_wheel(sys.argv[1]))")
        p = subprocess.run([sys.executable, "-c", code, out], cwd=proj, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        dist_info = p.stdout.strip().splitlines()[-1]
        with open(os.path.join(out, dist_info, "METADATA"), encoding="utf-8") as f:
            meta = f.read()
        m = re.search(r"(?m)^Version: (.+)$", meta)
        self.assertIsNotNone(m, meta[:500])
        return m.group(1).strip()

    def test_package_metadata_reports_the_sdk_version(self) -> None:
        self.assertEqual(self._built_version(None), pandastack.__version__)

    def test_package_metadata_follows_version_py(self) -> None:
        self.assertEqual(self._built_version("9.8.7"), "9.8.7")

    def test_installed_metadata_if_installed(self) -> None:
        from importlib import metadata

        try:
            installed = metadata.version("pandastack")
        except metadata.PackageNotFoundError:
            self.skipTest("pandastack is not installed (tests import it from src/)")
        dist = metadata.distribution("pandastack")
        if os.path.realpath(str(dist.locate_file("pandastack"))) != os.path.realpath(PKG):
            self.skipTest("an installed pandastack other than this source tree")
        self.assertEqual(installed, pandastack.__version__)

    def test_user_agent_carries_the_version(self) -> None:
        s = Script(ok({"templates": []}))
        pandastack.PandaStack(token="pds_x", base_url="http://h.invalid", send=s, env={}).templates.list()
        self.assertEqual(s.requests[0].headers["User-Agent"], "pandastack-python/%s" % pandastack.__version__)


class NotImplementedName(unittest.TestCase):
    def test_star_import_keeps_the_builtin(self) -> None:
        for module in ("pandastack", "pandastack.errors"):
            ns: Dict[str, Any] = {}
            exec("from %s import *" % module, ns)
            self.assertNotIn("NotImplemented", ns, module)
            self.assertIs(eval("NotImplemented", ns), builtins.NotImplemented)
            self.assertIs(ns["Unimplemented"], pandastack.Unimplemented)
        self.assertNotIn("NotImplemented", pandastack.__all__)
        self.assertNotIn("NotImplemented", pandastack.errors.__all__)
        self.assertNotIn("NotImplemented", vars(pandastack))
        self.assertNotIn("NotImplemented", vars(pandastack.errors))

    def test_old_name_still_resolves(self) -> None:
        self.assertIs(pandastack.NotImplemented, pandastack.Unimplemented)
        self.assertIs(pandastack.errors.NotImplemented, pandastack.Unimplemented)
        ns: Dict[str, Any] = {}
        exec("from pandastack import NotImplemented\nfrom pandastack.errors import NotImplemented as E", ns)
        self.assertIs(ns["NotImplemented"], pandastack.Unimplemented)
        self.assertIs(ns["E"], pandastack.Unimplemented)
        self.assertEqual(pandastack.Unimplemented.__name__, "Unimplemented")
        self.assertTrue(issubclass(pandastack.Unimplemented, NotImplementedError))
        with self.assertRaises(AttributeError):
            pandastack.NoSuchThing  # noqa: B018
        with self.assertRaises(ImportError):
            exec("from pandastack import NoSuchThing", {})

    def test_star_import_in_a_fresh_interpreter(self) -> None:
        code = ("from pandastack import *\nimport builtins\n"
                "assert NotImplemented is builtins.NotImplemented\n"
                "import pandastack\nassert pandastack.NotImplemented is Unimplemented\nprint('ok')")
        p = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=SRC),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
        self.assertEqual((p.returncode, p.stdout.strip()), (0, "ok"), p.stderr)


# -- the seed snippets, offline --------------------------------------------------------------------


class FakeAPI:
    """A small in-memory stand-in for the API, enough for the seed snippets: sandboxes, exec of
    ``python -c 'print(EXPR)'`` (EXPR evaluated as arithmetic), files, forks."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.sandboxes: Dict[str, Dict[str, Any]] = {}
        self.files: Dict[str, Dict[str, bytes]] = {}
        self.requests: List[HTTPRequest] = []

    def _new(self, template: str, files: Optional[Dict[str, bytes]] = None, **extra: Any) -> Dict[str, Any]:
        sid = "sb_%04d" % (len(self.sandboxes) + 1)
        self.sandboxes[sid] = dict(SB, id=sid, template=template, **extra)
        self.files[sid] = dict(files or {})
        return self.sandboxes[sid]

    def __call__(self, req: HTTPRequest) -> HTTPResponse:
        self.requests.append(req)
        if req.headers.get("Authorization") != "Bearer " + self.key:
            return err(401, "unauthorized", "no such key")
        u = urllib.parse.urlsplit(req.url)
        q = {k: v[0] for k, v in urllib.parse.parse_qs(u.query).items()}
        parts = u.path.strip("/").split("/")
        if parts[:2] != ["v1", "sandboxes"]:
            return err(404, "not_found", "no route %s" % u.path)
        if len(parts) == 2 and req.method == "POST":
            body = req.json()
            return ok(self._new(body["template"], metadata=body.get("metadata") or {}), 201)
        sid = urllib.parse.unquote(parts[2])
        if sid not in self.sandboxes:
            return err(404, "not_found", "sandbox %s not found" % sid)
        sub = parts[3:]
        if sub == ["exec"]:
            m = re.fullmatch(r"python -c 'print\((.+)\)'", req.json()["cmd"])
            if not m or not re.fullmatch(r"[0-9+*/() -]+", m.group(1)):
                return ok({"stdout": "", "stderr": "unsupported", "exit_code": 127})
            return ok({"stdout": "%s\n" % eval(m.group(1), {"__builtins__": {}}), "stderr": "", "exit_code": 0})
        if sub == ["files"] and req.method == "PUT":
            self.files[sid][q["path"]] = req.body
            return ok({"path": q["path"], "type": "file", "size": len(req.body)}, 201)
        if sub == ["files"] and req.method == "GET":
            if q["path"] not in self.files[sid]:
                return err(404, "not_found", "no such file %s" % q["path"])
            return ok(self.files[sid][q["path"]])
        if sub == ["fork"]:
            kid = self._new(self.sandboxes[sid]["template"], self.files[sid], fork_of=sid)
            return ok({"sandboxes": [kid]}, 201)
        return err(404, "not_found", "no route %s" % u.path)


class SeedSnippetsOffline(EachSeed, unittest.TestCase):
    """The seeds' Python snippets (tests/fixtures/, verbatim) run in this process against FakeAPI,
    put in place of the default send: the public calls they make still exist, take what the
    snippets pass, and produce what they print. test_seeds.py runs them against the real server."""

    CASES = {
        "seed_000_northflank.py": ("PANDASTACK_API_KEY", ["1024"], 3),
        "seed_001_e2b.py": ("PANDASTACK_TOKEN", ["1024", "hello from inside the VM"], 5),
        "seed_003_daytona.py": ("PANDASTACK_TOKEN", ["4", "checkpoint"], 5),
    }

    def run_fixture(self, name: str) -> None:
        key_var, want, n_requests = self.CASES[name]
        api = FakeAPI("pds_seed")
        out = io.StringIO()
        env = {key_var: "pds_seed", "PANDASTACK_BASE_URL": "http://seed.invalid"}
        with mock.patch.dict(os.environ, env, clear=True), \
                mock.patch.object(pandastack._http, "http_client_send", api), \
                contextlib.redirect_stdout(out):
            runpy.run_path(os.path.join(HERE, "fixtures", name), run_name="__main__")
        self.assertEqual([line.strip() for line in out.getvalue().splitlines() if line.strip()], want)
        self.assertEqual(len(api.requests), n_requests)
        self.assertTrue(all(r.url.startswith("http://seed.invalid/v1/") for r in api.requests))
        self.assertTrue(any(s.get("fork_of") for s in api.sandboxes.values()), "the snippet forks")


# -- functions and schedules -----------------------------------------------------------------------


class FunctionsAndSchedules(OfflineCase):
    def test_deploy_sends_spec_and_zipped_directory(self) -> None:
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        with open(os.path.join(d, "main.py"), "w") as f:
            f.write("def handler(e, c):\n    return e\n")
        s = self.answer(ok({"id": "fn_1", "name": "hello", "version": 1, "state": "ready"}, 201))
        fn = self.client.functions.deploy("hello", d, env={"A": "1"}, secrets={"T": "x"}, timeout_seconds=5)
        self.assertEqual(fn["id"], "fn_1")
        req = s.requests[0]
        self.assertEqual((req.method, s.path()), ("POST", "/v1/functions"))
        ctype = req.headers["Content-Type"]
        self.assertTrue(ctype.startswith("multipart/form-data; boundary="), ctype)
        boundary = ctype.split("boundary=")[1].encode()
        parts = req.body.split(b"--" + boundary)
        spec = json.loads(parts[1].split(b"\r\n\r\n", 1)[1].rsplit(b"\r\n", 1)[0])
        self.assertEqual(spec, {"name": "hello", "runtime": "python3", "handler": "main.handler", "env": {"A": "1"},
                                "secrets": {"T": "x"}, "timeout_seconds": 5})
        import zipfile
        bundle = parts[2].split(b"\r\n\r\n", 1)[1].rsplit(b"\r\n", 1)[0]
        self.assertEqual(zipfile.ZipFile(io.BytesIO(bundle)).namelist(), ["main.py"])

    def test_invoke_and_runs(self) -> None:
        run = {"id": "run_1", "status": "succeeded", "result": {"x": 1}, "logs": "hi\n", "duration_ms": 3}
        s = self.answer(ok(run), ok(dict(run, status="queued"), 202), ok({"runs": [run]}), ok(run))
        self.assertEqual(self.client.functions.invoke("fn_1", {"a": 1})["result"], {"x": 1})
        self.assertEqual((s.path(0), s.requests[0].json()), ("/v1/functions/fn_1/invoke", {"payload": {"a": 1}}))
        self.assertIsNone(s.requests[0].timeout)  # a sync invoke waits for the function
        self.assertEqual(self.client.functions.invoke("fn_1", 2, async_=True)["status"], "queued")
        self.assertEqual(s.path(1), "/v1/functions/fn_1/invoke?async=1")
        self.assertEqual(len(self.client.functions.runs("fn_1", limit=5)), 1)
        self.assertEqual(s.path(2), "/v1/functions/fn_1/runs?limit=5")
        self.client.functions.run("fn_1", "run_1")
        self.assertEqual(s.path(3), "/v1/functions/fn_1/runs/run_1")

    def test_schedules(self) -> None:
        sc = {"id": "sch_1", "cron": "@hourly", "timezone": "Europe/Berlin", "enabled": True}
        s = self.answer(ok(sc, 201), ok(dict(sc, enabled=False)), ok({"id": "srun_1", "trigger": "manual"}, 202),
                        ok({"runs": []}), ok(None, 204))
        self.client.schedules.create("@hourly", "Europe/Berlin", template="base", cmd="date", overlap="queue")
        self.assertEqual(s.requests[0].json(), {"cron": "@hourly", "timezone": "Europe/Berlin", "template": "base",
                                                "cmd": "date", "overlap": "queue"})
        self.assertFalse(self.client.schedules.pause("sch_1")["enabled"])
        self.assertEqual(self.client.schedules.trigger("sch_1")["trigger"], "manual")
        self.assertEqual(self.client.schedules.runs("sch_1"), [])
        self.client.schedules.delete("sch_1")
        self.assertEqual([r.method + " " + s.path(i) for i, r in enumerate(s.requests)],
                         ["POST /v1/schedules", "POST /v1/schedules/sch_1/pause", "POST /v1/schedules/sch_1/trigger",
                          "GET /v1/schedules/sch_1/runs", "DELETE /v1/schedules/sch_1"])


# -- databases -------------------------------------------------------------------------------------


class DatabasesOffline(OfflineCase):
    def test_create_list_query_delete(self) -> None:
        db = {"id": "db_1", "name": "shop", "state": "ready", "password": "pw",
              "connection": {"uri": "postgres://shop_owner:pw@db_1.db.localhost:5432/shop?sslmode=require"}}
        res = {"fields": [{"name": "n", "dataTypeID": 23}], "rows": [["42"]], "command": "SELECT", "rowCount": 1}
        s = self.answer(ok(db, 201), ok({"databases": [db]}), ok(db), ok(res), ok(None, 204), ok(db, 201), ok(db),
                        ok({"size_bytes": 1, "connections": 0}), ok(b"LOG:  ready\n"), ok({"id": "sn_1"}, 201),
                        ok({"backups": [{"id": "sn_1"}]}), ok(db, 201))
        self.assertEqual(self.client.databases.create("shop", version="16", extensions=("vector",))["password"], "pw")
        self.assertEqual(s.requests[0].json(), {"name": "shop", "version": "16", "extensions": ["vector"]})
        self.assertEqual(len(self.client.databases.list()), 1)
        self.client.databases.get("db_1")
        self.assertEqual(self.client.databases.query("db_1", "select $1::int + 1 as n", [41])["rows"], [["42"]])
        self.assertEqual(s.requests[3].json(), {"query": "select $1::int + 1 as n", "params": [41]})
        self.client.databases.delete("db_1")
        self.assertEqual([r.method + " " + s.path(i) for i, r in enumerate(s.requests)],
                         ["POST /v1/databases", "GET /v1/databases", "GET /v1/databases/db_1",
                          "POST /v1/databases/db_1/query", "DELETE /v1/databases/db_1"])
        self.client.databases.branch("db_1", "dev")
        self.assertEqual((s.path(5), s.requests[5].json()), ("/v1/databases/db_1/branches", {"name": "dev"}))
        self.client.databases.rotate_password("db_1")
        self.assertEqual(s.path(6), "/v1/databases/db_1/password")
        self.assertEqual(self.client.databases.stats("db_1")["size_bytes"], 1)
        self.assertEqual(self.client.databases.logs("db_1", bytes=100), "LOG:  ready\n")
        self.assertEqual(s.path(8), "/v1/databases/db_1/logs?bytes=100")
        self.assertEqual(self.client.databases.backup("db_1")["id"], "sn_1")
        self.assertEqual(len(self.client.databases.backups("db_1")), 1)
        self.client.databases.restore("db_1", "back", to_time="2026-01-01T00:00:00Z")
        self.assertEqual((s.path(11), s.requests[11].json()), ("/v1/databases/db_1/restore",
                                                              {"name": "back", "to_time": "2026-01-01T00:00:00Z"}))


# -- apps --------------------------------------------------------------------------------------------


class AppsOffline(OfflineCase):
    def test_create_deploy_wait_rollback(self) -> None:
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        for name, content in (("server.js", "x"), (".gitignore", "*.log\nnode_modules/\n"), ("debug.log", "x"),
                              ("node_modules/a.js", "x")):
            os.makedirs(os.path.dirname(os.path.join(d, name)), exist_ok=True)
            with open(os.path.join(d, name), "w") as f:
                f.write(content)
        dep = {"id": "dep_1", "state": "queued", "plan": {"framework": "node"}}
        s = self.answer(ok({"id": "app_1", "name": "web"}, 201), ok(dep, 202), ok(dict(dep, state="building")),
                        ok(dict(dep, state="live")), HTTPResponse(200, b"==> build\n", {"Content-Type": "text/plain"}),
                        ok(dict(dep, state="live")), ok(None, 204), ok(dep, 202), ok({"secret": "whsec_x"}))
        self.client.apps.create("web", env={"A": "1"}, secrets={"T": "x"}, build={"port": 3000}, suspend_after_seconds=60)
        self.assertEqual((s.path(0), s.requests[0].json()), ("/v1/apps", {"name": "web", "env": {"A": "1"}, "secrets": {"T": "x"},
                                                                          "build": {"port": 3000}, "suspend_after_seconds": 60}))
        self.assertEqual(self.client.apps.deploy("web", d)["id"], "dep_1")
        self.assertEqual((s.requests[1].method, s.path(1)), ("POST", "/v1/apps/web/deployments"))
        import tarfile
        names = tarfile.open(fileobj=io.BytesIO(s.requests[1].body), mode="r:gz").getnames()
        self.assertEqual(sorted(names), [".gitignore", "server.js"])
        self.assertEqual(self.client.apps.wait("web", "dep_1", interval=0)["state"], "live")
        self.assertEqual(self.client.apps.build_logs("web", "dep_1"), "==> build\n")
        self.assertEqual(s.path(4), "/v1/apps/web/deployments/dep_1/logs")
        self.client.apps.rollback("web", "dep_0")
        self.assertEqual((s.path(5), s.requests[5].json()), ("/v1/apps/web/rollback", {"deployment_id": "dep_0"}))
        self.client.apps.delete("web")
        self.assertEqual((s.requests[6].method, s.path(6)), ("DELETE", "/v1/apps/web"))
        self.client.apps.deploy("web", b"\x1f\x8b", branch="feature/x", clean=True)
        self.assertEqual(s.path(7), "/v1/apps/web/deployments?branch=feature%2Fx&clean=true")
        self.assertEqual(self.client.apps.connect_github("web", "acme/web", token="ghp_x")["secret"], "whsec_x")
        self.assertEqual((s.path(8), s.requests[8].json()), ("/v1/apps/web/github", {"repo": "acme/web", "token": "ghp_x"}))

    def test_variables_and_previews(self) -> None:
        prev = {"slug": "feature-x", "branch": "feature/x", "deployment_id": "dep_2"}
        s = self.answer(ok({"id": "app_1"}), ok({"id": "app_1"}), ok({"id": "app_1"}), ok({"previews": [prev]}), ok(None, 204))
        self.client.apps.set_env("web", {"A": "1"})
        self.client.apps.set_secrets("web", {"K": "v"})
        self.client.apps.unset("web", "A", "K")
        self.assertEqual([r.json() for r in s.requests[:3]], [{"set_env": {"A": "1"}}, {"set_secrets": {"K": "v"}}, {"unset": ["A", "K"]}])
        self.assertEqual(self.client.apps.previews("web"), [prev])
        self.client.apps.delete_preview("web", "feature/x")
        self.assertEqual([(r.method, s.path(i)) for i, r in enumerate(s.requests)],
                         [("PATCH", "/v1/apps/web")] * 3 + [("GET", "/v1/apps/web/previews"), ("DELETE", "/v1/apps/web/previews/feature%2Fx")])


class _ToyWebSocketServer:
    """A WebSocket server on loopback for one connection, scripted: ``script(conn, frames)`` runs
    after the handshake with helpers to send frames and read the client's (unmasked for the test)."""

    def __init__(self, script: Callable[..., None], refuse: Optional[bytes] = None) -> None:
        from pandastack import _ws
        self._ws = _ws
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.port = self.sock.getsockname()[1]
        self.request = b""
        self.got: List[Any] = []
        self.error: Optional[BaseException] = None
        self._script, self._refuse = script, refuse
        import threading
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        try:
            f = conn.makefile("rb")
            while True:
                line = f.readline()
                self.request += line
                if line in (b"\r\n", b""):
                    break
            if self._refuse is not None:
                conn.sendall(self._refuse)
                return
            key = re.search(rb"Sec-WebSocket-Key: (\S+)", self.request).group(1).decode()
            conn.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                          "Sec-WebSocket-Accept: %s\r\n\r\n" % self._ws.accept_key(key)).encode())

            def frame(opcode: int, payload: bytes, fin: bool = True) -> None:
                n = len(payload)
                head = bytes([(0x80 if fin else 0) | opcode])
                if n < 126:
                    head += bytes([n])
                elif n < 65536:
                    head += bytes([126]) + n.to_bytes(2, "big")
                else:
                    head += bytes([127]) + n.to_bytes(8, "big")
                conn.sendall(head + payload)

            def read() -> Any:
                b0, b1 = f.read(2)
                n = b1 & 0x7F
                if n == 126:
                    n = int.from_bytes(f.read(2), "big")
                elif n == 127:
                    n = int.from_bytes(f.read(8), "big")
                assert b1 & 0x80, "a client frame must be masked"
                mask = f.read(4)
                data = bytes(c ^ mask[i % 4] for i, c in enumerate(f.read(n)))
                self.got.append((b0 & 0x0F, data))
                return b0 & 0x0F, data

            self._script(frame, read)
        except BaseException as e:  # reported by the test
            self.error = e
        finally:
            conn.close()
            self.sock.close()


class TerminalWebSocket(unittest.TestCase):
    """The terminal's WebSocket client (``_ws``, RFC 6455 on the standard library) against a toy
    server on loopback: the handshake (key, accept, Authorization), masked frames out, fragmented
    and long messages in, a ping answered, the exit message, the closing handshake; a refused
    upgrade is the API's typed error."""

    def sandbox(self, port: int) -> Any:
        c = pandastack.PandaStack(token="pds_ws", base_url="http://127.0.0.1:%d" % port, env={})
        return pandastack.Sandbox(c, {"id": "sb_1", "state": "running"})

    def test_frames(self) -> None:
        big = os.urandom(70000)

        def script(frame: Callable[..., None], read: Callable[[], Any]) -> None:
            frame(0x2, b"hel", fin=False)
            frame(0x9, b"are you there")  # a ping between fragments
            frame(0x0, b"lo")
            frame(0x2, big)
            assert read() == (0xA, b"are you there")  # the pong
            assert read() == (0x2, b"ls\n")
            op, data = read()
            assert op == 0x1 and json.loads(data) == {"type": "resize", "cols": 100, "rows": 30}
            frame(0x1, b'{"type":"exit","exit_code":130,"signal":"SIGINT"}')
            frame(0x8, (1000).to_bytes(2, "big"))
            assert read()[0] == 0x8  # the closing handshake's answer

        srv = _ToyWebSocketServer(script)
        t = self.sandbox(srv.port).terminal("bash", cols=100, rows=30, timeout=10)
        self.assertEqual(t.read(timeout=10), b"hello")
        self.assertEqual(t.read(timeout=10), big)
        t.write("ls\n")
        t.resize(100, 30)
        self.assertEqual(t.wait(timeout=10), 130)
        self.assertEqual((t.signal, t.read(), t.read()), ("SIGINT", b"", b""))
        srv.thread.join(10)
        self.assertIsNone(srv.error)
        head = srv.request.decode()
        self.assertIn("GET /v1/sandboxes/sb_1/pty?cmd=bash&cols=100&rows=30 HTTP/1.1", head)
        self.assertIn("Authorization: Bearer pds_ws", head)
        with self.assertRaises(pandastack.APIConnectionError):
            t.write("after the end")
        with self.assertRaises(pandastack.InvalidRequest):
            t.resize(0, 10)

    def test_close_and_on_data(self) -> None:
        def script(frame: Callable[..., None], read: Callable[[], Any]) -> None:
            frame(0x2, b"prompt$ ")
            assert read()[0] == 0x8  # the client hangs up

        seen: List[bytes] = []
        srv = _ToyWebSocketServer(script)
        t = self.sandbox(srv.port).terminal(on_data=seen.append, timeout=10)
        while not seen:
            srv.thread.join(0.01)
        t.close()
        srv.thread.join(10)
        self.assertIsNone(srv.error)
        self.assertEqual(seen, [b"prompt$ "])
        with self.assertRaises(pandastack.APIConnectionError):  # no exit was told
            t.wait(timeout=10)

    def test_refused_upgrade(self) -> None:
        body = b'{"error":{"code":"forbidden","message":"this key lacks the sandboxes scope"}}'
        srv = _ToyWebSocketServer(lambda *a: None, refuse=b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\n"
                                  b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        with self.assertRaises(pandastack.Forbidden) as cm:
            self.sandbox(srv.port).terminal(timeout=10)
        self.assertIn("sandboxes scope", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
