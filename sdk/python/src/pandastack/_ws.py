"""A minimal WebSocket client (RFC 6455) on the standard library, for the terminal
(``GET /v1/sandboxes/{id}/pty``): the opening handshake over a plain or TLS socket with the API
key in the Authorization header, masked frames out, unmasked frames in, fragmented messages put
together, pings answered with pongs, and the closing handshake. No extensions (no compression) and
no subprotocols are offered, so the server uses none.
"""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import ssl
import struct
import threading
import urllib.parse
from typing import Any, Mapping, Optional, Tuple

from . import errors

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

# Opcodes.
CONT, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA

#: the largest message taken from the server (the terminal sends far smaller ones)
MAX_MESSAGE = 1 << 20
#: the largest header block of the handshake's answer
_MAX_HEADER = 64 << 10


class ConnectionClosed(Exception):
    """The connection ended; ``code`` and ``reason`` are the server's close frame's (1006: none)."""

    def __init__(self, code: int = 1006, reason: str = "") -> None:
        super().__init__("WebSocket closed (%d%s)" % (code, ": " + reason if reason else ""))
        self.code = code
        self.reason = reason


def accept_key(key: str) -> str:
    """The Sec-WebSocket-Accept a server answers to Sec-WebSocket-Key ``key``."""
    return base64.b64encode(hashlib.sha1(key.encode("ascii") + _GUID).digest()).decode("ascii")


