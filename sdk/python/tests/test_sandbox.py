"""Every call of the sandbox surface against a real PandaStack."""

from __future__ import annotations

import datetime as dt
import io
import threading
import time
import unittest
import uuid

import pandastack
from support import TEMPLATE, LiveTestCase, SuiteSandboxTestCase


class ClientSurface(LiveTestCase):
    def test_sandbox_is_sandboxes(self) -> None:
        self.assertIs(self.client.sandbox, self.client.sandboxes)

    def test_templates(self) -> None:
        names = [t.name for t in self.client.templates.list()]
        self.assertIn(TEMPLATE, names)
        t = self.client.templates.get(TEMPLATE)
        self.assertEqual(t.name, TEMPLATE)
        self.assertGreaterEqual(t.memory_mib or 0, 128)

    def test_create_get_list_kill(self) -> None:
        tag = uuid.uuid4().hex
        sb = self.create(ttl_seconds=300, metadata={"suite": "py", "tag": tag}, env={"GREETING": "hi there"})
        self.assertTrue(sb.id.startswith("sb_"), sb.id)
        self.assertEqual(sb.template, TEMPLATE)
        self.assertEqual(sb.state, "running")
        self.assertEqual(sb.metadata, {"suite": "py", "tag": tag})
        self.assertIsInstance(sb.created_at, dt.datetime)
        self.assertIsInstance(sb.expires_at, dt.datetime)
        ttl = (sb.expires_at - sb.created_at).total_seconds()
        self.assertAlmostEqual(ttl, 300, delta=2)
        # env given at create is seen by every command
        self.assertEqual(sb.exec("echo $GREETING").stdout, "hi there\n")

        got = self.client.sandboxes.get(sb.id)
        self.assertEqual(got, sb)
        self.assertEqual(got.metadata["tag"], tag)
        self.assertEqual(got.state, "running")

        listed = self.client.sandboxes.list(metadata={"tag": tag})
        self.assertEqual([s.id for s in listed], [sb.id])
        self.assertEqual(self.client.sandboxes.list(metadata={"tag": "no-such-" + tag}), [])
        self.assertIn(sb.id, [s.id for s in self.client.sandboxes.list(state="running")])

        sb.kill()
        self.assertEqual(sb.state, "killed")
        sb.kill()  # idempotent
        self.assertEqual(self.client.sandboxes.get(sb.id).state, "killed")
        self.assertEqual(self.client.sandboxes.list(metadata={"tag": tag}), [])  # killed ones left out
        self.assertEqual([s.state for s in self.client.sandboxes.list(metadata={"tag": tag}, state="all")],
                         ["killed"])
        self.assertEqual([s.id for s in self.client.sandboxes.list(metadata={"tag": tag}, state=["killed"])],
                         [sb.id])
        with self.assertRaises(pandastack.Conflict):
            sb.exec("true")

    def test_list_pages(self) -> None:
        tag = uuid.uuid4().hex
        made = [self.create(metadata={"tag": tag}) for _ in range(3)]
        # page_size 1 walks next_cursor three times; newest first
        got = list(self.client.sandboxes.iter(metadata={"tag": tag}, page_size=1))
        self.assertEqual([s.id for s in got], [s.id for s in reversed(made)])
        self.assertEqual(len(self.client.sandboxes.list(metadata={"tag": tag}, limit=2)), 2)

    def test_set_ttl_and_refresh(self) -> None:
        sb = self.create(ttl_seconds=60)
        before = sb.expires_at
        sb.set_ttl(3600)
        self.assertGreater(sb.expires_at, before)
        remaining = (sb.expires_at - dt.datetime.now(dt.timezone.utc)).total_seconds()
        self.assertAlmostEqual(remaining, 3600, delta=30)
        sb.refresh()
        self.assertAlmostEqual((sb.expires_at - dt.datetime.now(dt.timezone.utc)).total_seconds(), 3600, delta=30)

    def test_ttl_expiry_kills(self) -> None:
        sb = self.create(ttl_seconds=2)
        deadline = time.time() + 30
        while time.time() < deadline and sb.refresh().state != "killed":
            time.sleep(0.5)
        self.assertEqual(sb.state, "killed")

    def test_context_manager_kills(self) -> None:
        with self.client.sandboxes.create(template=TEMPLATE, ttl_seconds=120) as sb:
            self.assertEqual(sb.exec("echo inside").stdout, "inside\n")
        self.assertEqual(self.client.sandboxes.get(sb.id).state, "killed")


