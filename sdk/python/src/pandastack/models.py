"""Plain data objects the API returns."""

from __future__ import annotations

import datetime as _dt
import re
from typing import Any, Callable, Dict, List, Mapping, Optional

from ._context import ClientContext
from ._http import quote_segment

__all__ = ["ExecResult", "ExecEvent", "Process", "ProcessEvent", "FileInfo", "Snapshot", "Template", "Volume", "VolumeAttachment", "parse_time"]

_FRACTION = re.compile(r"\.(\d+)")


def parse_time(value: Any) -> Optional[_dt.datetime]:
    """Parse an RFC 3339 timestamp from the API into an aware datetime (None if absent/bad)."""
    if not isinstance(value, str) or not value:
        return None
    s = value.strip()
    if s.endswith("Z") or s.endswith("z"):
        s = s[:-1] + "+00:00"
    # datetime.fromisoformat before 3.11 takes at most 6 fractional digits.
    s = _FRACTION.sub(lambda m: "." + (m.group(1) + "000000")[:6], s, count=1)
    try:
        return _dt.datetime.fromisoformat(s)
    except ValueError:
        return None


class ExecResult:
    """What a finished command produced."""

    __slots__ = ("stdout", "stderr", "exit_code", "timed_out", "duration_ms", "stdout_truncated", "stderr_truncated")

    def __init__(
        self,
        stdout: str = "",
        stderr: str = "",
        exit_code: int = 0,
        timed_out: bool = False,
        duration_ms: Optional[int] = None,
        stdout_truncated: bool = False,
        stderr_truncated: bool = False,
    ) -> None:
        self.stdout = stdout
        self.stderr = stderr
        self.exit_code = exit_code
        self.timed_out = timed_out
        self.duration_ms = duration_ms
        self.stdout_truncated = stdout_truncated
        self.stderr_truncated = stderr_truncated

    @classmethod
    def from_api(cls, d: Mapping[str, Any]) -> "ExecResult":
        return cls(
            stdout=d.get("stdout") or "",
            stderr=d.get("stderr") or "",
            exit_code=int(d["exit_code"]) if d.get("exit_code") is not None else -1,
            timed_out=bool(d.get("timed_out", False)),
            duration_ms=d.get("duration_ms"),
            stdout_truncated=bool(d.get("stdout_truncated", False)),
            stderr_truncated=bool(d.get("stderr_truncated", False)),
        )

    @property
    def ok(self) -> bool:
        """True when the command exited 0 and did not time out."""
        return self.exit_code == 0 and not self.timed_out

    def __repr__(self) -> str:
        return _repr("ExecResult", exit_code=self.exit_code, timed_out=self.timed_out, stdout=_clip(self.stdout),
                     stderr=_clip(self.stderr), duration_ms=self.duration_ms)


def _repr(cls: str, /, **fields: Any) -> str:
    """``cls(field=value, ...)`` with each value's repr, in the order given."""
    return "%s(%s)" % (cls, ", ".join("%s=%r" % kv for kv in fields.items()))


def _clip(s: str, n: int = 80) -> str:
    return s if len(s) <= n else s[:n] + "…"


class ExecEvent:
    """One event of a streamed command.

    ``type`` is ``"stdout"`` or ``"stderr"`` (``data`` holds the text, in the order the sandbox
    produced it) or ``"exit"`` (the last event: ``exit_code``, ``timed_out``, ``duration_ms``).
    """

    __slots__ = ("type", "data", "exit_code", "timed_out", "duration_ms")

    def __init__(
        self,
        type: str,
        data: str = "",
        exit_code: Optional[int] = None,
        timed_out: bool = False,
        duration_ms: Optional[int] = None,
    ) -> None:
        self.type = type
        self.data = data
        self.exit_code = exit_code
        self.timed_out = timed_out
        self.duration_ms = duration_ms

    def __repr__(self) -> str:
        if self.type == "exit":
            return _repr("ExecEvent", type="exit", exit_code=self.exit_code, timed_out=self.timed_out,
                         duration_ms=self.duration_ms)
        return _repr("ExecEvent", type=self.type, data=self.data)


