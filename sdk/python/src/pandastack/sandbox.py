"""Sandboxes, their files, and the collections the client exposes."""

from __future__ import annotations

import datetime as _dt
import urllib.parse
from typing import (
    Any,
    BinaryIO,
    Callable,
    Dict,
    Iterator,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Union,
    overload,
)

from . import errors
from ._closing import Closing
from ._context import ClientContext, new_client
from ._http import LineStream, Transport
from ._http import quote_segment as _seg
from .code import CodeContext, Execution, ExecutionError, Result
from .models import ExecEvent, ExecResult, FileInfo, OutputGatherer, Snapshot, Template, Volume, as_list, parse_time
from .processes import Processes, command_body
from ._tree import FileEvent, WatchHandle, pack_tree, unpack_tree
from .terminal import Terminal, open_terminal

__all__ = ["Sandbox", "Filesystem", "ExecStream", "Sandboxes", "Snapshots", "Templates"]

Command = Union[str, Sequence[str]]
OutputCallback = Callable[[str], Any]

#: the host agent's exec timeout when timeout_seconds is not given
DEFAULT_EXEC_TIMEOUT = 60.0
#: how long past the command's own timeout the client waits for the answer
EXEC_GRACE = 60.0


def _exec_body(
    cmd: Command,
    timeout_seconds: Optional[float],
    env: Optional[Mapping[str, str]],
    cwd: Optional[str],
    user: Optional[str],
    stdin: Union[None, str, bytes],
) -> Dict[str, Any]:
    body = command_body(cmd, env, cwd, user)
    if timeout_seconds is not None:
        body["timeout_seconds"] = timeout_seconds
    if stdin is not None:
        body["stdin"] = stdin.decode("utf-8") if isinstance(stdin, (bytes, bytearray)) else stdin
    return body


class ExecStream(Closing):
    """The events of a running command, as they happen.

    Iterate it for :class:`~pandastack.ExecEvent` objects (``stdout``/``stderr`` chunks in order,
    then one ``exit`` event). After the exit event, ``exit_code``, ``timed_out`` and
    ``duration_ms`` are set. Use it as a context manager, or call :meth:`close`, to stop reading
    early (the command itself keeps running until it ends or hits its timeout).
    """

    def __init__(self, lines: LineStream) -> None:
        self._lines = lines
        self._iter: Optional[Iterator[ExecEvent]] = None
        self._closed_early = False
        self.request_id = lines.request_id
        self.exit_code: Optional[int] = None
        self.timed_out: bool = False
        self.duration_ms: Optional[int] = None

    def __iter__(self) -> Iterator[ExecEvent]:
        if self._iter is None:
            self._iter = self._events()
        return self._iter

    def _events(self) -> Iterator[ExecEvent]:
        finished = False
        for obj in self._lines:
            if "error" in obj:
                raise errors.error_from_payload(None, obj, self.request_id)
            if "stdout" in obj:
                yield ExecEvent("stdout", obj.get("stdout") or "")
            elif "stderr" in obj:
                yield ExecEvent("stderr", obj.get("stderr") or "")
            elif "exit_code" in obj:
                code = obj.get("exit_code")
                self.exit_code = int(code) if code is not None else -1
                self.timed_out = bool(obj.get("timed_out", False))
                self.duration_ms = obj.get("duration_ms")
                finished = True
                yield ExecEvent("exit", exit_code=self.exit_code, timed_out=self.timed_out, duration_ms=self.duration_ms)
        if not finished and not self._closed_early:
            raise errors.APIConnectionError(
                "the exec stream ended before the command's exit status arrived", request_id=self.request_id
            )

    def wait(self) -> int:
        """Read to the end, discarding output; return the exit code."""
        for _ in self:
            pass
        return self.exit_code if self.exit_code is not None else -1

    def close(self) -> None:
        self._closed_early = True
        self._lines.close()



