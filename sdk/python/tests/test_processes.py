"""Background processes against a real PandaStack (docs/processes.md)."""

from __future__ import annotations

import unittest

import pandastack
from support import SuiteSandboxTestCase


class Processes(SuiteSandboxTestCase):
    SUITE = "py-processes"

    def test_start_read_from_an_offset_and_exit_code(self) -> None:
        h = self.sb.processes.start("for i in 1 2 3 4; do echo line $i; sleep 0.1; done; exit 5")
        first = []
        for ev in h.output(follow=True):  # a reader that leaves after the first line
            if ev.type == "stdout":
                first.append(ev.data)
                break
        # A new handle, as another program would make it, resumes where the first stopped.
        r = self.sb.processes.connect(h.pid, offset=h.offset).wait()
        self.assertEqual("".join(first) + r.stdout, "line 1\nline 2\nline 3\nline 4\n")
        self.assertEqual(r.exit_code, 5)
        listed = [p for p in self.sb.processes.list() if p.pid == h.pid]
        self.assertEqual([(p.state, p.exit_code) for p in listed], [("exited", 5)])

    def test_stdin_and_kill(self) -> None:
        h = self.sb.processes.start(["cat"], stdin=True)
        h.send_stdin("hello\n", eof=True)
        seen = []
        r = h.wait(on_stdout=seen.append)
        self.assertEqual((r.exit_code, r.stdout, "".join(seen)), (0, "hello\n", "hello\n"))
        loop = self.sb.processes.start("sleep 600 & wait")
        p = self.sb.processes.kill(loop.pid)
        self.assertEqual((p.state, p.signal), ("exited", "SIGKILL"))

    def test_bad_input(self) -> None:
        h = self.sb.processes.start("sleep 600")
        self.addCleanup(h.kill)
        with self.assertRaises(pandastack.InvalidRequest):
            h.signal("SEGV")
        with self.assertRaises(pandastack.NotFound):
            self.sb.processes.signal(1, "TERM")
        with self.assertRaises(pandastack.PayloadTooLarge):
            h.send_stdin("x" * ((1 << 20) + 1))

    def test_connect_to_the_sandbox(self) -> None:
        again = pandastack.Sandbox.connect(self.sb.id, token=self.api_key, base_url=self.base_url)
        self.assertEqual((again.id, again.state), (self.sb.id, "running"))


if __name__ == "__main__":
    unittest.main()
