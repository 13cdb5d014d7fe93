"""Directory watch and archives (docs/files.md): ``files.watch``, ``files.upload_dir`` and
``files.download_dir`` build on ``GET …/files/watch`` and ``GET``/``PUT …/files/archive``."""

from __future__ import annotations

import os
import posixpath
import tarfile
import tempfile
from typing import Any, Callable, Dict, Mapping, Optional, Union

from . import errors
from ._closing import Closing
from ._http import LineStream

__all__ = ["FileEvent", "WatchHandle", "pack_tree", "unpack_tree", "source_bytes"]


class FileEvent:
    """One change in a watched directory: ``type`` is ``create``, ``write``, ``remove``,
    ``rename`` (``from_path`` is where it was) or ``overflow`` (events were lost: the reader was
    too slow); ``path`` is absolute; ``dir`` says whether it is a directory."""

    __slots__ = ("type", "path", "from_path", "dir", "message", "raw")

    def __init__(self, d: Mapping[str, Any]) -> None:
        self.raw: Dict[str, Any] = dict(d)
        self.type: str = d.get("type", "")
        self.path: str = d.get("path", "")
        self.from_path: Optional[str] = d.get("from")
        self.dir: bool = bool(d.get("dir"))
        self.message: Optional[str] = d.get("message")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FileEvent) and other.raw == self.raw

    def __repr__(self) -> str:
        extra = ", from_path=%r" % self.from_path if self.from_path else ""
        return "FileEvent(type=%r, path=%r%s)" % (self.type, self.path, extra)


class WatchHandle(Closing):
    """An open watch: the watch is in place when you have it (changes from then on are told).
    Iterate it for :class:`FileEvent` (it ends only when closed or the stream breaks);
    ``close()`` (or a ``with`` block) ends it. Safe to close from another thread."""

    def __init__(self, lines: LineStream) -> None:
        self._lines = lines
        self._it = iter(lines)
        self.closed = False
        try:
            first = next(self._it, None)
        except BaseException:
            self.close()
            raise
        if first is None or first.get("type") != "ready":
            self.close()
            if first is not None and first.get("error"):
                raise self._error(first)
            raise errors.APIConnectionError("the watch ended before it was ready", request_id=lines.request_id)
        #: the watched directory, as the server resolved it
        self.path: str = first.get("path", "")

    def _error(self, d: Mapping[str, Any]) -> errors.PandaStackError:
        e = d.get("error") or {}
        return errors.error_from_payload(200, {"error": e}, self._lines.request_id)

    def __iter__(self) -> "WatchHandle":
        return self

    def __next__(self) -> FileEvent:
        if self.closed:
            raise StopIteration
        try:
            d = next(self._it)
        except StopIteration:
            self.close()
            raise
        except Exception:
            if self.closed:  # closed from another thread while reading
                raise StopIteration
            raise
        if d.get("type") == "error" or d.get("error"):
            self.close()
            raise self._error(d)
        return FileEvent(d)

    def close(self) -> None:
        self.closed = True
        self._lines.close()



def source_bytes(source: Union[bytes, str], pack: Callable[[str], bytes]) -> bytes:
    """What a deploy uploads for ``source``: bytes as they are; a path to a directory, packed with
    ``pack``; a path to a file, its contents as they are."""
    if not isinstance(source, str):
        return source
    if os.path.isdir(source):
        return pack(source)
    with open(source, "rb") as f:
        return f.read()


def pack_tree(local: str) -> Any:
    """A temporary file holding a .tar.gz of directory ``local``'s contents: directories, regular
    files and symlinks (as links, never followed); the caller closes it."""
    if not os.path.isdir(local):
        raise NotADirectoryError("%s is not a directory" % local)
    tmp = tempfile.TemporaryFile()
    try:
        with tarfile.open(fileobj=tmp, mode="w:gz") as tf:
            for root, dirs, files in os.walk(local):
                dirs.sort()
                for name in sorted(dirs) + sorted(files):
                    full = os.path.join(root, name)
                    if not (os.path.islink(full) or os.path.isdir(full) or os.path.isfile(full)):
                        continue  # devices, FIFOs, sockets
                    rel = os.path.relpath(full, local).replace(os.sep, "/")
                    info = tf.gettarinfo(full, rel)
                    info.uid = info.gid = 0
                    info.uname = info.gname = ""
                    if info.isreg():
                        with open(full, "rb") as f:
                            tf.addfile(info, f)
                    else:
                        tf.addfile(info)
        tmp.seek(0)
        return tmp
    except BaseException:
        tmp.close()
        raise


def _member_filter(member: tarfile.TarInfo, dest: str) -> Optional[tarfile.TarInfo]:
    """What the sandbox sends is not trusted: names that leave ``dest`` (absolute, ``..``, or
    through a symlink) are refused; only directories, files and symlinks are made."""
    name = member.name
    if name.startswith("/") or ".." in name.split("/"):
        raise errors.PandaStackError("archive entry %r leads out of %s" % (name, dest), code="bad_archive")
    if not (member.isdir() or member.isreg() or member.issym()):
        return None
    target = os.path.realpath(os.path.join(dest, posixpath.dirname(name)))
    if os.path.commonpath([target, os.path.realpath(dest)]) != os.path.realpath(dest):
        raise errors.PandaStackError("archive entry %r leads out of %s (through a symlink)" % (name, dest),
                                     code="bad_archive")
    if hasattr(tarfile, "tar_filter"):  # 3.8.17+/3.11.4+: the standard checks on top
        return tarfile.tar_filter(member, dest)
    return member


def unpack_tree(stream: Any, local: str) -> int:
    """Unpack a .tar.gz read from ``stream`` into directory ``local`` (made if missing); returns
    how many entries it held."""
    os.makedirs(local, exist_ok=True)
    count = 0
    with tarfile.open(fileobj=stream, mode="r|gz") as tf:
        for member in tf:
            count += 1
            m = _member_filter(member, local)
            if m is None:
                continue
            path = os.path.join(local, m.name)
            if (m.isreg() or m.issym()) and os.path.islink(path):
                os.unlink(path)  # replace a symlink, never write through it
            if hasattr(tarfile, "tar_filter"):
                tf.extract(m, local, filter="fully_trusted")  # m already passed the filter
            else:
                tf.extract(m, local)
    return count