class Filesystem:
    """Files inside one sandbox. Paths are absolute paths in the guest.

    Every call takes ``user=`` (the guest user the call acts as; the server's default is
    ``user``).
    """

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    @property
    def _http(self) -> Transport:
        return self._sb._http

    def _path(self, sub: str = "") -> str:
        return "/v1/sandboxes/%s/files%s" % (_seg(self._sb.id), sub)

    def read_bytes(self, path: str, *, user: Optional[str] = None) -> bytes:
        """The file's content as bytes."""
        r = self._http.request("GET", self._path(), params={"path": path, "user": user}, idempotent=True,
                               headers={"Accept": "application/octet-stream"})
        return r.body

    def read(self, path: str, encoding: str = "utf-8", errors: str = "strict", *, user: Optional[str] = None) -> str:
        """The file's content decoded as text (UTF-8 unless ``encoding`` says otherwise)."""
        return self.read_bytes(path, user=user).decode(encoding, errors)

    def write(
        self,
        path: str,
        data: Union[str, bytes, bytearray, memoryview, BinaryIO],
        *,
        mode: Union[None, int, str] = None,
        user: Optional[str] = None,
        encoding: str = "utf-8",
    ) -> FileInfo:
        """Create or replace a file (missing parent directories are made). ``data`` is text
        (encoded with ``encoding``), bytes, or a binary file object (streamed). ``mode`` sets the
        permission bits, e.g. ``0o755`` or ``"0755"``. Returns the new file's :class:`FileInfo`."""
        params: Dict[str, Any] = {"path": path, "user": user}
        if mode is not None:
            params["mode"] = "%04o" % mode if isinstance(mode, int) else mode
        idempotent = True
        body: Any
        if isinstance(data, str):
            body = data.encode(encoding)
        elif isinstance(data, (bytes, bytearray, memoryview)):
            body = bytes(data)
        elif hasattr(data, "read"):
            body = data  # streamed with chunked encoding; cannot be replayed
            idempotent = False
        else:
            raise TypeError("data must be str, bytes or a binary file object, not %s" % type(data).__name__)
        r = self._http.request("PUT", self._path(), params=params, data=body, idempotent=idempotent)
        d = r.json()
        return FileInfo(d if isinstance(d, dict) else {"path": path, "type": "file"})

    def list(self, path: str = "/", *, depth: Optional[int] = None, user: Optional[str] = None) -> List[FileInfo]:
        """Entries under a directory; ``depth`` (1-10, default 1) descends into subdirectories."""
        r = self._http.request("GET", self._path("/list"), params={"path": path, "depth": depth, "user": user},
                               idempotent=True)
        d = r.json() or {}
        return [FileInfo(e) for e in as_list(d.get("entries")) if isinstance(e, dict)]

    def stat(self, path: str, *, user: Optional[str] = None) -> FileInfo:
        """Metadata of one path (raises :class:`~pandastack.NotFound` if it does not exist)."""
        r = self._http.request("GET", self._path("/stat"), params={"path": path, "user": user}, idempotent=True)
        return FileInfo(r.json() or {})

    def exists(self, path: str, *, user: Optional[str] = None) -> bool:
        """Whether the path exists."""
        try:
            self.stat(path, user=user)
            return True
        except errors.NotFound as e:
            # A missing *sandbox* is an error, not a missing file.
            if "sandbox" in (e.message or "") and self._sb.id in (e.message or ""):
                raise
            return False

    def mkdir(self, path: str, *, user: Optional[str] = None) -> None:
        """Make a directory and any missing parents (no error if it exists)."""
        body: Dict[str, Any] = {"path": path}
        if user is not None:
            body["user"] = user
        self._http.request("POST", self._path("/mkdir"), json_body=body, idempotent=True)

    def remove(self, path: str, *, recursive: bool = False, user: Optional[str] = None) -> None:
        """Delete a file or an empty directory; ``recursive=True`` deletes a directory tree."""
        self._http.request("DELETE", self._path(), params={"path": path, "recursive": recursive or None, "user": user},
                           idempotent=True)

    def move(self, src: str, dst: str, *, user: Optional[str] = None) -> None:
        """Rename or move a path."""
        body: Dict[str, Any] = {"from": src, "to": dst}
        if user is not None:
            body["user"] = user
        self._http.request("POST", self._path("/move"), json_body=body)

    def watch(self, path: str, recursive: bool = False, *, user: Optional[str] = None,
              timeout: Optional[float] = None) -> WatchHandle:
        """Watch a directory (inotify in the guest; ``recursive`` follows the directories below,
        new ones too). Returns once the watch is in place; iterate the handle for
        :class:`FileEvent` (create, write, remove, rename, overflow) and ``close()`` it when done.
        ``timeout`` bounds the silence between events (default: none). A write through
        ``files.write`` lands as a ``rename`` from a hidden temp file (writes are atomic)."""
        lines = self._http.stream_lines("GET", self._path("/watch"), timeout=timeout,
                                        params={"path": path, "recursive": 1 if recursive else None, "user": user})
        return WatchHandle(lines)

    def upload_dir(self, local: str, remote: str, *, user: Optional[str] = None) -> Dict[str, int]:
        """Copy local directory ``local`` into ``remote`` in the sandbox (made if missing) as a
        tar.gz: directories, files and symlinks (as links). Returns ``{"entries", "bytes"}``."""
        with pack_tree(local) as tmp:
            r = self._http.request("PUT", self._path("/archive"), params={"path": remote, "user": user}, data=tmp,
                                   headers={"Content-Type": "application/gzip"}, timeout=None)
        d = r.json() or {}
        return {"entries": int(d.get("entries") or 0), "bytes": int(d.get("bytes") or 0)}

    def download_dir(self, remote: str, local: str, *, user: Optional[str] = None) -> int:
        """Copy directory ``remote`` of the sandbox into local directory ``local`` (made if
        missing); returns the entries copied. Nothing lands outside ``local``: names with ``..``
        and paths through symlinks that lead out of it are refused."""
        resp = self._http.stream_raw("GET", self._path("/archive"), accept="application/gzip", timeout=None,
                                     params={"path": remote, "format": "tar.gz", "user": user})
        try:
            return unpack_tree(resp, local)
        finally:
            resp.close()

    def download_archive(self, remote: str, *, gzip: bool = True, user: Optional[str] = None) -> bytes:
        """Directory ``remote`` as the bytes of a tar.gz (``gzip=False``: a tar)."""
        r = self._http.request("GET", self._path("/archive"), idempotent=True, timeout=None,
                               params={"path": remote, "format": "tar.gz" if gzip else "tar", "user": user},
                               headers={"Accept": "*/*"})
        return r.body

    def upload_archive(self, remote: str, data: Union[bytes, BinaryIO], *, user: Optional[str] = None) -> Dict[str, int]:
        """Unpack a tar or tar.gz (bytes or a binary file object) into directory ``remote``."""
        r = self._http.request("PUT", self._path("/archive"), params={"path": remote, "user": user}, data=data,
                               idempotent=isinstance(data, (bytes, bytearray)), timeout=None)
        d = r.json() or {}
        return {"entries": int(d.get("entries") or 0), "bytes": int(d.get("bytes") or 0)}


