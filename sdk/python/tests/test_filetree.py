"""Directory watch, archives, port URLs and the asyncio client against a real PandaStack
(docs/files.md)."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import unittest

import pandastack
from support import SuiteSandboxTestCase


class FileTree(SuiteSandboxTestCase):
    SUITE = "py-filetree"

    def test_watch_sees_a_command_write(self) -> None:
        self.sb.exec("mkdir -p /home/user/pw")
        with self.sb.files.watch("/home/user/pw", recursive=True, timeout=120) as w:
            self.sb.exec("echo hi > /home/user/pw/a && mv /home/user/pw/a /home/user/pw/b")
            seen = []
            for ev in w:
                seen.append((ev.type, ev.path, ev.from_path))
                if ev.type == "rename":
                    break
        self.assertIn(("create", "/home/user/pw/a", None), seen)
        self.assertEqual(seen[-1], ("rename", "/home/user/pw/b", "/home/user/pw/a"))
        with self.assertRaises(pandastack.InvalidRequest):
            self.sb.files.watch("/home/user/pw/b")

    def test_upload_and_download_a_tree(self) -> None:
        src = tempfile.mkdtemp()
        dst = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, src)
        self.addCleanup(shutil.rmtree, dst)
        os.makedirs(os.path.join(src, "sub"))
        with open(os.path.join(src, "sub", "f.txt"), "w") as f:
            f.write("hello")
        os.symlink("sub/f.txt", os.path.join(src, "link"))
        self.assertEqual(self.sb.files.upload_dir(src, "/home/user/tree"), {"entries": 3, "bytes": 5})
        self.assertEqual(self.sb.exec("readlink /home/user/tree/link; cat /home/user/tree/link").stdout, "sub/f.txt\nhello")
        self.assertEqual(self.sb.files.download_dir("/home/user/tree", os.path.join(dst, "copy")), 3)
        self.assertEqual(os.readlink(os.path.join(dst, "copy", "link")), "sub/f.txt")
        with open(os.path.join(dst, "copy", "sub", "f.txt")) as f:
            self.assertEqual(f.read(), "hello")

    def test_escaping_archive_is_refused(self) -> None:
        import io
        import tarfile
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            info = tarfile.TarInfo("../escape")
            info.size = 1
            tf.addfile(info, io.BytesIO(b"x"))
        with self.assertRaises(pandastack.InvalidRequest):
            self.sb.files.upload_archive("/home/user/evil", buf.getvalue())

    def test_get_url(self) -> None:
        url = self.sb.get_url(8000)
        self.assertTrue(url.startswith("http://8000-%s.localhost:" % self.sb.id), url)

    def test_async_client(self) -> None:
        async def main() -> str:
            async with pandastack.AsyncPandaStack(token=self.api_key, base_url=self.base_url) as client:
                sb = await client.sandboxes.get(self.sb.id)
                r = await sb.exec("echo async")
                await sb.files.write("/tmp/async.txt", "x")
                return r.stdout + await sb.files.read("/tmp/async.txt")

        self.assertEqual(asyncio.run(main()), "async\nx")


if __name__ == "__main__":
    unittest.main()