class Process:
    """A background process: ``pid``, ``tag`` (the label given at start, or None), ``cmd`` or ``argv``, ``cwd``, ``user``, ``state``
    (``running`` or ``exited``), ``exit_code`` and ``signal`` once exited, ``started_at`` and
    ``exited_at``, ``stdin`` (its stdin pipe is open), ``pty`` (it runs on a terminal), ``output_start``/``output_end`` (the
    output offsets still kept), ``raw``."""

    __slots__ = ("pid", "tag", "cmd", "argv", "cwd", "user", "state", "exit_code", "signal", "started_at", "exited_at",
                 "stdin", "pty", "output_start", "output_end", "raw")

    def __init__(self, d: Mapping[str, Any]) -> None:
        self.raw: Dict[str, Any] = dict(d)
        self.pid: int = int(d.get("pid") or 0)
        self.tag: Optional[str] = d.get("tag")
        self.cmd: Optional[str] = d.get("cmd")
        self.argv: List[str] = list(d.get("argv") or [])
        self.cwd: Optional[str] = d.get("cwd")
        self.user: Optional[str] = d.get("user")
        self.state: Optional[str] = d.get("state")
        self.exit_code: Optional[int] = d.get("exit_code")
        self.signal: Optional[str] = d.get("signal")
        self.started_at: Optional[_dt.datetime] = parse_time(d.get("started_at"))
        self.exited_at: Optional[_dt.datetime] = parse_time(d.get("exited_at"))
        self.stdin: bool = bool(d.get("stdin", False))
        self.pty: bool = bool(d.get("pty", False))
        self.output_start: int = int(d.get("output_start") or 0)
        self.output_end: int = int(d.get("output_end") or 0)

    @property
    def running(self) -> bool:
        return self.state == "running"

    def __repr__(self) -> str:
        return _repr("Process", pid=self.pid, state=self.state, exit_code=self.exit_code,
                     cmd=self.cmd if self.cmd else self.argv)


class ProcessEvent:
    """One event of a process's output: ``type`` ``"stdout"``/``"stderr"`` (``data`` at byte
    ``offset``), ``"exit"`` (``exit_code``, ``signal``) or ``"running"`` (not following, and all
    kept output was read). ``next`` is the offset a later read resumes from."""

    __slots__ = ("type", "data", "offset", "next", "exit_code", "signal")

    def __init__(self, type: str, data: str = "", offset: Optional[int] = None, next: Optional[int] = None,
                 exit_code: Optional[int] = None, signal: Optional[str] = None) -> None:
        self.type = type
        self.data = data
        self.offset = offset
        self.next = next
        self.exit_code = exit_code
        self.signal = signal

    @classmethod
    def from_api(cls, d: Mapping[str, Any]) -> "ProcessEvent":
        if "stdout" in d or "stderr" in d:
            kind = "stdout" if "stdout" in d else "stderr"
            return cls(kind, d.get(kind) or "", offset=d.get("offset"), next=d.get("next"))
        if d.get("running"):
            return cls("running", next=d.get("next"))
        return cls("exit", next=d.get("next"), exit_code=d.get("exit_code"), signal=d.get("signal"))

    def __repr__(self) -> str:
        if self.type in ("stdout", "stderr"):
            return _repr("ProcessEvent", type=self.type, data=self.data, offset=self.offset)
        return _repr("ProcessEvent", type=self.type, exit_code=self.exit_code, signal=self.signal, next=self.next)


class OutputGatherer:
    """The stdout and stderr text of a stream's events (``type``, ``data``), handed to the
    callbacks as it comes (exec with callbacks, ``ProcessHandle.wait``)."""

    def __init__(self, on_stdout: Optional[Callable[[str], Any]], on_stderr: Optional[Callable[[str], Any]]) -> None:
        self._out: List[str] = []
        self._err: List[str] = []
        self._on = {"stdout": (self._out, on_stdout), "stderr": (self._err, on_stderr)}

    def add(self, ev: Any) -> None:
        kept, callback = self._on.get(ev.type, (None, None))
        if kept is None:
            return
        kept.append(ev.data)
        if callback is not None:
            callback(ev.data)

    @property
    def stdout(self) -> str:
        return "".join(self._out)

    @property
    def stderr(self) -> str:
        return "".join(self._err)


class FileInfo:
    """A file's metadata: name, path, type (file|dir|symlink|other), size, mode, mtime, target."""

    __slots__ = ("name", "path", "type", "size", "mode", "mtime", "target", "raw")

    def __init__(self, d: Mapping[str, Any]) -> None:
        self.raw: Dict[str, Any] = dict(d)
        self.name: str = d.get("name", "")
        self.path: str = d.get("path", "")
        self.type: str = d.get("type", "")
        self.size: int = int(d.get("size") or 0)
        self.mode: str = d.get("mode", "")
        self.mtime: Optional[_dt.datetime] = parse_time(d.get("mtime"))
        self.target: Optional[str] = d.get("target")

    @property
    def is_dir(self) -> bool:
        return self.type == "dir"

    @property
    def is_file(self) -> bool:
        return self.type == "file"

    def __repr__(self) -> str:
        return _repr("FileInfo", path=self.path, type=self.type, size=self.size, mode=self.mode)