def _proxy_domain(http: Transport) -> str:
    """The server's port proxy domain ("" for none), asked once per transport."""
    cached = getattr(http, "_proxy_domain", None)
    if cached is None:
        info = http.get_json("/v1/info")
        cached = str(info.get("proxy_domain") or "")
        http._proxy_domain = cached  # type: ignore[attr-defined]
    return cached


class Sandbox:
    """A microVM sandbox.

    Attributes mirror the API's sandbox object: ``id``, ``template``, ``state`` (``running``,
    ``hibernated``, ``killed``, ``error``, ``lost``), ``created_at`` and ``expires_at``
    (aware datetimes), ``metadata``, ``host``, ``error`` and ``raw`` (the last answer as a dict).
    They reflect the last answer; :meth:`refresh` reloads them.

    As a context manager it kills the sandbox on exit.
    """

    def __init__(self, client: ClientContext, data: Mapping[str, Any]) -> None:
        self._client = client
        self._http: Transport = client._http
        self.filesystem = Filesystem(self)
        #: background processes: start, list, connect, kill, send_stdin, signal
        self.processes = Processes(self)
        self._update(data)

    @classmethod
    def connect(cls, sandbox_id: str, **client_options: Any) -> "Sandbox":
        """The sandbox ``sandbox_id``, woken if hibernated, through a new client made with
        ``client_options`` (``token``, ``base_url``…; the environment otherwise). Same as
        ``PandaStack(**client_options).sandboxes.connect(sandbox_id)``."""
        return Sandboxes(new_client(**client_options)).connect(sandbox_id)

    # -- state -----------------------------------------------------------------------------------

    def _update(self, d: Mapping[str, Any]) -> None:
        self.raw: Dict[str, Any] = dict(d)
        self.id: str = d.get("id", "")
        self.template: Optional[str] = d.get("template")
        self.state: Optional[str] = d.get("state")
        self.created_at: Optional[_dt.datetime] = parse_time(d.get("created_at"))
        self.expires_at: Optional[_dt.datetime] = parse_time(d.get("expires_at"))
        md = d.get("metadata")
        self.metadata: Dict[str, str] = dict(md) if isinstance(md, dict) else {}
        self.host: Optional[str] = d.get("host")
        self.ip: Optional[str] = d.get("ip")
        self.error: Optional[str] = d.get("error")
        #: for a fork's child: the sandbox it was forked from
        self.fork_of: Optional[str] = d.get("fork_of")
        #: for a sandbox created from a snapshot: that snapshot's id
        self.snapshot_id: Optional[str] = d.get("snapshot_id")
        #: False when its port proxy asks for :attr:`traffic_token`
        self.public_ports: bool = d.get("public_ports") is not False
        #: the token its private ports ask for (send it as the ``X-PandaStack-Traffic-Token``
        #: header); only the create answer carries it, so it is kept across refreshes
        self.traffic_token: Optional[str] = d.get("traffic_token") or getattr(self, "traffic_token", None)

    @property
    def files(self) -> Filesystem:
        """Alias of :attr:`filesystem`."""
        return self.filesystem

    def get_url(self, port: int) -> str:
        """The URL where ``port`` of this sandbox is served through the server's port proxy
        (``<scheme>://<port>-<id>.<proxy domain>[:<API port>]``, from ``GET /v1/info``'s
        ``proxy_domain``). A private sandbox's URL carries its traffic token as a query parameter
        (the proxy turns it into a cookie for the page's own requests). Raises
        :class:`~pandastack.ConfigurationError` when the server runs no port proxy."""
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise ValueError("port must be a TCP port (1-65535), not %r" % (port,))
        domain = _proxy_domain(self._http)
        if not domain:
            raise errors.ConfigurationError("this PandaStack server runs no port proxy (GET /v1/info has no proxy_domain)")
        u = urllib.parse.urlsplit(self._http.base_url)
        url = "%s://%d-%s.%s%s" % (u.scheme, port, self.id, domain, ":%d" % u.port if u.port else "")
        if not self.public_ports and self.traffic_token:
            url += "/?pandastack_traffic_token=" + urllib.parse.quote(self.traffic_token, safe="")
        return url

    def _path(self, sub: str = "") -> str:
        return "/v1/sandboxes/%s%s" % (_seg(self.id), sub)

    def terminal(self, cmd: Optional[str] = None, *, user: Optional[str] = None, cwd: Optional[str] = None,
                 cols: Optional[int] = None, rows: Optional[int] = None,
                 on_data: Optional[Callable[[bytes], Any]] = None, timeout: Optional[float] = 60.0) -> Terminal:
        """Open an interactive terminal (``GET …/pty``, a WebSocket): the user's login shell, or
        the shell command line ``cmd``, on a pseudo-terminal of ``cols`` x ``rows`` (default 80x24)
        as ``user`` in ``cwd``. Wakes a hibernated sandbox. ``timeout`` bounds the opening only::

            with sb.terminal(cols=120, rows=40) as t:
                t.write("echo hi; exit 3\n")
                print(t.wait())            # 3; t.read() has what it printed
        """
        return open_terminal(self, cmd, user, cwd, cols, rows, on_data, timeout)

    def refresh(self) -> "Sandbox":
        """Reload the sandbox's attributes from the API."""
        r = self._http.request("GET", self._path(), idempotent=True)
        self._update(r.json())
        return self

    def metrics(self) -> Dict[str, Any]:
        """The sandbox's resource use now (``GET /v1/sandboxes/{id}/metrics``): ``{"at", "vcpus",
        "cpu_used_pct", "mem_total_bytes", "mem_used_bytes", "mem_cache_bytes", "disk_total_bytes",
        "disk_used_bytes", "host_cpu_seconds", "host_mem_bytes"}``. A hibernated sandbox has none
        (``Conflict``); the call does not wake it."""
        return self._http.request("GET", self._path() + "/metrics", idempotent=True).json()

    def _update_from(self, d: Any) -> None:
        if isinstance(d, dict) and d.get("id") == self.id:
            self._update(d)
        else:
            self.refresh()

    # -- exec ------------------------------------------------------------------------------------

    def _exec_timeout(self, timeout_seconds: Optional[float]) -> Optional[float]:
        base = self._http.timeout
        if base is None:
            return None
        run = timeout_seconds if timeout_seconds is not None else DEFAULT_EXEC_TIMEOUT
        return max(base, float(run) + EXEC_GRACE)

    def exec(
        self,
        cmd: Command,
        timeout_seconds: Optional[float] = None,
        *,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        stdin: Union[None, str, bytes] = None,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
    ) -> ExecResult:
        """Run a command and wait for it.

        ``cmd`` is a shell command line (str) or an argv list. ``timeout_seconds`` bounds the run
        (the server's default is 60 s); a command that hits it is killed and the result has
        ``timed_out=True``. A non-zero exit is not an exception: check ``exit_code``.

        With ``on_stdout``/``on_stderr`` the output is streamed: each callback gets text chunks as
        the command produces them, and the returned result still holds all of it.
        """
        body = _exec_body(cmd, timeout_seconds, env, cwd, user, stdin)
        if on_stdout is None and on_stderr is None:
            r = self._http.request("POST", self._path("/exec"), json_body=body,
                                   timeout=self._exec_timeout(timeout_seconds))
            return ExecResult.from_api(r.json() or {})
        got = OutputGatherer(on_stdout, on_stderr)
        stream = self._exec_stream(body, timeout_seconds)
        with stream:
            for ev in stream:
                got.add(ev)
        return ExecResult(
            stdout=got.stdout,
            stderr=got.stderr,
            exit_code=stream.exit_code if stream.exit_code is not None else -1,
            timed_out=stream.timed_out,
            duration_ms=stream.duration_ms,
        )

    def exec_stream(
        self,
        cmd: Command,
        timeout_seconds: Optional[float] = None,
        *,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        stdin: Union[None, str, bytes] = None,
    ) -> ExecStream:
        """Run a command and return its output as it happens (an iterable :class:`ExecStream`)::

            for ev in sb.exec_stream("make test"):
                if ev.type == "stdout": print(ev.data, end="")
                elif ev.type == "exit": print("exit", ev.exit_code)
        """
        return self._exec_stream(_exec_body(cmd, timeout_seconds, env, cwd, user, stdin), timeout_seconds)

    def _exec_stream(self, body: Dict[str, Any], timeout_seconds: Optional[float]) -> ExecStream:
        # The socket timeout is an inactivity limit here: a quiet command may legitimately run
        # until its own timeout, so allow that plus the grace period between two lines.
        lines = self._http.stream_lines("POST", self._path("/exec"), json_body=body,
                                        timeout=self._exec_timeout(timeout_seconds))
        return ExecStream(lines)

    # -- code interpreter ------------------------------------------------------------------------

    def run_code(
        self,
        code: str,
        context: Union[None, str, CodeContext] = None,
        *,
        language: Optional[str] = None,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        on_result: Optional[Callable[[Result], Any]] = None,
        on_error: Optional[Callable[[ExecutionError], Any]] = None,
        timeout: Optional[float] = None,
    ) -> Execution:
        """Run Python in the sandbox's warm kernel (templates with a code interpreter, such as
        code-interpreter) and return the :class:`Execution`. Variables live on between calls in
        a context (the default one, or ``context`` from :meth:`create_code_context`).
        ``language="javascript"`` (or ``"js"``) runs the code in the JavaScript (Node.js) default
        context instead; a ``context`` runs its own language.

        An exception in the code is ``Execution.error``, not a raised error. With callbacks,
        output and results are handed over as they happen. ``timeout`` (seconds, default 300)
        interrupts the code.
        """
        body: Dict[str, Any] = {"code": code}
        if context is not None:
            body["context_id"] = context.id if isinstance(context, CodeContext) else context
        if language is not None:
            body["language"] = language
        if timeout is not None:
            body["timeout_seconds"] = timeout
        http_timeout = self._exec_timeout(timeout if timeout is not None else 300.0)
        if on_stdout is None and on_stderr is None and on_result is None and on_error is None:
            r = self._http.request("POST", self._path("/code"), json_body=body, timeout=http_timeout)
            return Execution.from_api(r.json() or {})
        x = Execution()
        lines = self._http.stream_lines("POST", self._path("/code"), json_body=body, timeout=http_timeout)
        ended = False
        try:
            for obj in lines:
                if "stream_error" in obj:
                    raise errors.error_from_payload(None, {"error": obj["stream_error"]}, lines.request_id)
                if "stdout" in obj:
                    x.logs.stdout.append(obj["stdout"])
                    if on_stdout is not None:
                        on_stdout(obj["stdout"])
                elif "stderr" in obj:
                    x.logs.stderr.append(obj["stderr"])
                    if on_stderr is not None:
                        on_stderr(obj["stderr"])
                elif "result" in obj:
                    res = Result(obj["result"])
                    x.results.append(res)
                    if on_result is not None:
                        on_result(res)
                elif "error" in obj:
                    x.error = ExecutionError(obj["error"])
                    if on_error is not None:
                        on_error(x.error)
                elif "end" in obj:
                    x.execution_count = obj["end"].get("execution_count")
                    x.duration_ms = obj["end"].get("duration_ms")
                    ended = True
                    break
        finally:
            lines.close()
        if not ended:
            raise errors.APIConnectionError("the code stream ended before the execution did", request_id=lines.request_id)
        return x

    def create_code_context(self, cwd: Optional[str] = None, language: str = "python") -> CodeContext:
        """Start a code context: a kernel with its own variables (warm: the data stack is
        already imported). ``language`` is ``"python"`` or ``"javascript"`` (``"js"``)."""
        body: Dict[str, Any] = {"language": language}
        if cwd is not None:
            body["cwd"] = cwd
        r = self._http.request("POST", self._path("/code/contexts"), json_body=body, timeout=self._exec_timeout(900.0))
        return CodeContext(r.json() or {})

    def list_code_contexts(self) -> List[CodeContext]:
        r = self._http.request("GET", self._path("/code/contexts"), idempotent=True)
        return [CodeContext(d) for d in (r.json() or {}).get("contexts") or []]

    def delete_code_context(self, context: Union[str, CodeContext]) -> None:
        cid = context.id if isinstance(context, CodeContext) else context
        self._http.request("DELETE", self._path("/code/contexts/" + _seg(cid)))

    def interrupt_code(self, context: Union[None, str, CodeContext] = None) -> None:
        """Interrupt the running execution of a context (KeyboardInterrupt in Python)."""
        body: Dict[str, Any] = {}
        if context is not None:
            body["context_id"] = context.id if isinstance(context, CodeContext) else context
        self._http.request("POST", self._path("/code/interrupt"), json_body=body)

    # -- lifecycle -------------------------------------------------------------------------------

    @overload
    def fork(self, *, host: Optional[str] = None) -> "Sandbox": ...

    @overload
    def fork(self, count: Literal[1], *, host: Optional[str] = None) -> "Sandbox": ...

    @overload
    def fork(self, count: int, *, host: Optional[str] = None) -> List["Sandbox"]: ...

    def fork(self, count: int = 1, *, host: Optional[str] = None) -> Union["Sandbox", List["Sandbox"]]:
        """Clone this running sandbox, memory and disk, copy-on-write.

        ``fork()`` returns the one new :class:`Sandbox`; ``fork(count=n)`` with n > 1 returns a
        list of n (all or none are made). Each child starts from this sandbox's exact state.
        ``host`` (admin keys) runs the children on that host; another than this sandbox's needs a
        blob store the hosts share.
        """
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError("count must be a positive integer")
        body: Dict[str, Any] = {"count": count} if count != 1 else {}
        if host is not None:
            body["host"] = host
        r = self._http.request("POST", self._path("/fork"), json_body=body, timeout=self._client.create_timeout)
        d = r.json() or {}
        children = [Sandbox(self._client, s) for s in as_list(d.get("sandboxes")) if isinstance(s, dict)]
        for child in children:  # children keep their parent's traffic token
            if not child.public_ports:
                child.traffic_token = self.traffic_token
        if count == 1:
            if not children:
                raise errors.PandaStackError("fork answered without a sandbox", code="bad_response",
                                             status=r.status, request_id=r.request_id)
            return children[0]
        return children

    def snapshot(self) -> Snapshot:
        """Save this sandbox's memory and disk; create new sandboxes from it with
        ``client.sandboxes.create(snapshot_id=snap.id)``. The sandbox keeps running."""
        r = self._http.request("POST", self._path("/snapshots"), json_body={}, timeout=self._client.create_timeout)
        return Snapshot(r.json() or {}, self._client)

    def hibernate(self) -> "Sandbox":
        """Save the sandbox to disk and stop its VM (``state`` becomes ``hibernated``). Any later
        call on it (exec, files, wake) resumes it first."""
        r = self._http.request("POST", self._path("/hibernate"), json_body={}, idempotent=True,
                               timeout=self._client.create_timeout)
        self._update_from(r.json())
        return self

    def wake(self) -> "Sandbox":
        """Resume a hibernated sandbox (a no-op on a running one)."""
        r = self._http.request("POST", self._path("/wake"), json_body={}, idempotent=True,
                               timeout=self._client.create_timeout)
        self._update_from(r.json())
        return self

    def set_ttl(self, seconds: int) -> "Sandbox":
        """Make the sandbox expire ``seconds`` from now (extend or shorten its life)."""
        r = self._http.request("POST", self._path("/ttl"), json_body={"ttl_seconds": seconds}, idempotent=True)
        self._update_from(r.json())
        return self

    def kill(self) -> None:
        """Stop the sandbox and free its resources. Idempotent."""
        self._http.request("DELETE", self._path(), idempotent=True)
        self.state = "killed"

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.kill()
        except errors.NotFound:
            pass

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sandbox) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return "Sandbox(id=%r, template=%r, state=%r)" % (self.id, self.template, self.state)


