"""The base of the objects that hold something to release (a stream, a terminal, the client)."""

from __future__ import annotations

from typing import Any, TypeVar

_C = TypeVar("_C", bound="Closing")


class Closing:
    """``with obj:`` calls ``obj.close()`` when the block ends, however it ends."""

    __slots__ = ()

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
