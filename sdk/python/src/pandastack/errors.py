"""Typed errors raised by the PandaStack SDK.

Every error the API answers with (``{"error": {"code", "message"}}``) becomes an instance of the
subclass of :class:`PandaStackError` named after its code. Each carries ``code``, ``message``,
``status`` (the HTTP status, ``None`` for errors that happened on this side of the wire) and
``request_id`` (the ``X-Request-Id`` of the answer, to quote when reporting a problem).
"""

from __future__ import annotations

import builtins
from typing import Any, Dict, Optional, Tuple, Type

__all__ = [
    "PandaStackError",
    "ConfigurationError",
    "APIConnectionError",
    "InvalidRequest",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "Conflict",
    "PayloadTooLarge",
    "RateLimited",
    "InternalError",
    "Unimplemented",
    "Capacity",
    "Timeout",
    "NoSpace",
    "error_from_payload",
]


class PandaStackError(Exception):
    """Base class of every error the SDK raises."""

    #: the API's error code, e.g. ``"not_found"``
    code: str
    #: the human-readable message (the API's own wording)
    message: str
    #: HTTP status of the answer; ``None`` when no answer arrived
    status: Optional[int]
    #: ``X-Request-Id`` of the answer, if any
    request_id: Optional[str]

    default_code = "error"

    def __init__(
        self,
        message: str,
        *,
        code: Optional[str] = None,
        status: Optional[int] = None,
        request_id: Optional[str] = None,
        body: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.status = status
        self.request_id = request_id
        self.body = body

    def __str__(self) -> str:
        parts = [self.message]
        extra = []
        if self.status is not None:
            extra.append("HTTP %d" % self.status)
        if self.code:
            extra.append(self.code)
        if self.request_id and self.request_id not in self.message:
            extra.append("request id %s" % self.request_id)
        if extra:
            parts.append("(" + ", ".join(extra) + ")")
        return " ".join(parts)

    def __repr__(self) -> str:
        return "%s(code=%r, status=%r, message=%r, request_id=%r)" % (
            type(self).__name__,
            self.code,
            self.status,
            self.message,
            self.request_id,
        )


class ConfigurationError(PandaStackError):
    """The client is missing something it needs (an API key, a usable base URL)."""

    default_code = "configuration"


class APIConnectionError(PandaStackError):
    """The API could not be reached, or the connection broke before an answer arrived."""

    default_code = "connection_error"


class InvalidRequest(PandaStackError, ValueError):
    """400 ``invalid_request``: the request was malformed or a value is out of range."""

    default_code = "invalid_request"


class Unauthorized(PandaStackError):
    """401 ``unauthorized``: the API key is missing, malformed, unknown or revoked."""

    default_code = "unauthorized"


class Forbidden(PandaStackError):
    """403 ``forbidden``: the key may not do this (e.g. a non-admin key making an admin key)."""

    default_code = "forbidden"


class NotFound(PandaStackError, LookupError):
    """404 ``not_found``: no such sandbox, snapshot, file or template (or another team's)."""

    default_code = "not_found"


class Conflict(PandaStackError):
    """409 ``conflict``: the resource is in the wrong state, e.g. exec on a killed sandbox."""

    default_code = "conflict"


class PayloadTooLarge(PandaStackError):
    """413 ``payload_too_large``: a request body or file upload is over the server's limit."""

    default_code = "payload_too_large"


class RateLimited(PandaStackError):
    """429 ``rate_limited``: too many requests. ``retry_after`` is the server's hint in seconds."""

    default_code = "rate_limited"

    def __init__(self, message: str, *, retry_after: Optional[float] = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after


class InternalError(PandaStackError):
    """500 ``internal``: the server failed; quote ``request_id`` when reporting it."""

    default_code = "internal"


class Unimplemented(PandaStackError, builtins.NotImplementedError):
    """501 ``not_implemented``: this server does not support the call (yet).

    Also an ordinary :class:`NotImplementedError`. Still reachable as ``NotImplemented`` (the
    API's name, see :func:`__getattr__`), but never bound under that name, so a star import does
    not shadow Python's ``NotImplemented`` constant.
    """

    default_code = "not_implemented"


def __getattr__(name: str) -> Any:
    # ``pandastack.errors.NotImplemented`` (and ``from ... import NotImplemented``) keep working
    # for code written before the rename; a module global of that name would shadow the builtin
    # constant in every module that star-imports this one.
    if name == "NotImplemented":
        return Unimplemented
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


class Capacity(PandaStackError):
    """503 ``capacity``: no host has room for the sandbox right now."""

    default_code = "capacity"


class Timeout(PandaStackError, builtins.TimeoutError):
    """504 ``timeout`` from the server, or ``client_timeout`` when no answer came in time."""

    default_code = "timeout"


class NoSpace(PandaStackError, OSError):
    """507 ``no_space``: the sandbox's disk is full."""

    default_code = "no_space"


class BuildFailed(PandaStackError):
    """``build_failed``: a template build started and failed (a step or the ready check failed,
    an unknown package, a disk too small). The message says which; it arrives at the end of the
    build's stream, so there is no HTTP status."""

    default_code = "build_failed"


# Each API error code: its class and the status it is answered with (None: build_failed only
# ends a build's stream, which has no status line of its own).
_CODES: Dict[str, Tuple[Type[PandaStackError], Optional[int]]] = {
    "build_failed": (BuildFailed, None),
    "invalid_request": (InvalidRequest, 400),
    "unauthorized": (Unauthorized, 401),
    "forbidden": (Forbidden, 403),
    "not_found": (NotFound, 404),
    "conflict": (Conflict, 409),
    "payload_too_large": (PayloadTooLarge, 413),
    "rate_limited": (RateLimited, 429),
    "internal": (InternalError, 500),
    "not_implemented": (Unimplemented, 501),
    "capacity": (Capacity, 503),
    "timeout": (Timeout, 504),
    "no_space": (NoSpace, 507),
}

_BY_CODE: Dict[str, Type[PandaStackError]] = {code: cls for code, (cls, _) in _CODES.items()}
_BY_STATUS: Dict[int, Type[PandaStackError]] = {status: cls for cls, status in _CODES.values()
                                                 if status is not None}
# The status each code is answered with, for errors that arrive inside a stream (no status line).
_STATUS_OF_CODE: Dict[str, int] = {code: status for code, (_, status) in _CODES.items() if status is not None}


def error_from_payload(
    status: Optional[int],
    payload: Any,
    request_id: Optional[str] = None,
    retry_after: Optional[float] = None,
    fallback_message: Optional[str] = None,
) -> PandaStackError:
    """Build the typed error for an API error answer.

    ``payload`` is the decoded JSON body (``{"error": {"code", "message"}}``) or anything else when
    the body was not in that shape (a proxy's HTML page, say); the class then follows the status.
    """
    code = None
    message = None
    if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
        err = payload["error"]
        code = err.get("code") if isinstance(err.get("code"), str) else None
        message = err.get("message") if isinstance(err.get("message"), str) else None
    cls = _BY_CODE.get(code or "")
    if cls is None and status is not None:
        cls = _BY_STATUS.get(status)
        if cls is None:
            cls = InternalError if status >= 500 else InvalidRequest if status >= 400 else PandaStackError
    if cls is None:
        cls = PandaStackError
    if status is None and code in _STATUS_OF_CODE:
        status = _STATUS_OF_CODE[code]
    if not message:
        message = fallback_message or ("HTTP %d" % status if status is not None else "request failed")
    kw: Dict[str, Any] = dict(code=code or cls.default_code, status=status, request_id=request_id, body=payload)
    if cls is RateLimited:
        return RateLimited(message, retry_after=retry_after, **kw)
    return cls(message, **kw)