class Sandboxes:
    """``client.sandboxes`` (also ``client.sandbox``): create, get and list sandboxes."""

    def __init__(self, client: ClientContext) -> None:
        self._client = client
        self._http: Transport = client._http

    def create(
        self,
        template: Optional[str] = None,
        *,
        ttl_seconds: Optional[int] = None,
        metadata: Optional[Mapping[str, str]] = None,
        env: Optional[Mapping[str, str]] = None,
        snapshot_id: Optional[str] = None,
        egress: Any = None,
        volumes: Any = None,
        public_ports: Optional[bool] = None,
        host: Optional[str] = None,
    ) -> Sandbox:
        """Start a sandbox from a template (or from a snapshot with ``snapshot_id``).

        ``ttl_seconds`` is its lifetime (server default 300 s); ``metadata`` string labels you can
        list by; ``env`` variables every command in it sees. The first create of a template that
        is not baked yet waits for the bake. ``volumes`` mounts up to four volumes:
        ``[{"volume_id": "vol_…", "mount_path": "/data", "read_only": False}]`` (or
        ``volume.mount("/data")``); the sandbox runs on the volumes' host. ``public_ports=False``
        makes its port proxy ask for the sandbox's :attr:`~Sandbox.traffic_token` (default: the
        server's setting, public unless it runs with ``--private-ports``). ``host`` (admin keys)
        pins it to one host.
        """
        if template is None and snapshot_id is None:
            raise TypeError("create() needs template= (or snapshot_id=)")
        body: Dict[str, Any] = {}
        if template is not None:
            body["template"] = template
        if ttl_seconds is not None:
            body["ttl_seconds"] = ttl_seconds
        if metadata is not None:
            body["metadata"] = dict(metadata)
        if env is not None:
            body["env"] = dict(env)
        if snapshot_id is not None:
            body["snapshot_id"] = snapshot_id
        if egress is not None:
            body["egress"] = egress
        if volumes is not None:
            body["volumes"] = [_volume_entry(v) for v in volumes]
        if public_ports is not None:
            body["public_ports"] = bool(public_ports)
        if host is not None:
            body["host"] = host
        r = self._http.request("POST", "/v1/sandboxes", json_body=body, timeout=self._client.create_timeout)
        return Sandbox(self._client, r.json() or {})

    def connect(self, sandbox_id: str) -> Sandbox:
        """A sandbox made earlier (by this program or another), ready for calls: a hibernated one
        is woken. Raises :class:`~pandastack.NotFound` for an unknown id and
        :class:`~pandastack.Conflict` for one that was killed."""
        sb = self.get(sandbox_id)
        if sb.state == "hibernated":
            sb.wake()
        elif sb.state != "running":
            raise errors.Conflict("sandbox %s is %s" % (sb.id, sb.state), code="conflict")
        return sb

    def get(self, sandbox_id: str) -> Sandbox:
        """The sandbox with this id (raises :class:`~pandastack.NotFound`). Killed sandboxes stay
        readable with ``state == "killed"``."""
        if not sandbox_id:
            raise ValueError("sandbox_id is required")
        r = self._http.request("GET", "/v1/sandboxes/%s" % _seg(sandbox_id), idempotent=True)
        return Sandbox(self._client, r.json() or {})

    def iter(
        self,
        *,
        metadata: Optional[Mapping[str, str]] = None,
        state: Union[None, str, Sequence[str]] = None,
        limit: Optional[int] = None,
        page_size: int = 100,
    ) -> Iterator[Sandbox]:
        """Like :meth:`list`, but fetches pages lazily."""
        params: Dict[str, Any] = {}
        if state is not None:
            params["state"] = state if isinstance(state, str) else ",".join(state)
        for k, v in (metadata or {}).items():
            params["metadata." + k] = v
        n = 0
        cursor: Optional[str] = None
        while True:
            p = dict(params)
            size = page_size if limit is None else max(1, min(page_size, limit - n))
            p["limit"] = min(size, 1000)
            if cursor:
                p["cursor"] = cursor
            d = self._http.get_json("/v1/sandboxes", params=p)
            for s in as_list(d.get("sandboxes")):
                if limit is not None and n >= limit:
                    return
                n += 1
                yield Sandbox(self._client, s)
            cursor = d.get("next_cursor")
            if not cursor or (limit is not None and n >= limit):
                return

    def list(
        self,
        *,
        metadata: Optional[Mapping[str, str]] = None,
        state: Union[None, str, Sequence[str]] = None,
        limit: Optional[int] = None,
    ) -> List[Sandbox]:
        """Your team's sandboxes, newest first.

        ``metadata`` keeps those whose labels include all the given pairs; ``state`` is one
        state, a list of them, or ``"all"`` (by default killed sandboxes are left out); ``limit``
        caps how many are returned (all pages are read otherwise).
        """
        return [sb for sb in self.iter(metadata=metadata, state=state, limit=limit)]


