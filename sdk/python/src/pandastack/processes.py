"""Background processes of a sandbox (docs/processes.md): ``sandbox.processes``."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Union

from . import errors
from ._http import Transport
from .models import OutputGatherer, Process, ProcessEvent, as_list

if TYPE_CHECKING:  # only for annotations: sandbox.py imports this module
    from .sandbox import Sandbox

__all__ = ["Processes", "ProcessHandle", "ProcessResult"]

Command = Union[str, Sequence[str]]
OutputCallback = Callable[[str], Any]

#: how many times :meth:`ProcessHandle.wait` reconnects a dropped stream in a row
RECONNECTS = 5


def command_body(cmd: Command, env: Optional[Mapping[str, str]], cwd: Optional[str],
                 user: Optional[str]) -> Dict[str, Any]:
    """The request fields exec and a process start share: cmd (a shell command line) or argv,
    env, cwd, user."""
    body: Dict[str, Any] = {}
    if isinstance(cmd, str):
        body["cmd"] = cmd
    elif isinstance(cmd, (bytes, bytearray)):
        raise TypeError("cmd must be a str (a shell command line) or a list of str (argv), not bytes")
    else:
        argv = list(cmd)
        if not argv or not all(isinstance(a, str) for a in argv):
            raise TypeError("cmd as a sequence must be a non-empty list of str (argv)")
        body["argv"] = argv
    if env:
        body["env"] = dict(env)
    if cwd is not None:
        body["cwd"] = cwd
    if user is not None:
        body["user"] = user
    return body


class ProcessResult:
    """How a background process ended, and the output :meth:`ProcessHandle.wait` read."""

    __slots__ = ("pid", "exit_code", "signal", "stdout", "stderr")

    def __init__(self, pid: int, exit_code: int, signal: Optional[str], stdout: str, stderr: str) -> None:
        self.pid = pid
        self.exit_code = exit_code
        self.signal = signal
        self.stdout = stdout
        self.stderr = stderr

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def __repr__(self) -> str:
        return "ProcessResult(pid=%r, exit_code=%r, signal=%r)" % (self.pid, self.exit_code, self.signal)


class ProcessHandle:
    """One background process: read its output from any offset, write its stdin, signal or kill
    it. Dropping a handle (or the program) never touches the process; ``connect`` makes a new one.

    ``offset`` is where the next :meth:`wait` or :meth:`output` read starts; reading moves it on.
    """

    def __init__(self, sandbox: "Sandbox", pid: int, offset: int = 0) -> None:
        self._sb = sandbox
        self.pid = pid
        self.offset = offset

    @property
    def _http(self) -> Transport:
        return self._sb._http

    def _path(self, sub: str = "") -> str:
        return self._sb._path("/processes/%d%s" % (self.pid, sub))

    def output(self, *, offset: Optional[int] = None, follow: bool = False) -> Iterator[ProcessEvent]:
        """The output from ``offset`` (default: where this handle stopped) as events: ``stdout``
        and ``stderr`` chunks, then one ``exit`` (the process ended) or, without ``follow``,
        ``running`` event (everything kept so far was read). Each event's ``next`` is where a
        later read resumes; the handle's ``offset`` follows it."""
        start = self.offset if offset is None else offset
        lines = self._http.stream_lines("GET", self._path("/output"),
                                        params={"offset": start, "follow": 1 if follow else None}, timeout=None)
        ended = False
        try:
            for obj in lines:
                if "error" in obj:
                    raise errors.error_from_payload(None, obj, lines.request_id)
                ev = ProcessEvent.from_api(obj)
                if ev.next is not None:
                    self.offset = ev.next
                ended = ev.type in ("exit", "running")
                yield ev
                if ended:
                    return
        finally:
            lines.close()
        if not ended:
            raise errors.APIConnectionError("the output stream ended before the process's end line",
                                            request_id=lines.request_id)

    def wait(self, *, on_stdout: Optional[OutputCallback] = None,
             on_stderr: Optional[OutputCallback] = None) -> ProcessResult:
        """Follow the output (from the handle's offset) until the process exits; callbacks get
        each chunk as it comes. A stream that drops is resumed where it stopped, so no output is
        lost or repeated."""
        got = OutputGatherer(on_stdout, on_stderr)
        failures = 0
        while True:
            try:
                for ev in self.output(follow=True):
                    failures = 0
                    got.add(ev)
                    if ev.type == "exit":
                        code = ev.exit_code if ev.exit_code is not None else -1
                        return ProcessResult(self.pid, code, ev.signal, got.stdout, got.stderr)
            except (errors.APIConnectionError, errors.Timeout):
                failures += 1
                if failures > RECONNECTS:
                    raise
                getattr(self._http, "_sleep", time.sleep)(0.5 * failures)

    def send_stdin(self, data: Union[str, bytes], *, eof: bool = False) -> None:
        """Write to the process's stdin (started with ``stdin=True``; at most 1 MiB a call);
        ``eof=True`` closes it afterwards."""
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
        body: Dict[str, Any] = {"data": text}
        if eof:
            body["eof"] = True
        self._http.request("POST", self._path("/stdin"), json_body=body)

    def resize(self, cols: int, rows: int) -> None:
        """Set the terminal size of a process started with ``pty=`` (its programs get SIGWINCH)."""
        self._http.request("POST", self._path("/resize"), json_body={"cols": cols, "rows": rows})

    def signal(self, signal: str) -> None:
        """Send a signal to the process's group: TERM, KILL, INT, HUP, QUIT, USR1, USR2, STOP or
        CONT (``SIGTERM`` works too)."""
        self._http.request("POST", self._path("/signal"), json_body={"signal": signal})

    def kill(self) -> Process:
        """Kill the process and its whole tree; returns it after (normally exited)."""
        r = self._http.request("DELETE", self._path(), idempotent=True)
        return Process(r.json() or {})

    def info(self) -> Process:
        """The process as the sandbox lists it now."""
        for p in self._sb.processes.list():
            if p.pid == self.pid:
                return p
        raise errors.NotFound("process %d is not listed in sandbox %s" % (self.pid, self._sb.id), code="not_found")

    def __repr__(self) -> str:
        return "ProcessHandle(pid=%r, sandbox=%r)" % (self.pid, self._sb.id)


