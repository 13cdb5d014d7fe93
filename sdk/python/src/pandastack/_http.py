"""HTTP transport: one connection per request over http.client, JSON in and out, typed errors,
retries with backoff for idempotent calls.

The one HTTP exchange itself goes through a ``send`` callable (``PandaStack(send=...)``), by
default :func:`http_client_send`; everything above it (headers, retries, error mapping, NDJSON
streams) is the same whichever ``send`` is used, so tests can script answers without a socket.
"""

from __future__ import annotations

import http.client
import io
import json
import random
import socket
import ssl
import time
import urllib.parse
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Union

from . import errors
from ._version import __version__

Body = Union[None, bytes, Any]

#: statuses worth another try for an idempotent call
RETRY_STATUSES = (429, 503)


_ID_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


def new_request_id() -> str:
    """An X-Request-Id for one call (kept by the server, so client-side failures can be matched
    with its log)."""
    return "req_" + "".join(random.choice(_ID_ALPHABET) for _ in range(20))


def quote_segment(s: str) -> str:
    """One path segment (an id or name), every reserved character escaped."""
    return urllib.parse.quote(s, safe="")


def _quote_params(params: Optional[Mapping[str, Any]]) -> str:
    if not params:
        return ""
    items = []
    for k, v in params.items():
        if v is None:
            continue
        if isinstance(v, bool):
            v = "true" if v else "false"
        items.append((k, str(v)))
    return urllib.parse.urlencode(items) if items else ""


