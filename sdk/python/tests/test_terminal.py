"""The interactive terminal (``sandbox.terminal()``, a WebSocket) against a real PandaStack
(docs/processes.md, "Interactive terminal")."""

from __future__ import annotations

import asyncio
import unittest

import pandastack
from support import SuiteSandboxTestCase

#: a hang guard for one read (not a measure)
GUARD = 120


def read_until(t: pandastack.Terminal, needle: bytes) -> bytes:
    out = b""
    while needle not in out:
        chunk = t.read(timeout=GUARD)
        if not chunk:
            raise AssertionError("the terminal ended before %r; it printed %r" % (needle, out))
        out += chunk
    return out


class Terminal(SuiteSandboxTestCase):
    SUITE = "py-terminal"

    def test_shell_resize_and_exit_code(self) -> None:
        with self.sb.terminal(cols=100, rows=30) as t:
            t.write("stty size; echo term=$TERM\n")
            self.assertIn(b"term=xterm-256color", read_until(t, b"term=xterm"))
            t.resize(120, 40)
            t.write("stty size; exit 7\n")
            rest = b"".join(t)  # to the end
            self.assertEqual(t.wait(timeout=GUARD), 7)
            self.assertIn(b"40 120", rest)

    def test_command_and_on_data(self) -> None:
        seen = []
        t = self.sb.terminal("echo hi-from-pty; tty", on_data=seen.append)
        self.assertEqual(t.wait(timeout=GUARD), 0)
        out = b"".join(seen)
        self.assertIn(b"hi-from-pty", out)
        self.assertIn(b"/dev/pts/", out)
        self.assertIsNone(t.signal)

    def test_close_hangs_up(self) -> None:
        t = self.sb.terminal("sleep 600")
        t.close()
        self.assertTrue(t.closed)
        with self.assertRaises(pandastack.APIConnectionError):
            t.write("x")

    def test_bad_input(self) -> None:
        with self.assertRaises(pandastack.InvalidRequest):
            self.sb.terminal(cols=5000, rows=10)
        with self.assertRaises(pandastack.InvalidRequest):
            self.sb.terminal(cols=80)
        ghost = pandastack.Sandbox(self.client, {"id": "sb_nosuchsandbox"})
        with self.assertRaises(pandastack.NotFound):
            ghost.terminal()

    def test_async(self) -> None:
        async def main() -> bytes:
            async with pandastack.AsyncPandaStack(token=self.api_key, base_url=self.base_url) as client:
                sb = await client.sandboxes.get(self.sb.id)
                t = await sb.terminal("echo async-pty; exit 3")
                out = b""
                async for chunk in t:
                    out += chunk
                self.assertEqual(await t.wait(), 3)
                return out
        self.assertIn(b"async-pty", asyncio.run(main()))


if __name__ == "__main__":
    unittest.main()