class Processes:
    """``sandbox.processes``: start background processes and come back to them."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def start(
        self,
        cmd: Command,
        *,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        stdin: bool = False,
        tag: Optional[str] = None,
        pty: Optional[Mapping[str, int]] = None,
    ) -> ProcessHandle:
        """Start ``cmd`` (a shell command line, or an argv list) in the background and return at
        once. It runs until it exits or is killed, whoever reads it; ``stdin=True`` keeps a pipe
        to its stdin open for :meth:`ProcessHandle.send_stdin`; ``tag`` labels it in listings;
        ``pty={"cols": 120, "rows": 40}`` runs it on a terminal of its own (``send_stdin`` types
        into it, its output is the terminal's; :meth:`ProcessHandle.resize` resizes it)."""
        body = command_body(cmd, env, cwd, user)
        if stdin:
            body["stdin"] = True
        if tag is not None:
            body["tag"] = tag
        if pty is not None:
            body["pty"] = {"cols": int(pty.get("cols", 0)), "rows": int(pty.get("rows", 0))}
        r = self._sb._http.request("POST", self._sb._path("/processes"), json_body=body)
        return ProcessHandle(self._sb, int((r.json() or {})["pid"]))

    def list(self) -> List[Process]:
        """The running processes and the last ones that exited (with exit codes)."""
        d = self._sb._http.get_json(self._sb._path("/processes"))
        return [Process(p) for p in as_list(d.get("processes")) if isinstance(p, dict)]

    def connect(self, pid: int, *, offset: int = 0) -> ProcessHandle:
        """A handle on a process started earlier (by this program or another), reading from
        ``offset`` (0: the oldest output kept)."""
        return ProcessHandle(self._sb, pid, offset)

    def kill(self, pid: int) -> Process:
        """Kill a process and its whole tree."""
        return ProcessHandle(self._sb, pid).kill()

    def send_stdin(self, pid: int, data: Union[str, bytes], *, eof: bool = False) -> None:
        """Write to a process's stdin."""
        ProcessHandle(self._sb, pid).send_stdin(data, eof=eof)

    def signal(self, pid: int, signal: str) -> None:
        """Send a signal to a process's group."""
        ProcessHandle(self._sb, pid).signal(signal)
