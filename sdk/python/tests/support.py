"""Shared helpers of the Python SDK tests.

The tests run against a real PandaStack named by PANDASTACK_BASE_URL and PANDASTACK_API_KEY
(sdk/test.sh starts one with `pandastack up` and sets both).
"""

from __future__ import annotations

import os
import sys
import unittest
from typing import Callable, List

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
if SRC not in sys.path:
    sys.path.insert(0, SRC)

import pandastack  # noqa: E402

TEMPLATE = os.environ.get("PANDASTACK_TEST_TEMPLATE", "base")

#: every API error (status, code) and the SDK class it becomes
ERROR_CLASSES = {
    (400, "invalid_request"): pandastack.InvalidRequest,
    (401, "unauthorized"): pandastack.Unauthorized,
    (403, "forbidden"): pandastack.Forbidden,
    (404, "not_found"): pandastack.NotFound,
    (409, "conflict"): pandastack.Conflict,
    (413, "payload_too_large"): pandastack.PayloadTooLarge,
    (429, "rate_limited"): pandastack.RateLimited,
    (500, "internal"): pandastack.InternalError,
    (501, "not_implemented"): pandastack.Unimplemented,
    (503, "capacity"): pandastack.Capacity,
    (504, "timeout"): pandastack.Timeout,
    (507, "no_space"): pandastack.NoSpace,
}


def server_env() -> "tuple[str, str]":
    url = os.environ.get("PANDASTACK_BASE_URL", "")
    key = os.environ.get("PANDASTACK_API_KEY", "")
    if not url or not key:
        raise RuntimeError(
            "set PANDASTACK_BASE_URL and PANDASTACK_API_KEY to a running PandaStack "
            "(sdk/test.sh starts one and sets them)"
        )
    return url, key


class LiveTestCase(unittest.TestCase):
    """A test against the live server; sandboxes made with self.create() are killed afterwards."""

    client: pandastack.PandaStack

    @classmethod
    def setUpClass(cls) -> None:
        url, key = server_env()
        cls.base_url = url
        cls.api_key = key
        cls.client = pandastack.PandaStack(token=key, base_url=url)

    def create(self, **kw) -> pandastack.Sandbox:
        kw.setdefault("template", TEMPLATE)
        kw.setdefault("ttl_seconds", 600)
        sb = self.client.sandboxes.create(**kw)
        self.cleanup_quietly(sb.kill)
        return sb

    def track(self, sbs: "List[pandastack.Sandbox]") -> None:
        for sb in sbs:
            self.cleanup_quietly(sb.kill)

    def cleanup_quietly(self, fn: Callable[..., object], *args: object) -> None:
        """After the test, call fn(*args), ignoring the API's errors (the thing may be gone)."""
        self.addCleanup(_quietly, fn, *args)


class EachSeed:
    """A test per seed snippet in fixtures/; the test class says how to run one (run_fixture)."""

    def run_fixture(self, name: str) -> None:
        raise NotImplementedError

    def test_seed_000_northflank(self) -> None:
        self.run_fixture("seed_000_northflank.py")

    def test_seed_001_e2b(self) -> None:
        self.run_fixture("seed_001_e2b.py")

    def test_seed_003_daytona(self) -> None:
        self.run_fixture("seed_003_daytona.py")


class SuiteSandboxTestCase(LiveTestCase):
    """A live test class whose tests share one sandbox, ``self.sb``, made for the class (ttl 900 s,
    metadata ``suite`` = SUITE) and killed after it."""

    SUITE = ""
    sb: pandastack.Sandbox

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.sb = cls.client.sandboxes.create(template=TEMPLATE, ttl_seconds=900, metadata={"suite": cls.SUITE})

    @classmethod
    def tearDownClass(cls) -> None:
        cls.sb.kill()


def _quietly(fn: Callable[..., object], *args: object) -> None:
    try:
        fn(*args)
    except pandastack.PandaStackError:
        pass