class Snapshots:
    """``client.snapshots``: list, look up and delete snapshots made with :meth:`Sandbox.snapshot`."""

    def __init__(self, client: ClientContext) -> None:
        self._client = client
        self._http: Transport = client._http

    def iter(self, *, sandbox_id: Optional[str] = None, limit: Optional[int] = None,
             page_size: int = 100) -> Iterator[Snapshot]:
        """Like :meth:`list`, but fetches pages lazily."""
        n = 0
        cursor: Optional[str] = None
        while True:
            size = page_size if limit is None else max(1, min(page_size, limit - n))
            p: Dict[str, Any] = {"sandbox_id": sandbox_id, "limit": min(size, 1000), "cursor": cursor}
            d = self._http.get_json("/v1/snapshots", params=p)
            for sn in as_list(d.get("snapshots")):
                if limit is not None and n >= limit:
                    return
                n += 1
                yield Snapshot(sn, self._client)
            cursor = d.get("next_cursor")
            if not cursor or (limit is not None and n >= limit):
                return

    def list(self, *, sandbox_id: Optional[str] = None, limit: Optional[int] = None) -> List[Snapshot]:
        """Your team's snapshots, newest first; ``sandbox_id`` keeps those of one sandbox."""
        return [sn for sn in self.iter(sandbox_id=sandbox_id, limit=limit)]

    def get(self, snapshot_id: str) -> Snapshot:
        r = self._http.request("GET", "/v1/snapshots/%s" % _seg(snapshot_id), idempotent=True)
        return Snapshot(r.json() or {}, self._client)

    def delete(self, snapshot_id: str) -> None:
        Snapshot({"id": snapshot_id}, self._client).delete()


