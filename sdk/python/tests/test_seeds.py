"""The seeds' Python snippets, copied unchanged into tests/fixtures/, run as scripts.

The test sets only the environment (key, base URL) and checks what the snippet prints. See
tests/fixtures/README.md for where each snippet comes from.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import unittest

from support import HERE, SRC, EachSeed, LiveTestCase

FIXTURES = os.path.join(HERE, "fixtures")
SEEDS_DIR = os.environ.get("PANDASTACK_SEEDS_DIR", os.path.join(os.sep, "work", "shared", "seeds"))

# fixture -> (seed file, the variable the snippet's comment says it reads, lines it must print)
SEEDS = {
    "seed_000_northflank.py": ("000_7c1abbdd69d6aa8a.txt", "PANDASTACK_API_KEY", ["1024"]),
    "seed_001_e2b.py": ("001_287bce3acb11d40f.txt", "PANDASTACK_TOKEN", ["1024", "hello from inside the VM"]),
    "seed_003_daytona.py": ("003_6f8c44df00f7918b.txt", "PANDASTACK_TOKEN", ["4", "checkpoint"]),
}


class SeedSnippets(EachSeed, LiveTestCase):
    def running_ids(self) -> "set[str]":
        return {sb.id for sb in self.client.sandboxes.list(state=["running", "hibernated"])}

    def run_fixture(self, name: str, variant: bool = False) -> None:
        seed, key_var, want = SEEDS[name]
        path = os.path.join(FIXTURES, name)
        if variant:
            path = self.variant(path)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": SRC,
            key_var: self.api_key,
            "PANDASTACK_BASE_URL": self.base_url,
        }
        before = self.running_ids()
        try:
            p = subprocess.run(
                [sys.executable, path],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                timeout=900,
                universal_newlines=True,
            )
        finally:
            # The snippets leave their sandboxes (and forks) running: kill what they made.
            for sid in self.running_ids() - before:
                try:
                    self.client.sandboxes.get(sid).kill()
                except Exception:
                    pass
        self.assertEqual(
            p.returncode, 0,
            "%s (from seeds/%s, env %s) failed with exit %d:\n--- stdout\n%s--- stderr\n%s"
            % (name, seed, key_var, p.returncode, p.stdout, p.stderr),
        )
        lines = [line.strip() for line in p.stdout.splitlines() if line.strip()]
        self.assertEqual(lines, want, "%s printed %r" % (name, p.stdout))


    # The same snippets with only what depends on the server's catalog and guest image swapped
    # (template "code-interpreter" -> "base", /work -> /tmp/work). When the verbatim test fails
    # and its variant passes, the SDK is fine and the server lacks what the seed assumes.

    def variant(self, path: str) -> str:
        with open(path, encoding="utf-8") as f:
            code = f.read()
        code = code.replace('"code-interpreter"', '"base"').replace('"/work/', '"/tmp/work/')
        fd, out = tempfile.mkstemp(suffix=".py", prefix="seed-variant-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(code)
        self.addCleanup(os.unlink, out)
        return out

    def test_seed_000_northflank_variant_base_template(self) -> None:
        self.run_fixture("seed_000_northflank.py", variant=True)

    def test_seed_001_e2b_variant_base_template(self) -> None:
        self.run_fixture("seed_001_e2b.py", variant=True)

    def test_seed_003_daytona_variant_tmp_work(self) -> None:
        self.run_fixture("seed_003_daytona.py", variant=True)


class FixturesAreVerbatim(unittest.TestCase):
    """Each fixture is exactly a passage of its seed file (nothing edited)."""

    def test_fixtures_match_seeds(self) -> None:
        if not os.path.isdir(SEEDS_DIR):
            self.skipTest("seeds directory %s not present (set PANDASTACK_SEEDS_DIR)" % SEEDS_DIR)
        for name, (seed, _, _) in SEEDS.items():
            with open(os.path.join(FIXTURES, name), encoding="utf-8") as f:
                snippet = f.read()
            with open(os.path.join(SEEDS_DIR, seed), encoding="utf-8") as f:
                text = f.read()
            self.assertIn(snippet, text, "%s is not a verbatim passage of %s" % (name, seed))


if __name__ == "__main__":
    unittest.main()
