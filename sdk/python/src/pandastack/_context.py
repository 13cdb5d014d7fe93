"""What the resource classes (sandboxes, files, snapshots, templates, volumes) need from the
client that made them. :class:`~pandastack.PandaStack` satisfies it; the resource modules depend
on this protocol, not on the client module, so the client imports them and not the reverse."""

from __future__ import annotations

from typing import Optional, Protocol

from ._http import Transport

__all__ = ["ClientContext"]


class ClientContext(Protocol):
    """The transport every call goes through (it holds the base URL, key, ordinary timeout and
    retries) and the longer timeout of the calls that may restore or bake a VM."""

    #: sends the requests; its ``timeout`` bounds an ordinary call
    _http: Transport
    #: seconds create/fork/snapshot/hibernate/wake/volume calls wait (``None`` for no limit)
    create_timeout: Optional[float]