class Templates:
    """``client.templates``: the catalog, and the templates your team builds (private to it)."""

    def __init__(self, client: ClientContext) -> None:
        self._client = client
        self._http: Transport = client._http

    def list(self) -> List[Template]:
        d = self._http.get_json("/v1/templates")
        return [Template(t) for t in as_list(d.get("templates")) if isinstance(t, dict)]

    def get(self, name: str) -> Template:
        """Your team's template by that name, else the catalog's (aliases resolve)."""
        if not name:
            raise ValueError("name is required")
        return Template(self._http.get_json("/v1/templates/%s" % _seg(name)))

    def build(self, spec: "Union[Mapping[str, Any], str]",
              on_progress: Optional[Callable[[str], None]] = None) -> Template:
        """Build a template for your team from ``spec``: a dict, or a YAML/JSON string (see
        docs/templates.md; files take ``content``, not ``src``). Blocks until the build ends;
        each line of the build log goes to ``on_progress`` as it comes. Raises
        :class:`~pandastack.BuildFailed` when the build fails, InvalidRequest/Conflict for a
        spec refused before it starts. Building a name again rebuilds it."""
        if isinstance(spec, str):
            lines = self._http.stream_lines("POST", "/v1/templates", data=spec.encode("utf-8"),
                                            content_type="application/yaml", timeout=self._client.create_timeout)
        elif isinstance(spec, Mapping):
            lines = self._http.stream_lines("POST", "/v1/templates", json_body=dict(spec),
                                            timeout=self._client.create_timeout)
        else:
            raise TypeError("spec is a dict or a YAML/JSON string, not %s" % type(spec).__name__)
        for obj in lines:
            if "error" in obj:
                raise errors.error_from_payload(None, obj, lines.request_id)
            if isinstance(obj.get("template"), dict):
                lines.close()
                return Template(obj["template"])
            if isinstance(obj.get("progress"), str) and on_progress is not None:
                on_progress(obj["progress"])
        raise errors.APIConnectionError("the build stream ended before its result arrived", request_id=lines.request_id)

    def delete(self, name: str) -> None:
        """Delete one of your team's templates; Conflict while sandboxes or snapshots use it (or
        for a catalog template)."""
        if not name:
            raise ValueError("name is required")
        self._http.request("DELETE", "/v1/templates/%s" % _seg(name), idempotent=True)


