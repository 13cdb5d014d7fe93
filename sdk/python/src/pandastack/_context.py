"""What the resource classes (sandboxes, files, snapshots, templates, volumes) need from the
client that made them. :class:`~pandastack.PandaStack` satisfies it; the resource modules depend
on this protocol, not on the client module, so the client imports them and not the reverse."""

from __future__ import annotations

from typing import Any, Callable, Optional, Protocol

from ._http import Transport

__all__ = ["ClientContext", "new_client"]


class ClientContext(Protocol):
    """The transport every call goes through (it holds the base URL, key, ordinary timeout and
    retries) and the longer timeout of the calls that may restore or bake a VM."""

    #: sends the requests; its ``timeout`` bounds an ordinary call
    _http: Transport
    #: seconds create/fork/snapshot/hibernate/wake/volume calls wait (``None`` for no limit)
    create_timeout: Optional[float]


#: makes a client from keyword options (token, base_url…): ``PandaStack``, which client.py sets
#: here when it is imported (``import pandastack`` does), so the resource modules can make one
#: (``Sandbox.connect``) without importing the client module.
_client_factory: Optional[Callable[..., ClientContext]] = None


def new_client(**options: Any) -> ClientContext:
    if _client_factory is None:
        raise RuntimeError("import pandastack (the client module) first")
    return _client_factory(**options)
