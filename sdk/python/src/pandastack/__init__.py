"""PandaStack: microVM sandboxes for AI agents.

    from pandastack import PandaStack
    client = PandaStack()                      # PANDASTACK_API_KEY, PANDASTACK_BASE_URL
    sb = client.sandboxes.create(template="base", ttl_seconds=600)
    print(sb.exec("python -c 'print(2 ** 10)'", timeout_seconds=30).stdout)
    sb.kill()
"""

from ._version import __version__
from .client import DEFAULT_BASE_URL, PandaStack
from . import errors
from .errors import (
    BuildFailed,
    APIConnectionError,
    Capacity,
    ConfigurationError,
    Conflict,
    Forbidden,
    InternalError,
    InvalidRequest,
    NoSpace,
    NotFound,
    PandaStackError,
    PayloadTooLarge,
    RateLimited,
    Timeout,
    Unauthorized,
    Unimplemented,
)
# The transport seam's types (PandaStack(send=...)): importable, but left out of __all__ so a star
# import does not gain generic names such as HTTPResponse.
from ._http import HTTPRequest, HTTPResponse
from .code import CodeContext, Execution, ExecutionError, Logs, Result
from .databases import Databases
from .apps import Apps, pack_directory
from .functions import Functions, Schedules
from .webhooks import Webhooks, WebhookSignatureError, verify_webhook
from .models import ExecEvent, ExecResult, FileInfo, Process, ProcessEvent, Snapshot, Template, Volume, VolumeAttachment
from .processes import ProcessHandle, Processes, ProcessResult
from .sandbox import ExecStream, Filesystem, Sandbox, Sandboxes, Snapshots, Templates, Volumes
from ._tree import FileEvent, WatchHandle
from .terminal import Terminal
from .aio import AsyncPandaStack

__all__ = [
    "BuildFailed",
    "__version__",
    "PandaStack",
    "DEFAULT_BASE_URL",
    "Sandbox",
    "Sandboxes",
    "Filesystem",
    "FileEvent",
    "WatchHandle",
    "Terminal",
    "AsyncPandaStack",
    "ExecStream",
    "ExecResult",
    "ExecEvent",
    "Process",
    "ProcessEvent",
    "ProcessHandle",
    "Processes",
    "ProcessResult",
    "Execution",
    "ExecutionError",
    "Result",
    "Logs",
    "CodeContext",
    "FileInfo",
    "Snapshot",
    "Snapshots",
    "Template",
    "Templates",
    "Volume",
    "VolumeAttachment",
    "Volumes",
    "Databases",
    "Apps",
    "Functions",
    "Schedules",
    "Webhooks",
    "WebhookSignatureError",
    "verify_webhook",
]
# The error classes, as errors.py lists them (its error_from_payload stays internal).
__all__ += [name for name in errors.__all__ if name != "error_from_payload"]


def __getattr__(name: str) -> type:
    # ``pandastack.NotImplemented`` and ``from pandastack import NotImplemented`` still give the
    # 501 error class (now named Unimplemented). It is resolved here rather than bound as a module
    # global, and left out of __all__, so ``from pandastack import *`` does not shadow Python's
    # ``NotImplemented`` constant.
    if name == "NotImplemented":
        return Unimplemented
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
