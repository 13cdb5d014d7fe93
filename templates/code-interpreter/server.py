#!/usr/bin/python3
"""pandastack-code-server: warm Jupyter kernels behind a line protocol on guest loopback.

The template starts this before the bake, so every sandbox restores with a kernel running and
numpy, pandas, matplotlib and scikit-learn already imported (plus one spare warm kernel, handed
out by the next new context). The control plane reaches it through the guest agent's exec of
pandastack-code, which relays one request line in and the answer out.

Protocol (one TCP connection per request on 127.0.0.1:$PANDASTACK_CODE_PORT, default 49999):
the client sends one JSON line, the server answers JSON lines and closes.

  {"op":"run","context":"default","code":"...","timeout":300}
      -> {"stdout":"..."} {"stderr":"..."} {"result":{...}} {"error":{...}} ... {"end":{...}}
  {"op":"create","cwd":"/home/user"}   -> {"context":{"id","language","cwd"}}
  {"op":"list"}                        -> {"contexts":[...]}
  {"op":"delete","context":"ID"}       -> {"ok":true}
  {"op":"interrupt","context":"ID"}    -> {"ok":true}
  {"op":"ping"}                        -> {"ok":true}
  any failure                          -> {"fail":{"kind":"not_found|invalid|unavailable","message":"..."}}
"""

import json
import os
import queue
import re
import signal
import socketserver
import sys
import threading
import time
import uuid

from jupyter_client.manager import KernelManager

PORT = int(os.environ.get("PANDASTACK_CODE_PORT", "49999"))
# Bytes of stdout+stderr one execution may return; the rest is dropped with a marker. The kernel
# cuts its own streams at the same limit (see WARM) so a 100 MB print never crosses ZeroMQ.
OUTPUT_LIMIT = int(os.environ.get("PANDASTACK_CODE_OUTPUT_LIMIT", str(1 << 20)))
MARKER = "\n[output truncated: more than %d bytes]\n" % OUTPUT_LIMIT
HOME = os.path.expanduser("~")

# Run silently in every new kernel: import the data stack (into sys.modules, not the user's
# namespace), inline matplotlib, plain tracebacks, and the per-execution output cap.
WARM = r"""
def __pandastack_warm(limit, marker):
    import sys
    import numpy, pandas, matplotlib
    import matplotlib.pyplot
    import sklearn, sklearn.linear_model, sklearn.model_selection, sklearn.preprocessing, sklearn.metrics
    ip = get_ipython()
    ip.run_line_magic("matplotlib", "inline")
    ip.run_line_magic("colors", "NoColor")
    state = {"n": 0, "cut": False}

    class Capped:
        def __init__(self, s):
            self._s = s

        def write(self, data):
            if not isinstance(data, str):
                return self._s.write(data)
            room = limit - state["n"]
            state["n"] += len(data)
            if room >= len(data):
                return self._s.write(data)
            if room > 0:
                self._s.write(data[:room])
            if not state["cut"]:
                state["cut"] = True
                self._s.write(marker)
            return len(data)

        def __getattr__(self, name):
            return getattr(self._s, name)

    sys.stdout, sys.stderr = Capped(sys.stdout), Capped(sys.stderr)

    def reset(*_):
        state["n"], state["cut"] = 0, False

    ip.events.register("pre_run_cell", reset)

__pandastack_warm(%d, %r)
del __pandastack_warm
""" % (OUTPUT_LIMIT, MARKER)

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
MIME = {"text/plain": "text", "text/html": "html", "text/markdown": "markdown", "image/png": "png",
        "image/jpeg": "jpeg", "image/svg+xml": "svg", "application/json": "json",
        "text/latex": "latex", "application/javascript": "javascript"}


class Fail(Exception):
    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


class Kernel:
    """One warm ipykernel and its client; one execution at a time."""

    def __init__(self, cwd):
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(cwd=cwd)
        self.kc = self.km.blocking_client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=900)
        self.lock = threading.Lock()
        with self.lock:
            for ev in self.execute(WARM, 900, silent=True):
                if "error" in ev:
                    raise RuntimeError("warm-up failed: %s" % ev["error"])

    def interrupt(self):
        self.km.interrupt_kernel()

    def shutdown(self):
        try:
            self.kc.stop_channels()
            self.km.shutdown_kernel(now=True)
        except Exception:
            pass

    def execute(self, code, timeout, silent=False):
        """Yields events for one execution (the caller holds self.lock)."""
        start = time.monotonic()
        msg_id = self.kc.execute(code, silent=silent, store_history=not silent, allow_stdin=False)
        deadline = start + timeout
        timed_out = False
        sent = 0
        while True:
            wait = deadline - time.monotonic()
            if timed_out:
                wait = max(wait, 30)
            try:
                msg = self.kc.get_iopub_msg(timeout=max(wait, 0.01))
            except queue.Empty:
                if timed_out:  # the kernel ignores the interrupt: give up on this one
                    yield {"error": {"name": "TimeoutError", "value": "the kernel did not stop after an interrupt", "traceback": ""}}
                    break
                timed_out = True
                deadline = time.monotonic()
                self.interrupt()
                yield {"error": {"name": "TimeoutError", "value": "execution exceeded %g s and was interrupted" % timeout, "traceback": ""}}
                continue
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, c = msg["msg_type"], msg["content"]
            if kind == "stream":
                text = c.get("text", "")
                if sent >= OUTPUT_LIMIT + len(MARKER):
                    continue
                room = OUTPUT_LIMIT + len(MARKER) - sent
                if len(text) > room:
                    text = text[:room] + MARKER
                sent += len(text)
                yield {c.get("name", "stdout"): text}
            elif kind in ("execute_result", "display_data"):
                r = {v: c["data"][k] for k, v in MIME.items() if k in c.get("data", {})}
                if "json" in r and not isinstance(r["json"], str):
                    r["json"] = json.dumps(r["json"])
                r["is_main_result"] = kind == "execute_result"
                yield {"result": r}
            elif kind == "error" and not timed_out:
                tb = ANSI.sub("", "\n".join(c.get("traceback", [])))
                yield {"error": {"name": c.get("ename", ""), "value": c.get("evalue", ""), "traceback": tb}}
            elif kind == "status" and c.get("execution_state") == "idle":
                break
        count = None
        while True:  # the reply carries the execution count
            try:
                reply = self.kc.get_shell_msg(timeout=5)
            except queue.Empty:
                break
            if reply.get("parent_header", {}).get("msg_id") == msg_id:
                count = reply["content"].get("execution_count")
                break
        yield {"end": {"execution_count": count, "duration_ms": int((time.monotonic() - start) * 1000)}}