class Snapshot:
    """A saved machine state (memory + disk) a sandbox can be created from."""

    def __init__(self, d: Mapping[str, Any], client: Optional[ClientContext] = None) -> None:
        self._client = client
        self.raw: Dict[str, Any] = dict(d)
        self.id: str = d.get("id", "")
        self.sandbox_id: Optional[str] = d.get("sandbox_id")
        self.template: Optional[str] = d.get("template")
        self.created_at: Optional[_dt.datetime] = parse_time(d.get("created_at"))
        self.size_bytes: Optional[int] = d.get("size_bytes")
        #: In the blob store too: a sandbox made from it can start on any host.
        self.published: bool = bool(d.get("published", False))

    def delete(self) -> None:
        """Delete the snapshot (sandboxes made from it keep working)."""
        self._client._http.request("DELETE", "/v1/snapshots/%s" % quote_segment(self.id), idempotent=True)

    def __repr__(self) -> str:
        return _repr("Snapshot", id=self.id, sandbox_id=self.sandbox_id, template=self.template,
                     size_bytes=self.size_bytes)


class Template:
    """A template: a catalog one (``owner`` "catalog") or one your team built (``owner`` "team",
    private to the team). ``available``: a host that is up can run it; ``baked``: one has it
    ready to restore."""

    def __init__(self, d: Mapping[str, Any]) -> None:
        self.raw: Dict[str, Any] = dict(d)
        self.name: str = d.get("name", "")
        self.owner: Optional[str] = d.get("owner")
        self.description: str = d.get("description") or ""
        self.vcpus: Optional[int] = d.get("vcpus")
        self.memory_mib: Optional[int] = d.get("memory_mib")
        self.disk_mib: Optional[int] = d.get("disk_mib")
        self.size_bytes: Optional[int] = d.get("size_bytes")
        self.bake_ms: Optional[int] = d.get("bake_ms")
        self.aliases: List[str] = [a for a in as_list(d.get("aliases")) if isinstance(a, str)]
        md = d.get("metadata")
        self.metadata: Dict[str, str] = dict(md) if isinstance(md, dict) else {}
        self.baked: Optional[bool] = d.get("baked")
        self.available: Optional[bool] = d.get("available")

    def __repr__(self) -> str:
        return _repr("Template", name=self.name, owner=self.owner, vcpus=self.vcpus, memory_mib=self.memory_mib,
                     baked=self.baked)


def as_list(x: Any) -> List[Any]:
    return x if isinstance(x, list) else []


class VolumeAttachment:
    """A sandbox that has a volume mounted: ``sandbox_id``, ``mount_path``, ``read_only``."""

    __slots__ = ("sandbox_id", "mount_path", "read_only")

    def __init__(self, d: Mapping[str, Any]) -> None:
        self.sandbox_id: str = d.get("sandbox_id", "")
        self.mount_path: str = d.get("mount_path", "")
        self.read_only: bool = bool(d.get("read_only", False))

    def __repr__(self) -> str:
        return _repr("VolumeAttachment", sandbox_id=self.sandbox_id, mount_path=self.mount_path,
                     read_only=self.read_only)


class Volume:
    """A durable volume: a persistent disk that outlives sandboxes, kept on one host.

    Mount it with ``client.sandboxes.create(..., volumes=[{"volume_id": v.id, "mount_path":
    "/data"}])``; ``attachments`` are the sandboxes that have it mounted now.
    """

    def __init__(self, d: Mapping[str, Any], client: Optional[ClientContext] = None) -> None:
        self._client = client
        self._load(d)

    def _load(self, d: Mapping[str, Any]) -> None:
        self.raw: Dict[str, Any] = dict(d)
        self.id: str = d.get("id", "")
        self.name: str = d.get("name") or ""
        self.size_mib: Optional[int] = d.get("size_mib")
        self.host_id: Optional[str] = d.get("host_id")
        self.created_at: Optional[_dt.datetime] = parse_time(d.get("created_at"))
        self.attachments: List[VolumeAttachment] = [
            VolumeAttachment(a) for a in (d.get("attachments") or []) if isinstance(a, dict)
        ]

    def mount(self, mount_path: str, read_only: bool = False) -> Dict[str, Any]:
        """The ``volumes=`` entry that mounts this volume at ``mount_path``."""
        return {"volume_id": self.id, "mount_path": mount_path, "read_only": read_only}

    def refresh(self) -> "Volume":
        """Re-read the volume (size, attachments) from the server."""
        if not self.id:
            raise ValueError("volume_id is required")
        r = self._client._http.request("GET", self._path(), idempotent=True)
        self._load(r.json() or {})
        return self

    def resize(self, size_mib: int) -> "Volume":
        """Grow the volume (refused with Conflict while a sandbox has it mounted)."""
        r = self._client._http.request("POST", self._path("/resize"), json_body={"size_mib": size_mib},
                                       timeout=self._client.create_timeout)
        self._load(r.json() or {})
        return self

    def delete(self) -> None:
        """Delete the volume and its data (refused with Conflict while a sandbox has it mounted)."""
        self._client._http.request("DELETE", self._path(), idempotent=True)

    def _path(self, sub: str = "") -> str:
        return "/v1/volumes/%s%s" % (quote_segment(self.id), sub)

    def __repr__(self) -> str:
        return _repr("Volume", id=self.id, name=self.name, size_mib=self.size_mib, host_id=self.host_id,
                     attachments=self.attachments)
