"""Code interpreter: results of ``Sandbox.run_code`` (sandboxes of the code-interpreter template)."""

from __future__ import annotations

import base64
import json as _json
from typing import Any, Dict, List, Mapping, Optional

__all__ = ["Result", "Logs", "ExecutionError", "Execution", "CodeContext"]


class Result:
    """One rich result: the value of the code's last expression (``is_main_result``) or
    something it displayed, such as a matplotlib chart.

    ``text``, ``html``, ``markdown``, ``svg``, ``latex`` and ``javascript`` are str (or None);
    ``png`` and ``jpeg`` are the image's bytes; ``json`` is the decoded JSON value.
    """

    def __init__(self, d: Mapping[str, Any]) -> None:
        self.raw: Dict[str, Any] = dict(d)
        self.text: Optional[str] = d.get("text")
        self.html: Optional[str] = d.get("html")
        self.markdown: Optional[str] = d.get("markdown")
        self.svg: Optional[str] = d.get("svg")
        self.latex: Optional[str] = d.get("latex")
        self.javascript: Optional[str] = d.get("javascript")
        self.png: Optional[bytes] = base64.b64decode(d["png"]) if d.get("png") else None
        self.jpeg: Optional[bytes] = base64.b64decode(d["jpeg"]) if d.get("jpeg") else None
        self.json: Any = _json.loads(d["json"]) if d.get("json") else None
        self.is_main_result: bool = bool(d.get("is_main_result", False))

    def formats(self) -> List[str]:
        """The formats this result has (``["text", "html"]`` for a DataFrame)."""
        return [k for k in ("text", "html", "markdown", "png", "jpeg", "svg", "json", "latex", "javascript") if self.raw.get(k)]

    def __repr__(self) -> str:
        return "Result(%s%s)" % (", ".join(self.formats()), ", main" if self.is_main_result else "")


class Logs:
    """What the code printed, in the chunks it was printed in."""

    def __init__(self, stdout: Optional[List[str]] = None, stderr: Optional[List[str]] = None) -> None:
        self.stdout: List[str] = stdout or []
        self.stderr: List[str] = stderr or []

    def __repr__(self) -> str:
        return "Logs(stdout=%r, stderr=%r)" % (self.stdout, self.stderr)


class ExecutionError:
    """An exception the code raised; the context lives on."""

    def __init__(self, d: Mapping[str, Any]) -> None:
        self.name: str = d.get("name", "")
        self.value: str = d.get("value", "")
        self.traceback: str = d.get("traceback", "")

    def __repr__(self) -> str:
        return "ExecutionError(%s: %s)" % (self.name, self.value)


class Execution:
    """A finished ``run_code``: ``results``, ``logs``, ``error`` (None unless the code raised),
    ``execution_count`` and ``duration_ms``."""

    def __init__(self) -> None:
        self.results: List[Result] = []
        self.logs = Logs()
        self.error: Optional[ExecutionError] = None
        self.execution_count: Optional[int] = None
        self.duration_ms: Optional[int] = None

    @property
    def text(self) -> Optional[str]:
        """The main result's text (the value of the last expression), if any."""
        for r in self.results:
            if r.is_main_result:
                return r.text
        return None

    @classmethod
    def from_api(cls, d: Mapping[str, Any]) -> "Execution":
        x = cls()
        x.results = [Result(r) for r in d.get("results") or []]
        logs = d.get("logs") or {}
        x.logs = Logs(list(logs.get("stdout") or []), list(logs.get("stderr") or []))
        x.error = ExecutionError(d["error"]) if d.get("error") else None
        x.execution_count = d.get("execution_count")
        x.duration_ms = d.get("duration_ms")
        return x

    def __repr__(self) -> str:
        return "Execution(results=%r, logs=%r, error=%r)" % (self.results, self.logs, self.error)


class CodeContext:
    """A kernel with its own variables in a sandbox (``Sandbox.create_code_context``)."""

    def __init__(self, d: Mapping[str, Any]) -> None:
        self.id: str = d.get("id", "")
        self.language: str = d.get("language", "python")
        self.cwd: str = d.get("cwd", "")

    def __repr__(self) -> str:
        return "CodeContext(id=%r, language=%r, cwd=%r)" % (self.id, self.language, self.cwd)