class Contexts:
    def __init__(self):
        self.mu = threading.Lock()
        self.items = {}  # id -> (info, Kernel)
        self.spare = None
        self.filling = threading.Lock()

    def fill(self):
        """Keeps one spare warm kernel (started in HOME; a context moves it to its cwd)."""
        with self.filling:
            if self.spare is None:
                k = Kernel(HOME)
                with self.mu:
                    self.spare = k

    def create(self, cwd, cid=None):
        cwd = cwd or HOME
        if not os.path.isdir(cwd):
            raise Fail("invalid", "cwd %s is not a directory in the sandbox" % cwd)
        with self.mu:
            k, self.spare = self.spare, None
        if k is None:
            k = Kernel(HOME)
        else:
            threading.Thread(target=self.fill, daemon=True).start()
        if cwd != HOME:
            with k.lock:
                for ev in k.execute("import os as __o; __o.chdir(%r); del __o" % cwd, 60, silent=True):
                    if "error" in ev:
                        raise Fail("invalid", "cwd %s: %s" % (cwd, ev["error"]["value"]))
        info = {"id": cid or uuid.uuid4().hex[:16], "language": "python", "cwd": cwd}
        with self.mu:
            self.items[info["id"]] = (info, k)
        return info

    def get(self, cid):
        with self.mu:
            item = self.items.get(cid or "default")
        if item is None:
            raise Fail("not_found", "no code context %s in this sandbox" % cid)
        return item

    def delete(self, cid):
        if cid == "default":
            raise Fail("invalid", "the default context cannot be deleted")
        info, k = self.get(cid)
        with self.mu:
            self.items.pop(cid, None)
        k.shutdown()


CTX = Contexts()


class Handler(socketserver.StreamRequestHandler):
    def send(self, obj):
        self.wfile.write(json.dumps(obj, ensure_ascii=True).encode() + b"\n")
        self.wfile.flush()

    def handle(self):
        try:
            req = json.loads(self.rfile.readline(64 << 20) or b"{}")
            op = req.get("op")
            if op == "run":
                self.run(req)
            elif op == "create":
                self.send({"context": CTX.create(req.get("cwd"))})
            elif op == "list":
                with CTX.mu:
                    self.send({"contexts": [i for i, _ in CTX.items.values()]})
            elif op == "delete":
                CTX.delete(req.get("context"))
                self.send({"ok": True})
            elif op == "interrupt":
                CTX.get(req.get("context"))[1].interrupt()
                self.send({"ok": True})
            elif op == "ping":
                self.send({"ok": True})
            else:
                raise Fail("invalid", "unknown op %r" % op)
        except Fail as e:
            self.send({"fail": {"kind": e.kind, "message": str(e)}})
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as e:  # noqa: BLE001 - the caller gets the reason
            self.send({"fail": {"kind": "internal", "message": "%s: %s" % (type(e).__name__, e)}})

    def run(self, req):
        _, k = CTX.get(req.get("context"))
        timeout = float(req.get("timeout") or 300)
        with k.lock:
            gone = False
            for ev in k.execute(req.get("code", ""), timeout):
                if gone:
                    continue
                try:
                    self.send(ev)
                except (BrokenPipeError, ConnectionResetError):
                    gone = True  # the caller left: stop the execution, drain the kernel
                    k.interrupt()


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # interrupts are for kernels
    t = time.monotonic()
    CTX.create(HOME, cid="default")
    print("default kernel warm after %.1f s" % (time.monotonic() - t), flush=True)
    if os.environ.get("PANDASTACK_CODE_SPARE", "1") == "1":
        CTX.fill()
        print("spare kernel warm after %.1f s" % (time.monotonic() - t), flush=True)
    srv = Server(("127.0.0.1", PORT), Handler)
    print("listening on 127.0.0.1:%d" % PORT, flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