class Exec(SuiteSandboxTestCase):
    SUITE = "py-exec"

    def test_python_in_guest(self) -> None:
        r = self.sb.exec("python -c 'print(2 ** 10)'", timeout_seconds=30)
        self.assertEqual((r.stdout, r.stderr, r.exit_code, r.timed_out), ("1024\n", "", 0, False))
        self.assertTrue(r.ok)
        self.assertIsInstance(r.duration_ms, int)

    def test_exit_code_and_stderr(self) -> None:
        r = self.sb.exec("echo out; echo err >&2; exit 7")
        self.assertEqual((r.stdout, r.stderr, r.exit_code), ("out\n", "err\n", 7))
        self.assertFalse(r.ok)

    def test_argv(self) -> None:
        r = self.sb.exec(["printf", "%s|", "a b", "$HOME", "c"])
        self.assertEqual(r.stdout, "a b|$HOME|c|")

    def test_env_cwd_user_stdin(self) -> None:
        r = self.sb.exec("cat; echo; echo $FOO; pwd; whoami", env={"FOO": "bar baz"}, cwd="/tmp", user="root",
                         stdin="from stdin")
        self.assertEqual(r.stdout, "from stdin\nbar baz\n/tmp\nroot\n")
        self.assertEqual(self.sb.exec("whoami").stdout, "user\n")
        self.assertEqual(self.sb.exec("wc -c", stdin=b"12345").stdout.strip(), "5")

    def test_timeout(self) -> None:
        r = self.sb.exec("echo started; sleep 30", timeout_seconds=1)
        self.assertTrue(r.timed_out)
        self.assertNotEqual(r.exit_code, 0)
        self.assertEqual(r.stdout, "started\n")

    def test_callbacks(self) -> None:
        got = []
        r = self.sb.exec("echo one; echo two >&2; echo three", on_stdout=lambda s: got.append(("out", s)),
                         on_stderr=lambda s: got.append(("err", s)))
        self.assertEqual(r.exit_code, 0)
        self.assertEqual("".join(s for k, s in got if k == "out"), "one\nthree\n")
        self.assertEqual("".join(s for k, s in got if k == "err"), "two\n")
        self.assertEqual((r.stdout, r.stderr), ("one\nthree\n", "two\n"))

    def test_stream_events(self) -> None:
        events = list(self.sb.exec_stream("echo a; echo b >&2; exit 3"))
        self.assertEqual(events[-1].type, "exit")
        self.assertEqual(events[-1].exit_code, 3)
        out = "".join(e.data for e in events if e.type == "stdout")
        err = "".join(e.data for e in events if e.type == "stderr")
        self.assertEqual((out, err), ("a\n", "b\n"))

    def test_stream_wait_and_close(self) -> None:
        self.assertEqual(self.sb.exec_stream("echo x; exit 4").wait(), 4)
        with self.sb.exec_stream("for i in 1 2 3 4 5; do echo $i; sleep 0.2; done") as stream:
            first = next(iter(stream))
        self.assertEqual((first.type, first.data), ("stdout", "1\n"))
        self.assertIsNone(stream.exit_code)  # closed early
        self.assertEqual(self.sb.exec("echo still fine").stdout, "still fine\n")
        self.assertIs(self.sb.files, self.sb.filesystem)

    def test_stream_first_line_arrives_before_command_ends(self) -> None:
        # Causal check: the command only finishes after the client has reacted to its first
        # line. A client that buffered the answer would never see "first" and the command would
        # run into its timeout instead.
        marker = "/tmp/stream-marker-" + uuid.uuid4().hex
        cmd = "echo first; while [ ! -e %s ]; do sleep 0.1; done; echo second" % marker
        stream = self.sb.exec_stream(cmd, timeout_seconds=60)
        seen = []
        with stream:
            for ev in stream:
                seen.append((ev.type, ev.data.strip() if ev.type != "exit" else ev.exit_code))
                if ev.type == "stdout" and ev.data.strip() == "first":
                    self.sb.filesystem.write(marker, "go")  # a second call while the stream is open
        self.assertEqual(seen, [("stdout", "first"), ("stdout", "second"), ("exit", 0)])
        self.assertFalse(stream.timed_out)

    def test_stream_timing(self) -> None:
        t0 = time.monotonic()
        arrivals = []
        for ev in self.sb.exec_stream("echo first; sleep 3; echo second"):
            arrivals.append((ev.type, ev.data.strip(), time.monotonic() - t0))
        self.assertEqual([(k, d) for k, d, _ in arrivals], [("stdout", "first"), ("stdout", "second"), ("exit", "")])
        # "first" came well before "second" (3 s apart in the guest), not together at the end.
        self.assertGreater(arrivals[1][2] - arrivals[0][2], 1.5)

    def test_callback_first_line_before_end(self) -> None:
        marker = "/tmp/cb-marker-" + uuid.uuid4().hex
        sb = self.sb

        def on_out(s: str) -> None:
            if s.strip() == "first":
                sb.filesystem.write(marker, "go")

        r = sb.exec("echo first; while [ ! -e %s ]; do sleep 0.1; done; echo second" % marker,
                    timeout_seconds=60, on_stdout=on_out)
        self.assertEqual((r.stdout, r.exit_code, r.timed_out), ("first\nsecond\n", 0, False))

    def test_concurrent_exec(self) -> None:
        results = {}

        def run(i: int) -> None:
            results[i] = self.sb.exec("echo %d" % i).stdout

        ts = [threading.Thread(target=run, args=(i,)) for i in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(results, {i: "%d\n" % i for i in range(4)})


class Files(SuiteSandboxTestCase):
    SUITE = "py-files"

    def setUp(self) -> None:
        self.dir = "/tmp/py-" + uuid.uuid4().hex[:8]

    def test_write_read_text_and_bytes(self) -> None:
        fs = self.sb.filesystem
        info = fs.write(self.dir + "/a/b/hello.txt", "héllo wörld\n")  # parents are made
        self.assertEqual((info.type, info.size, info.name), ("file", len("héllo wörld\n".encode()), "hello.txt"))
        self.assertEqual(fs.read(self.dir + "/a/b/hello.txt"), "héllo wörld\n")
        blob = bytes(range(256)) * 64
        fs.write(self.dir + "/blob.bin", blob)
        self.assertEqual(fs.read_bytes(self.dir + "/blob.bin"), blob)
        self.assertEqual(self.sb.exec("sha256sum %s/blob.bin" % self.dir).stdout.split()[0],
                         __import__("hashlib").sha256(blob).hexdigest())
        # a file object is streamed
        fs.write(self.dir + "/stream.bin", io.BytesIO(b"x" * 100000))
        self.assertEqual(fs.stat(self.dir + "/stream.bin").size, 100000)
        # what a command writes, read() sees
        self.sb.exec("echo from-exec > %s/e.txt" % self.dir)
        self.assertEqual(fs.read(self.dir + "/e.txt"), "from-exec\n")

    def test_mode(self) -> None:
        fs = self.sb.filesystem
        self.assertEqual(fs.write(self.dir + "/run.sh", "#!/bin/sh\necho ran\n", mode=0o755).mode, "0755")
        self.assertEqual(self.sb.exec(self.dir + "/run.sh").stdout, "ran\n")

    def test_list_stat_mkdir_move_remove(self) -> None:
        fs = self.sb.filesystem
        fs.mkdir(self.dir + "/x/y")
        fs.mkdir(self.dir + "/x/y")  # exists: fine
        self.assertTrue(fs.stat(self.dir + "/x/y").is_dir)
        fs.write(self.dir + "/x/f.txt", "1")
        names = sorted(e.name for e in fs.list(self.dir + "/x"))
        self.assertEqual(names, ["f.txt", "y"])
        deep = sorted(e.path for e in fs.list(self.dir, depth=3))
        self.assertEqual(deep, [self.dir + "/x", self.dir + "/x/f.txt", self.dir + "/x/y"])
        st = fs.stat(self.dir + "/x/f.txt")
        self.assertEqual((st.path, st.type, st.size), (self.dir + "/x/f.txt", "file", 1))
        self.assertIsInstance(st.mtime, dt.datetime)

        fs.move(self.dir + "/x/f.txt", self.dir + "/x/y/g.txt")
        self.assertFalse(fs.exists(self.dir + "/x/f.txt"))
        self.assertEqual(fs.read(self.dir + "/x/y/g.txt"), "1")

        with self.assertRaises(pandastack.Conflict):
            fs.remove(self.dir + "/x")  # not empty
        fs.remove(self.dir + "/x/y/g.txt")
        self.assertFalse(fs.exists(self.dir + "/x/y/g.txt"))
        fs.write(self.dir + "/x/y/h.txt", "2")
        fs.remove(self.dir, recursive=True)
        self.assertFalse(fs.exists(self.dir))

    def test_missing_file(self) -> None:
        with self.assertRaises(pandastack.NotFound) as cm:
            self.sb.filesystem.read(self.dir + "/nope.txt")
        self.assertEqual(cm.exception.status, 404)
        self.assertIn("no such file", cm.exception.message)
        self.assertFalse(self.sb.filesystem.exists(self.dir + "/nope.txt"))


if __name__ == "__main__":
    unittest.main()
