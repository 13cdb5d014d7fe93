"""Durable volumes against a real PandaStack (docs/volumes.md).

A volume outlives the sandboxes that mount it: what one sandbox writes under the mount path,
a later sandbox reads back. One read-write holder at a time, or any number of read-only ones.
"""

from __future__ import annotations

import unittest
import uuid

import pandastack
from support import LiveTestCase


class Volumes(LiveTestCase):
    def make_volume(self, size_mib: int = 64, name: "str | None" = None) -> pandastack.Volume:
        v = self.client.volumes.create(size_mib=size_mib, name=name)
        self.cleanup_quietly(self.client.volumes.delete, v.id)
        return v

    def test_calls_and_validation(self) -> None:
        name = "py-" + uuid.uuid4().hex[:8]
        v = self.make_volume(size_mib=32, name=name)
        self.assertTrue(v.id.startswith("vol_"), v.id)
        self.assertEqual((v.name, v.size_mib, v.attachments), (name, 32, []))
        self.assertTrue(v.host_id)
        self.assertIsNotNone(v.created_at)
        self.assertIn(v.id, [x.id for x in self.client.volumes.list()])
        self.assertEqual(self.client.volumes.get(v.id).name, name)
        self.assertEqual(self.client.volumes.resize(v.id, 48).size_mib, 48)
        self.assertEqual(v.refresh().size_mib, 48)
        with self.assertRaises(pandastack.InvalidRequest):
            self.client.volumes.resize(v.id, 16)  # volumes only grow
        with self.assertRaises(pandastack.InvalidRequest):
            self.client.volumes.create(size_mib=0)
        with self.assertRaises(pandastack.InvalidRequest) as cm:
            self.create(volumes=[v.mount("/etc")])
        self.assertIn("system directory", cm.exception.message)
        with self.assertRaises(pandastack.NotFound):
            self.client.volumes.get("vol_doesnotexist")
        self.client.volumes.delete(v.id)
        with self.assertRaises(pandastack.NotFound):
            self.client.volumes.get(v.id)
        with self.assertRaises(TypeError):
            self.client.sandboxes.create(template="base", volumes=[{"volume_id": v.id, "path": "/data"}])

    def test_data_outlives_the_sandbox(self) -> None:
        v = self.make_volume()
        writer = self.create(volumes=[{"volume_id": v.id, "mount_path": "/data", "read_only": False}])
        self.assertEqual(writer.host, v.host_id)
        writer.filesystem.write("/data/hello.txt", "hello from a volume\n")
        got = self.client.volumes.get(v.id)
        self.assertEqual([(a.sandbox_id, a.mount_path, a.read_only) for a in got.attachments],
                         [(writer.id, "/data", False)])

        # While attached read-write: no delete, no resize, no second attach.
        with self.assertRaises(pandastack.Conflict) as cm:
            self.client.volumes.delete(v.id)
        self.assertIn(writer.id, cm.exception.message)
        with self.assertRaises(pandastack.Conflict):
            self.client.volumes.resize(v.id, 128)
        with self.assertRaises(pandastack.Conflict):
            self.create(volumes=[v.mount("/data", read_only=True)])

        # A snapshot copies the volume with memory and disk; a fork's child gets a copy of its
        # own (docs/volumes.md): it reads what the parent wrote, and its writes stay its own.
        self.client.snapshots.delete(writer.snapshot().id)
        child = writer.fork()
        self.addCleanup(child.kill)
        self.assertEqual(child.filesystem.read("/data/hello.txt"), "hello from a volume\n")
        child.filesystem.write("/data/hello.txt", "the child's\n")
        self.assertEqual(writer.filesystem.read("/data/hello.txt"), "hello from a volume\n")
        copy = [c for c in self.client.volumes.list() if [a.sandbox_id for a in c.attachments] == [child.id]]
        self.assertEqual(len(copy), 1, "the child's copy of the volume is the team's volume")
        child.kill()
        self.client.volumes.delete(copy[0].id)

        writer.kill()
        self.assertEqual(self.client.volumes.get(v.id).attachments, [])

        reader = self.create(volumes=[v.mount("/data", read_only=True)])
        self.assertEqual(reader.filesystem.read("/data/hello.txt"), "hello from a volume\n")
        with self.assertRaises(pandastack.PandaStackError):
            reader.filesystem.write("/data/other.txt", "read-only")
        with self.assertRaises(pandastack.Conflict):  # its guest sees a throw-away overlay: no copy
            reader.snapshot()
        second = self.create(volumes=[v.mount("/mnt/ref", read_only=True)])
        self.assertEqual(second.filesystem.read("/mnt/ref/hello.txt"), "hello from a volume\n")
        with self.assertRaises(pandastack.Conflict):
            self.create(volumes=[v.mount("/data")])
        with self.assertRaises(pandastack.Conflict):
            self.client.volumes.delete(v.id)
        reader.kill()
        second.kill()
        self.client.volumes.delete(v.id)


if __name__ == "__main__":
    unittest.main()
