"""fork, snapshot, hibernate and wake against a real PandaStack.

These assert real behaviour. A server that does not support a call yet answers 501
not_implemented, and then these tests fail (they do not skip).
"""

from __future__ import annotations

import unittest
import uuid

import pandastack
from support import LiveTestCase

# A process whose state lives only in guest memory: it keeps running across fork/hibernate only
# if the machine's memory does.
START_DAEMON = "nohup setsid sh -c 'echo $$ > /tmp/daemon.pid; exec sleep 100000' >/dev/null 2>&1 & sleep 0.3; cat /tmp/daemon.pid"


def daemon_alive(sb: pandastack.Sandbox, pid: str) -> bool:
    return sb.exec("kill -0 %s && echo alive || echo gone" % pid).stdout.strip() == "alive"


class Fork(LiveTestCase):
    def test_fork_one(self) -> None:
        sb = self.create(metadata={"suite": "py-fork"})
        sb.filesystem.write("/tmp/state.txt", "parent state")
        pid = sb.exec(START_DAEMON).stdout.strip()
        self.assertTrue(pid.isdigit(), pid)

        child = sb.fork()
        self.track([child])
        self.assertIsInstance(child, pandastack.Sandbox)
        self.assertNotEqual(child.id, sb.id)
        self.assertEqual(child.state, "running")
        self.assertEqual(child.template, sb.template)
        self.assertEqual(child.fork_of, sb.id)
        self.assertEqual(child.metadata, sb.metadata)
        self.assertEqual(child.filesystem.read("/tmp/state.txt"), "parent state")
        self.assertTrue(daemon_alive(child, pid), "the parent's running process is not in the fork")

        # copy-on-write: the two diverge from here
        child.filesystem.write("/tmp/state.txt", "child state")
        self.assertEqual(sb.filesystem.read("/tmp/state.txt"), "parent state")
        self.assertEqual(child.filesystem.read("/tmp/state.txt"), "child state")
        self.assertEqual(self.client.sandboxes.get(child.id).state, "running")

    def test_fork_many(self) -> None:
        sb = self.create(metadata={"suite": "py-fork"})
        sb.filesystem.write("/tmp/n.txt", "0")
        children = sb.fork(count=2)
        self.track(children)
        self.assertIsInstance(children, list)
        self.assertEqual(len(children), 2)
        self.assertEqual(len({c.id for c in children} | {sb.id}), 3)
        for i, c in enumerate(children):
            self.assertEqual(c.filesystem.read("/tmp/n.txt"), "0")
            c.filesystem.write("/tmp/n.txt", str(i + 1))
        self.assertEqual([c.filesystem.read("/tmp/n.txt") for c in children], ["1", "2"])
        self.assertEqual(sb.filesystem.read("/tmp/n.txt"), "0")


class Snapshots(LiveTestCase):
    def test_snapshot_and_create_from_it(self) -> None:
        sb = self.create(metadata={"suite": "py-snap"})
        sb.filesystem.write("/tmp/snap.txt", "saved")
        pid = sb.exec(START_DAEMON).stdout.strip()
        snap = sb.snapshot()
        self.assertTrue(snap.id, snap.raw)
        self.assertEqual(snap.sandbox_id, sb.id)
        self.assertEqual(snap.template, sb.template)
        self.assertIsNotNone(snap.created_at)
        self.assertEqual(self.client.snapshots.get(snap.id).id, snap.id)
        self.assertEqual([x.id for x in self.client.snapshots.list(sandbox_id=sb.id)], [snap.id])
        # the source keeps running
        self.assertEqual(sb.exec("echo still-here").stdout, "still-here\n")
        sb.filesystem.write("/tmp/snap.txt", "changed after the snapshot")

        restored = self.create(snapshot_id=snap.id, template=None)
        self.assertEqual(restored.state, "running")
        self.assertEqual(restored.snapshot_id, snap.id)
        self.assertEqual(restored.filesystem.read("/tmp/snap.txt"), "saved")
        self.assertTrue(daemon_alive(restored, pid))

        snap.delete()
        with self.assertRaises(pandastack.NotFound):
            self.client.snapshots.get(snap.id)
        # a sandbox restored from a deleted snapshot keeps working
        self.assertEqual(restored.exec("echo ok").stdout, "ok\n")


class Hibernate(LiveTestCase):
    def test_hibernate_wake_and_auto_wake(self) -> None:
        tag = uuid.uuid4().hex
        sb = self.create(metadata={"suite": "py-hibernate", "tag": tag})
        sb.filesystem.write("/tmp/h.txt", "kept")
        pid = sb.exec(START_DAEMON).stdout.strip()

        self.assertIs(sb.hibernate(), sb)
        self.assertEqual(sb.state, "hibernated")
        self.assertEqual(self.client.sandboxes.get(sb.id).state, "hibernated")
        # a hibernated sandbox has no figures, and asking does not wake it
        with self.assertRaises(pandastack.errors.Conflict):
            sb.metrics()
        self.assertEqual(self.client.sandboxes.get(sb.id).state, "hibernated")
        self.assertEqual([s.id for s in self.client.sandboxes.list(metadata={"tag": tag}, state="hibernated")],
                         [sb.id])

        sb.wake()
        self.assertEqual(sb.state, "running")
        m = sb.metrics()
        self.assertTrue(0 < m["mem_used_bytes"] < m["mem_total_bytes"] and m["disk_used_bytes"] > 0, m)
        self.assertTrue(0 <= m["cpu_used_pct"] <= 100 and m["vcpus"] >= 1, m)
        self.assertEqual(sb.filesystem.read("/tmp/h.txt"), "kept")
        self.assertTrue(daemon_alive(sb, pid))

        # any call on a hibernated sandbox wakes it first
        sb.hibernate()
        self.assertEqual(sb.exec("cat /tmp/h.txt").stdout, "kept")
        self.assertEqual(sb.refresh().state, "running")
        self.assertTrue(daemon_alive(sb, pid))


if __name__ == "__main__":
    unittest.main()