def encode_frame(opcode: int, payload: bytes, mask: Optional[bytes] = None) -> bytes:
    """One final frame, masked with ``mask`` (4 bytes; random if None) as a client must."""
    if mask is None:
        mask = os.urandom(4)
    n = len(payload)
    head = bytes([0x80 | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 1 << 16:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", n)
    return head + mask + _xor(payload, mask)


def _xor(data: bytes, mask: bytes) -> bytes:
    if not data:
        return b""
    n = len(data)
    key = int.from_bytes((mask * (n // 4 + 1))[:n], "big")
    return (int.from_bytes(data, "big") ^ key).to_bytes(n, "big")


class WebSocket:
    """An open client connection. ``recv()`` returns ``(opcode, payload)`` for each data message
    (TEXT or BINARY) and raises :class:`ConnectionClosed` at the end; ``send_*`` may be called
    from any thread; ``close()`` too (it also wakes a ``recv`` blocked in another thread)."""

    def __init__(self, sock: socket.socket, reader: Any) -> None:
        self._sock = sock
        self._r = reader
        self._wlock = threading.Lock()
        self._closing = False
        self.closed = False

    # -- sending -----------------------------------------------------------------------------------

    def _send(self, opcode: int, payload: bytes) -> None:
        frame = encode_frame(opcode, payload)
        with self._wlock:
            if self.closed:
                raise ConnectionClosed(1006, "closed")
            try:
                self._sock.sendall(frame)
            except OSError as e:
                raise ConnectionClosed(1006, str(e)) from e

    def send_binary(self, data: bytes) -> None:
        self._send(BINARY, bytes(data))

    def send_text(self, text: str) -> None:
        self._send(TEXT, text.encode("utf-8"))

    def ping(self, data: bytes = b"") -> None:
        self._send(PING, data)

    # -- receiving ---------------------------------------------------------------------------------

    def _read(self, n: int) -> bytes:
        b = self._r.read(n) if n else b""
        if len(b) < n:
            raise ConnectionClosed(1006, "the connection ended mid-frame" if b else "")
        return b

    def _frame(self) -> Tuple[bool, int, bytes]:
        b0, b1 = self._read(2)
        fin, opcode, masked, n = bool(b0 & 0x80), b0 & 0x0F, bool(b1 & 0x80), b1 & 0x7F
        if b0 & 0x70:
            self._fail(1002, "reserved bits set (no extension was agreed)")
        if n == 126:
            n = struct.unpack("!H", self._read(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", self._read(8))[0]
        if n > MAX_MESSAGE:
            self._fail(1009, "a frame of %d bytes is more than %d" % (n, MAX_MESSAGE))
        mask = self._read(4) if masked else b""
        payload = self._read(n)
        if masked:  # a server must not mask; tolerated
            payload = _xor(payload, mask)
        return fin, opcode, payload

    def _fail(self, code: int, reason: str) -> None:
        self.close(code, reason)
        raise ConnectionClosed(code, reason)

    def recv(self) -> Tuple[int, bytes]:
        """The next data message: ``(TEXT or BINARY, payload)``. Pings are answered on the way."""
        opcode, parts, size = None, [], 0
        while True:
            try:
                fin, op, payload = self._frame()
            except (OSError, ValueError) as e:  # reset, or a read on a socket closed meanwhile
                self._drop()
                raise ConnectionClosed(1006, "" if self._closing else str(e)) from e
            except ConnectionClosed:
                self._drop()
                raise
            if op == PING:
                try:
                    self._send(PONG, payload)
                except ConnectionClosed:
                    pass
                continue
            if op == PONG:
                continue
            if op == CLOSE:
                code, reason = 1005, ""
                if len(payload) >= 2:
                    code = struct.unpack("!H", payload[:2])[0]
                    reason = payload[2:].decode("utf-8", "replace")
                self.close(code if code != 1005 else 1000)  # the closing handshake's answer
                raise ConnectionClosed(code, reason)
            if op in (TEXT, BINARY):
                if opcode is not None:
                    self._fail(1002, "a new message inside a fragmented one")
                opcode = op
            elif op != CONT or opcode is None:
                self._fail(1002, "unexpected opcode %d" % op)
            size += len(payload)
            if size > MAX_MESSAGE:
                self._fail(1009, "a message of more than %d bytes" % MAX_MESSAGE)
            parts.append(payload)
            if fin:
                return opcode, b"".join(parts)

    # -- closing -----------------------------------------------------------------------------------

    def close(self, code: int = 1000, reason: str = "") -> None:
        """Send a close frame (once) and end the connection; safe from any thread."""
        with self._wlock:
            if self.closed:
                return
            if not self._closing:
                self._closing = True
                try:
                    self._sock.sendall(encode_frame(CLOSE, struct.pack("!H", code) + reason.encode("utf-8")[:120]))
                except OSError:
                    pass
        self._drop()

    def _drop(self) -> None:
        with self._wlock:
            if self.closed:
                return
            self.closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes a recv blocked in another thread
        except OSError:
            pass
        self._sock.close()
        self._r.close()  # the socket's descriptor is freed once its file object is closed too


def connect(transport: Any, path: str, params: Optional[Mapping[str, Any]], timeout: Optional[float]) -> WebSocket:
    """Open a WebSocket to ``path`` of the API (with the transport's key, user agent and a request
    id). A refused upgrade raises the typed error of the answer, like any call; ``timeout`` bounds
    the connect and the handshake (reads after it wait as long as they must)."""
    h = transport._headers(None)
    url = transport._origin + transport._target(path, params)
    u = urllib.parse.urlsplit(url)
    port = u.port or (443 if u.scheme == "https" else 80)
    key = base64.b64encode(os.urandom(16)).decode("ascii")
    try:
        sock = socket.create_connection((u.hostname, port), timeout=timeout)
    except (socket.timeout, TimeoutError) as e:
        raise transport._timeout_error("GET", path, timeout, h) from e
    except OSError as e:
        raise transport._connection_error(e, h) from e
    reader = None

    def drop() -> None:  # a failed opening: the descriptor goes with the file object too
        if reader is not None:
            reader.close()
        sock.close()

    try:
        if u.scheme == "https":
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=u.hostname)
        host = u.netloc.rpartition("@")[2]
        lines = ["GET %s HTTP/1.1" % ((u.path or "/") + ("?" + u.query if u.query else "")), "Host: " + host,
                 "Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Key: " + key, "Sec-WebSocket-Version: 13"]
        h.pop("Accept", None)
        lines += ["%s: %s" % (k, v) for k, v in h.items()]
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        reader = sock.makefile("rb")
        status, headers = _read_head(reader)
        if status != 101:
            body = _read_body(reader, headers)
            transport._raise_for(status, _Headers(headers), body, h["X-Request-Id"])
        if headers.get("upgrade", "").lower() != "websocket" or headers.get("sec-websocket-accept") != accept_key(key):
            raise errors.APIConnectionError("the server's answer to the WebSocket upgrade is not one (%s)" % url,
                                            request_id=h["X-Request-Id"])
        sock.settimeout(None)
    except (socket.timeout, TimeoutError) as e:
        drop()
        raise transport._timeout_error("GET", path, timeout, h) from e
    except errors.PandaStackError:
        drop()
        raise
    except (OSError, ValueError) as e:
        drop()
        raise transport._connection_error(e, h) from e
    return WebSocket(sock, reader)


class _Headers(dict):  # type: ignore[type-arg]
    """Lower-cased header names, looked up case-insensitively (what _raise_for reads)."""

    def get(self, k: str, default: Any = None) -> Any:  # type: ignore[override]
        return super().get(k.lower(), default)


def _read_head(reader: Any) -> Tuple[int, "_Headers"]:
    line = reader.readline(_MAX_HEADER)
    parts = line.decode("latin-1").split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise ValueError("not an HTTP answer: %r" % line[:100])
    status = int(parts[1])
    headers = _Headers()
    total = 0
    while True:
        line = reader.readline(_MAX_HEADER)
        total += len(line)
        if not line or total > _MAX_HEADER:
            raise ValueError("the answer's headers did not end")
        if line in (b"\r\n", b"\n"):
            return status, headers
        k, _, v = line.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()


def _read_body(reader: Any, headers: Mapping[str, str]) -> bytes:
    n = headers.get("content-length")
    if n is not None and n.isdigit():
        return reader.read(min(int(n), 64 << 10))
    return b""