class Response:
    """A finished answer: status, headers and the whole body."""

    def __init__(self, status: int, headers: http.client.HTTPMessage, body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def request_id(self) -> Optional[str]:
        return self.headers.get("X-Request-Id")

    def json(self) -> Any:
        if not self.body:
            return None
        return json.loads(self.body.decode("utf-8"))


class HTTPRequest:
    """One HTTP exchange the SDK wants made: what a ``send`` callable receives.

    ``url`` is absolute (base URL, path and query); ``headers`` include Authorization,
    User-Agent and X-Request-Id; ``body`` is ``None``, bytes, or a binary file object (a streamed
    upload); ``timeout`` is the socket timeout in seconds (``None`` for none).
    """

    __slots__ = ("method", "url", "headers", "body", "timeout")

    def __init__(self, method: str, url: str, headers: Dict[str, str], body: Any = None,
                 timeout: Optional[float] = None) -> None:
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.timeout = timeout

    def json(self) -> Any:
        """The body decoded as JSON (``None`` without a bytes body): handy in scripted sends."""
        if not isinstance(self.body, (bytes, bytearray)) or not self.body:
            return None
        return json.loads(bytes(self.body).decode("utf-8"))

    def __repr__(self) -> str:
        return "HTTPRequest(%s %s)" % (self.method, self.url)


class HTTPResponse:
    """An answer held in memory, shaped like :class:`http.client.HTTPResponse` (``status``,
    ``headers``, ``read()``, ``readline()``, ``close()``): what a scripted ``send`` can return.

    ``body`` is bytes, or a str (UTF-8 encoded), or any other value (sent as JSON);
    ``headers`` a mapping (looked up case-insensitively, as on the wire).
    """

    def __init__(self, status: int, body: Any = b"", headers: Optional[Mapping[str, str]] = None) -> None:
        if isinstance(body, str):
            body = body.encode("utf-8")
        elif body is None:
            body = b""
        elif not isinstance(body, (bytes, bytearray)):
            body = json.dumps(body).encode("utf-8")
        self.status = status
        self.headers = http.client.HTTPMessage()
        for k, v in (headers or {}).items():
            self.headers[k] = v
        self._buf = io.BytesIO(bytes(body))
        self.closed = False

    def read(self, n: int = -1) -> bytes:
        return self._buf.read(n)

    def readline(self) -> bytes:
        return self._buf.readline()

    def close(self) -> None:
        self.closed = True

    def __repr__(self) -> str:
        return "HTTPResponse(status=%d)" % self.status


#: ``send(request) -> response``: makes one HTTP exchange. The response needs ``status`` (int),
#: ``headers`` (with a case-insensitive ``get``), ``read()``, ``readline()`` and ``close()``.
#: Raising OSError/ConnectionError means "no answer" (retried for idempotent calls),
#: socket.timeout/TimeoutError a client timeout.
Send = Callable[[HTTPRequest], Any]


class _ConnectionResponse:
    """An http.client response that closes its connection when it is closed."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        self._conn = conn
        self._resp = resp
        self.status = resp.status
        self.headers = resp.headers

    def read(self, n: Optional[int] = None) -> bytes:
        return self._resp.read(n)

    def readline(self) -> bytes:
        return self._resp.readline()

    def close(self) -> None:
        # shutdown first: it wakes a read blocked in another thread (an async client's worker),
        # which close alone does not.
        sock = getattr(self._conn, "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        try:
            self._resp.close()
        finally:
            self._conn.close()


def http_client_send(req: HTTPRequest) -> _ConnectionResponse:
    """The default ``send``: a new http.client connection for this one request."""
    u = urllib.parse.urlsplit(req.url)
    if u.scheme == "https":
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            u.hostname, u.port, timeout=req.timeout, context=ssl.create_default_context()
        )
    else:
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=req.timeout)
    target = (u.path or "/") + ("?" + u.query if u.query else "")
    try:
        conn.request(req.method, target, body=req.body, headers=dict(req.headers))
        resp = conn.getresponse()
    except BaseException:
        conn.close()
        raise
    return _ConnectionResponse(conn, resp)


class Transport:
    def __init__(
        self,
        base_url: str,
        token: str,
        timeout: float,
        max_retries: int,
        user_agent: Optional[str] = None,
        send: Optional[Send] = None,
    ) -> None:
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise errors.ConfigurationError(
                "base URL %r must be an http:// or https:// URL (set PANDASTACK_BASE_URL or pass base_url=)" % base_url
            )
        self.base_url = base_url.rstrip("/")
        self._origin = "%s://%s" % (u.scheme, u.netloc)
        self._prefix = u.path.rstrip("/")
        self._token = token
        self.timeout = timeout
        self.max_retries = max_retries
        self.user_agent = user_agent or "pandastack-python/%s" % __version__
        if send is not None and not callable(send):
            raise errors.ConfigurationError("send must be a callable taking an HTTPRequest, not %r" % (send,))
        self._send: Send = send or http_client_send
        self._sleep: Callable[[float], Any] = time.sleep  # the pause between retries (tests record it)

    def _headers(self, extra: Optional[Mapping[str, str]]) -> Dict[str, str]:
        h = {
            "X-Request-Id": new_request_id(),
            "Authorization": "Bearer " + self._token,
            "User-Agent": self.user_agent,
            "Accept": "application/json",
        }
        if extra:
            h.update(extra)
        return h

    def _target(self, path: str, params: Optional[Mapping[str, Any]]) -> str:
        q = _quote_params(params)
        return self._prefix + path + ("?" + q if q else "")

    # -- one attempt -----------------------------------------------------------------------------

    def _open(
        self,
        method: str,
        path: str,
        params: Optional[Mapping[str, Any]],
        body: Any,
        headers: Mapping[str, str],
        timeout: Optional[float],
    ) -> Any:
        url = self._origin + self._target(path, params)
        return self._send(HTTPRequest(method, url, dict(headers), body, timeout))

    @staticmethod
    def _raise_for(resp_status: int, headers: Any, raw: bytes, sent_id: Optional[str] = None) -> None:
        payload: Any = None
        try:
            payload = json.loads(raw.decode("utf-8")) if raw else None
        except (ValueError, UnicodeDecodeError):
            payload = raw.decode("utf-8", "replace")[:500]
        retry_after = None
        ra = headers.get("Retry-After")
        if ra:
            try:
                retry_after = float(ra)
            except ValueError:
                retry_after = None
        fallback = None
        if not isinstance(payload, dict):
            fallback = "HTTP %d from the API%s" % (
                resp_status,
                (": " + payload.strip()) if isinstance(payload, str) and payload.strip() else "",
            )
        raise errors.error_from_payload(
            resp_status, payload, headers.get("X-Request-Id") or sent_id, retry_after=retry_after, fallback_message=fallback
        )

    # -- public ----------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Optional[Mapping[str, Any]] = None,
        json_body: Any = None,
        data: Any = None,
        headers: Optional[Mapping[str, str]] = None,
        idempotent: bool = False,
        timeout: Optional[float] = -1.0,
    ) -> Response:
        """Send a request and return the whole answer; raise the typed error on non-2xx.

        ``timeout`` -1 means the client's default; ``None`` means no timeout.
        """
        if timeout is not None and timeout < 0:
            timeout = self.timeout
        h = self._headers(headers)
        body: Optional[bytes] = data
        if json_body is not None:
            body = json.dumps(json_body).encode("utf-8")
            h["Content-Type"] = "application/json"
        elif data is not None:
            h.setdefault("Content-Type", "application/octet-stream")
        attempt = 0
        while True:
            try:
                resp = self._open(method, path, params, body, h, timeout)
                try:
                    raw = resp.read()
                finally:
                    resp.close()
            except (socket.timeout, TimeoutError) as e:
                raise self._timeout_error(method, path, timeout, h) from e
            except (ConnectionError, http.client.HTTPException, OSError) as e:
                # Refused, reset, or closed before the answer: safe to repeat only if idempotent.
                if idempotent and attempt < self.max_retries:
                    attempt += 1
                    self._sleep(self._backoff(attempt, None))
                    continue
                raise self._connection_error(e, h) from e
            if 200 <= resp.status < 300:
                return Response(resp.status, resp.headers, raw)
            if idempotent and resp.status in RETRY_STATUSES and attempt < self.max_retries:
                attempt += 1
                self._sleep(self._backoff(attempt, resp.headers.get("Retry-After")))
                continue
            self._raise_for(resp.status, resp.headers, raw, h["X-Request-Id"])

    def get_json(self, path: str, *, params: Optional[Mapping[str, Any]] = None) -> Any:
        """GET ``path`` (retried: a read is idempotent) and return its JSON (``{}`` for an empty answer)."""
        return self.request("GET", path, params=params, idempotent=True).json() or {}

    def get_list(self, path: str, key: str, *, params: Optional[Mapping[str, Any]] = None) -> List[Any]:
        """GET ``path`` and return the list under ``key`` in its JSON (``[]`` when there is none)."""
        return self.get_json(path, params=params).get(key) or []

    # The errors of a request that got no answer; ``h`` holds its X-Request-Id.

    def _timeout_error(self, method: str, path: str, timeout: Optional[float], h: Dict[str, str]) -> errors.Timeout:
        return errors.Timeout(
            "no answer from %s within %s s (%s %s)" % (self.base_url, timeout, method, path),
            code="client_timeout",
            request_id=h["X-Request-Id"],
        )

    def _connection_error(self, e: BaseException, h: Dict[str, str]) -> errors.APIConnectionError:
        return errors.APIConnectionError(
            "cannot reach the PandaStack API at %s: %s" % (self.base_url, e or type(e).__name__),
            request_id=h["X-Request-Id"],
        )

    def stream_lines(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        data: Optional[bytes] = None,
        content_type: str = "application/json",
        accept: str = "application/x-ndjson",
        timeout: Optional[float] = None,
        params: Optional[Mapping[str, Any]] = None,
    ) -> "LineStream":
        """Send a request whose answer is NDJSON and return its lines as they arrive. The body is
        ``json_body`` encoded, or ``data`` as it is (with ``content_type``); a GET sends none.

        Never retried: streamed calls (exec, template builds) are not idempotent.
        """
        if method == "GET":
            h = self._headers({"Accept": accept})
            body = None
        else:
            h = self._headers({"Accept": accept, "Content-Type": content_type})
            body = data if data is not None else json.dumps(json_body).encode("utf-8")
        resp = self._open_checked(method, path, params, body, h, timeout)
        return LineStream(resp, self.base_url, timeout, h["X-Request-Id"])

    def stream_raw(self, method: str, path: str, *, params: Optional[Mapping[str, Any]] = None,
                   accept: str = "application/octet-stream", timeout: Optional[float] = None) -> Any:
        """Send a GET-like request (no body) and return the open response (``read(n)``,
        ``close()``) for a body too big to hold in memory. Never retried."""
        h = self._headers({"Accept": accept})
        return self._open_checked(method, path, params, None, h, timeout)

    def _open_checked(self, method: str, path: str, params: Optional[Mapping[str, Any]], body: Any,
                      h: Dict[str, str], timeout: Optional[float]) -> Any:
        """One attempt whose answer must be 2xx (else its typed error); the response stays open."""
        try:
            resp = self._open(method, path, params, body, h, timeout)
        except (socket.timeout, TimeoutError) as e:
            raise self._timeout_error(method, path, timeout, h) from e
        except (ConnectionError, http.client.HTTPException, OSError) as e:
            raise self._connection_error(e, h) from e
        if not 200 <= resp.status < 300:
            try:
                raw = resp.read()
            finally:
                resp.close()
            self._raise_for(resp.status, resp.headers, raw, h["X-Request-Id"])
        return resp

    @staticmethod
    def _backoff(attempt: int, retry_after: Optional[str]) -> float:
        if retry_after:
            try:
                return min(max(float(retry_after), 0.0), 30.0)
            except ValueError:
                pass
        # 0.25 s, 0.5 s, 1 s, ... capped at 8 s, with jitter so clients spread out.
        base = min(0.25 * (2 ** (attempt - 1)), 8.0)
        return base / 2 + random.random() * base / 2


class LineStream:
    """Decoded JSON lines of a streamed answer; closes the connection when done."""

    def __init__(
        self,
        resp: Any,
        base_url: str,
        timeout: Optional[float],
        sent_request_id: Optional[str] = None,
    ) -> None:
        self._resp = resp
        self._base_url = base_url
        self._timeout = timeout
        self.request_id: Optional[str] = resp.headers.get("X-Request-Id") or sent_request_id
        self.closed = False

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        try:
            while True:
                try:
                    line = self._resp.readline()
                except (socket.timeout, TimeoutError) as e:
                    raise errors.Timeout(
                        "the stream from %s was silent for %s s" % (self._base_url, self._timeout),
                        code="client_timeout",
                        request_id=self.request_id,
                    ) from e
                except (ConnectionError, http.client.HTTPException, OSError) as e:
                    raise errors.APIConnectionError(
                        "the stream from %s broke: %s" % (self._base_url, e or type(e).__name__),
                        request_id=self.request_id,
                    ) from e
                if not line:
                    return
                line = line.strip()
                if not line:
                    continue
                try:
                    obj = json.loads(line.decode("utf-8"))
                except (ValueError, UnicodeDecodeError) as e:
                    raise errors.PandaStackError(
                        "malformed line in the stream: %r" % line[:200],
                        code="bad_stream",
                        request_id=self.request_id,
                    ) from e
                if isinstance(obj, dict):
                    yield obj
        finally:
            self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._resp.close()


class LineIterator:
    """A :class:`LineStream` as an iterator whose ``close()`` may be called from another thread
    (it closes the connection, waking a blocked read)."""

    def __init__(self, lines: LineStream) -> None:
        self._lines = lines
        self._it = iter(lines)

    def __iter__(self) -> "LineIterator":
        return self

    def __next__(self) -> Dict[str, Any]:
        try:
            return next(self._it)
        except StopIteration:
            raise
        except Exception:
            if self._lines.closed:
                raise StopIteration
            raise

    def close(self) -> None:
        self._lines.close()
