"""Functions and schedules against a real PandaStack (docs/functions.md): a deploy bakes a warm
snapshot; an invocation runs in a fresh microVM from it."""

from __future__ import annotations

import io
import unittest
import uuid
import zipfile

import pandastack
from support import LiveTestCase

MODULE = """import time
IMPORTED_AT = time.time()

def handler(event, context):
    print("event", event)
    if event.get("fail"):
        raise KeyError("missing")
    return {"double": event["n"] * 2, "version": context.version}
"""


def bundle(files: "dict[str, str]") -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, content in files.items():
            zf.writestr(name, content)
    return buf.getvalue()


class Functions(LiveTestCase):
    def test_deploy_invoke_schedule(self) -> None:
        name = "py-" + uuid.uuid4().hex[:8]
        fn = self.client.functions.deploy(name, bundle({"main.py": MODULE}), timeout_seconds=30)
        self.cleanup_quietly(self.client.functions.delete, fn["id"])
        self.assertEqual((fn["name"], fn["version"], fn["state"]), (name, 1, "ready"))
        run = self.client.functions.invoke(fn["id"], {"n": 21})
        self.assertEqual((run["status"], run["result"], run["logs"]), ("succeeded", {"double": 42, "version": 1}, "event {'n': 21}\n"))
        run = self.client.functions.invoke(fn["id"], {"fail": True})
        self.assertEqual((run["status"], run["error"]["type"]), ("failed", "KeyError"))
        self.assertIn("raise KeyError", run["error"]["traceback"])
        self.assertEqual(len(self.client.functions.runs(fn["id"])), 2)
        self.assertEqual([v["version"] for v in self.client.functions.versions(fn["id"])], [1])

        with self.assertRaises(pandastack.InvalidRequest) as cm:
            self.client.functions.deploy(name, bundle({"other.py": ""}))
        self.assertIn("needs main.py", cm.exception.message)
        with self.assertRaises(pandastack.InvalidRequest) as cm:
            self.client.schedules.create("61 * * * *", function_id=fn["id"])
        self.assertIn("minute field", cm.exception.message)

        sc = self.client.schedules.create("@daily", "Europe/Berlin", function_id=fn["id"], payload={"n": 1})
        self.cleanup_quietly(self.client.schedules.delete, sc["id"])
        self.assertEqual((sc["enabled"], sc["missed"], sc["payload"]), (True, "skip", {"n": 1}))
        self.assertFalse(self.client.schedules.pause(sc["id"])["enabled"])
        self.assertEqual(self.client.schedules.trigger(sc["id"])["trigger"], "manual")
        self.client.schedules.delete(sc["id"])
        with self.assertRaises(pandastack.NotFound):
            self.client.schedules.get(sc["id"])


if __name__ == "__main__":
    unittest.main()
