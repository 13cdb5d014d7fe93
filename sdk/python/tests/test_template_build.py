"""Building a team template against a real PandaStack (docs/templates.md): the build log streams,
the service started before the snapshot answers in every sandbox, a failing step fails the build
and registers nothing."""

from __future__ import annotations

import unittest
import uuid

import pandastack
from support import LiveTestCase

SPEC = """
name: {name}
from: base
files:
  - path: /srv/site/index.html
    content: "built-by-the-python-sdk\\n"
steps:
  - echo step-ran > /srv/site/step.txt
env:
  SITE_GREETING: hello-env
start: cd /srv/site && exec python3 -m http.server 8081
ready: curl -sf http://127.0.0.1:8081/step.txt
"""


class TemplateBuild(LiveTestCase):
    def test_build_create_delete(self) -> None:
        name = "py-" + uuid.uuid4().hex[:8]
        self.cleanup_quietly(self.client.templates.delete, name)
        log = []
        t = self.client.templates.build(SPEC.format(name=name), on_progress=log.append)
        self.assertEqual(t.name, name)
        self.assertTrue(any("ready check passed" in line for line in log), log[-10:])
        self.assertIn(name, [x.name for x in self.client.templates.list()])
        sb = self.create(template=name)
        r = sb.exec("curl -s http://127.0.0.1:8081/index.html; cat /srv/site/step.txt; echo $SITE_GREETING")
        self.assertEqual(r.stdout, "built-by-the-python-sdk\nstep-ran\nhello-env\n", r.stderr)
        with self.assertRaises(pandastack.Conflict):
            self.client.templates.delete(name)  # a sandbox uses it
        sb.kill()
        self.client.templates.delete(name)
        self.assertNotIn(name, [x.name for x in self.client.templates.list()])

    def test_failing_step(self) -> None:
        name = "py-" + uuid.uuid4().hex[:8]
        self.cleanup_quietly(self.client.templates.delete, name)
        with self.assertRaises(pandastack.BuildFailed) as cm:
            self.client.templates.build({"name": name, "from": "base", "steps": ["echo nope >&2; exit 7"]})
        self.assertIn("exit code 7", cm.exception.message)
        self.assertNotIn(name, [x.name for x in self.client.templates.list()])


if __name__ == "__main__":
    unittest.main()