def _volume_entry(v: Any) -> Dict[str, Any]:
    """One ``volumes=`` entry as the API takes it (a mapping with volume_id, mount_path and
    optionally read_only)."""
    if not isinstance(v, Mapping):
        raise TypeError("each volumes entry is a dict with volume_id and mount_path, not %r" % (v,))
    out: Dict[str, Any] = {"volume_id": v.get("volume_id"), "mount_path": v.get("mount_path")}
    if v.get("read_only") is not None:
        out["read_only"] = v["read_only"]
    extra = set(v) - {"volume_id", "mount_path", "read_only"}
    if extra:
        raise TypeError("unknown volumes entry keys: %s" % ", ".join(sorted(extra)))
    return out


class Volumes:
    """``client.volumes``: durable volumes, persistent disks that outlive sandboxes."""

    def __init__(self, client: ClientContext) -> None:
        self._client = client
        self._http: Transport = client._http

    def create(self, size_mib: int, name: Optional[str] = None) -> Volume:
        """Make a volume of ``size_mib`` MiB (1 to 1048576) on a host the server picks."""
        body: Dict[str, Any] = {"size_mib": size_mib}
        if name is not None:
            body["name"] = name
        r = self._http.request("POST", "/v1/volumes", json_body=body, timeout=self._client.create_timeout)
        return Volume(r.json() or {}, self._client)

    def list(self) -> List[Volume]:
        """Your team's volumes, newest first."""
        d = self._http.get_json("/v1/volumes")
        return [Volume(v, self._client) for v in as_list(d.get("volumes")) if isinstance(v, dict)]

    def get(self, volume_id: str) -> Volume:
        if not volume_id:
            raise ValueError("volume_id is required")
        return Volume({"id": volume_id}, self._client).refresh()

    def resize(self, volume_id: str, size_mib: int) -> Volume:
        """Grow a volume; refused (Conflict) while a sandbox has it mounted."""
        return Volume({"id": volume_id}, self._client).resize(size_mib)

    def delete(self, volume_id: str) -> None:
        """Delete a volume and its data; refused (Conflict) while a sandbox has it mounted."""
        Volume({"id": volume_id}, self._client).delete()
