"""Run the Python SDK tests: python3 tests/run.py [--summary FILE] [unittest names...]

Discovers tests/test_*.py, prints unittest's verbose report and a closing line
`python: N passed, N failed, N skipped`; with --summary FILE also writes "PASSED FAILED" there.
Exits non-zero if anything failed.
"""

from __future__ import annotations

import argparse
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import support  # noqa: E402,F401  (puts src/ on sys.path)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--summary")
    ap.add_argument("names", nargs="*", help="test names such as test_sandbox.Exec.test_timeout")
    a = ap.parse_args()
    loader = unittest.TestLoader()
    if a.names:
        suite = loader.loadTestsFromNames(a.names)
    else:
        suite = loader.discover(HERE, pattern="test_*.py", top_level_dir=HERE)
    res = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
    failed = len(res.failures) + len(res.errors) + len(res.unexpectedSuccesses)
    skipped = len(res.skipped)
    passed = res.testsRun - failed - skipped - len(res.expectedFailures)
    print("python: %d passed, %d failed, %d skipped" % (passed, failed, skipped))
    if a.summary:
        with open(a.summary, "w") as f:
            f.write("%d %d\n" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
