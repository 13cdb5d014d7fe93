"""The interactive terminal of a sandbox (docs/processes.md, "Interactive terminal"):
``sandbox.terminal()`` opens ``GET /v1/sandboxes/{id}/pty``, a WebSocket (``_ws``, standard library
only): binary messages are the terminal's bytes both ways, text messages JSON (resize from us; the
exit, or an error, from the server)."""

from __future__ import annotations

import json
import queue
import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, Optional, Union

from . import errors
from ._closing import Closing
from ._ws import BINARY, ConnectionClosed, WebSocket, connect

if TYPE_CHECKING:
    from .sandbox import Sandbox

__all__ = ["Terminal"]

DataCallback = Callable[[bytes], Any]


class Terminal(Closing):
    """An open terminal: a program (the user's login shell, or ``cmd``) on a pseudo-terminal in
    the sandbox. ``write`` types into it, ``read`` (or iterating, or ``on_data=``) gets what it
    prints, ``resize`` changes its size, ``wait`` waits for the program's exit and returns its
    exit code, ``close`` hangs it up (the program gets SIGHUP). A background thread reads the
    connection (answering the server's pings whether or not you read); with ``on_data`` each
    chunk goes to the callback (in that thread) instead of ``read``. Safe to use from several
    threads; ``close()`` wakes a blocked ``read``."""

    def __init__(self, ws: WebSocket, on_data: Optional[DataCallback] = None) -> None:
        self._ws = ws
        self._on_data = on_data
        self._chunks: "queue.Queue[Optional[bytes]]" = queue.Queue()
        self._done = threading.Event()
        self._ended = False  # read() saw the end
        #: the program's exit code and the signal that ended it (``None`` until it exited)
        self.exit_code: Optional[int] = None
        self.signal: Optional[str] = None
        self._error: Optional[BaseException] = None
        self._reader = threading.Thread(target=self._pump, name="pandastack-terminal", daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        try:
            while True:
                opcode, data = self._ws.recv()
                if opcode == BINARY:
                    if self._on_data is not None:
                        self._on_data(data)
                    else:
                        self._chunks.put(data)
                    continue
                msg = json.loads(data.decode("utf-8"))
                if msg.get("type") == "exit":
                    self.exit_code, self.signal = msg.get("exit_code"), msg.get("signal") or None
                elif msg.get("type") == "error":
                    self._error = errors.error_from_payload(None, {"error": msg.get("error") or {}})
        except ConnectionClosed:
            pass
        except BaseException as e:  # a callback's failure, or a malformed message: the terminal ends
            self._error = e
            self._ws.close(1011, "client error")
        finally:
            self._done.set()
            self._chunks.put(None)

    # -- input ---------------------------------------------------------------------------------

    def write(self, data: Union[bytes, str]) -> None:
        """Type ``data`` (bytes, or a str sent as UTF-8) into the terminal: ``"\\x03"`` is Ctrl-C."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        try:
            self._ws.send_binary(data)
        except ConnectionClosed as e:
            raise self._closed_error() from e

    def resize(self, cols: int, rows: int) -> None:
        """Change the terminal's size (1–1000 each); the program gets SIGWINCH."""
        if not (isinstance(cols, int) and isinstance(rows, int) and 1 <= cols <= 1000 and 1 <= rows <= 1000):
            raise errors.InvalidRequest("cols and rows must be whole numbers from 1 to 1000, not %r x %r" % (cols, rows),
                                        code="invalid_request")
        try:
            self._ws.send_text(json.dumps({"type": "resize", "cols": cols, "rows": rows}))
        except ConnectionClosed as e:
            raise self._closed_error() from e

    def _closed_error(self) -> errors.PandaStackError:
        return errors.APIConnectionError("the terminal is closed" + (" (the program exited %s)" % self.exit_code
                                                                     if self.exit_code is not None else ""))

    # -- output --------------------------------------------------------------------------------

    def read(self, timeout: Optional[float] = None) -> bytes:
        """The next bytes the terminal printed; ``b""`` once it ended (the program exited or the
        terminal was closed). Raises :class:`~pandastack.errors.Timeout` when nothing came within
        ``timeout`` seconds (``None``: wait)."""
        if self._ended:
            return b""
        try:
            chunk = self._chunks.get(timeout=timeout)
        except queue.Empty:
            raise errors.Timeout("the terminal printed nothing within %s s" % timeout, code="client_timeout") from None
        if chunk is None:
            self._ended = True
            return b""
        return chunk

    def __iter__(self) -> "Terminal":
        return self

    def __next__(self) -> bytes:
        chunk = self.read()
        if not chunk:
            raise StopIteration
        return chunk

    def wait(self, timeout: Optional[float] = None) -> int:
        """Wait for the program's exit and return its exit code (128 + the signal's number when a
        signal ended it: see ``signal``). Output not read stays readable. Raises the server's error
        if the terminal failed, :class:`~pandastack.errors.APIConnectionError` if the connection
        ended without an exit, :class:`~pandastack.errors.Timeout` after ``timeout`` seconds."""
        if not self._done.wait(timeout):
            raise errors.Timeout("the terminal's program did not exit within %s s" % timeout, code="client_timeout")
        if self._error is not None:
            raise self._error
        if self.exit_code is None:
            raise errors.APIConnectionError("the terminal's connection ended before its program exited")
        return self.exit_code

    # -- the end -------------------------------------------------------------------------------

    def close(self) -> None:
        """Hang up: the program gets SIGHUP (SIGKILL 2 s later). Safe from any thread."""
        self._ws.close()
        self._done.wait(5)

    @property
    def closed(self) -> bool:
        return self._done.is_set()


    def __repr__(self) -> str:
        return "Terminal(exit_code=%r)" % (self.exit_code,)


def open_terminal(sandbox: "Sandbox", cmd: Optional[str], user: Optional[str], cwd: Optional[str], cols: Optional[int],
                  rows: Optional[int], on_data: Optional[DataCallback], timeout: Optional[float]) -> Terminal:
    params: Dict[str, Any] = {"cmd": cmd, "user": user, "cwd": cwd}
    if cols is not None or rows is not None:
        if cols is None or rows is None:
            raise errors.InvalidRequest("give both cols and rows, or neither (80x24)", code="invalid_request")
        params["cols"], params["rows"] = cols, rows
    ws = connect(sandbox._http, sandbox._path("/pty"), params, timeout)
    return Terminal(ws, on_data)
