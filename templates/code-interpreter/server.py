#!/usr/bin/python3
"""pandastack-code-server: warm Jupyter kernels (and Node.js contexts) behind a line protocol.

The template starts this before the bake, so every sandbox restores with a kernel running and
numpy, pandas, matplotlib and scikit-learn already imported. Kernels are forked from a zygote: a
single-threaded process that imported the data stack and ipykernel once and forks a kernel per
context, so a new context is warm in about a second (its pages are shared copy-on-write) instead
of importing everything again (minutes under TCG). JavaScript contexts are Node.js processes
running pandastack-code-node (node-runner.js), which answers the same events.

The control plane reaches the server directly: one TCP connection per request to the guest's
port $PANDASTACK_CODE_PORT (default 49999) through the host agent's port path (the public port
proxy refuses this port). pandastack-code relays a request from inside the guest (the fallback
path, through the guest agent's exec, and the bake's ready check).

Protocol: the client sends one JSON line, the server answers JSON lines and closes.

  {"op":"run","context":"ID","language":"python|javascript","code":"...","timeout":300}
      -> {"stdout":"..."} {"stderr":"..."} {"result":{...}} {"error":{...}} ... {"end":{...}}
      (without a context: the language's default context, "default" or "default-javascript")
  {"op":"create","cwd":"/home/user","language":"python|javascript"}
                                       -> {"context":{"id","language","cwd"}}
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
import select
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
import uuid


PORT = int(os.environ.get("PANDASTACK_CODE_PORT", "49999"))
# Bytes of stdout+stderr one execution may return; the rest is dropped with a marker. The kernel
# cuts its own streams at the same limit (see WARM) so a 100 MB print never crosses ZeroMQ.
OUTPUT_LIMIT = int(os.environ.get("PANDASTACK_CODE_OUTPUT_LIMIT", str(1 << 20)))
MARKER = "\n[output truncated: more than %d bytes]\n" % OUTPUT_LIMIT
HOME = os.path.expanduser("~")
NODE_RUNNER = os.environ.get("PANDASTACK_CODE_NODE_RUNNER", "/usr/local/bin/pandastack-code-node")
DEFAULTS = {"python": "default", "javascript": "default-javascript"}
ALIASES = {"js": "javascript", "": "python", None: "python"}
# Modules every kernel imports before it is handed out (comma-separated).
IMPORTS = os.environ.get("PANDASTACK_CODE_IMPORTS", "numpy,pandas,matplotlib,matplotlib.pyplot,sklearn,sklearn.linear_model,"
                         "sklearn.model_selection,sklearn.preprocessing,sklearn.metrics")

# Run silently in every new kernel: import the data stack (into sys.modules, not the user's
# namespace), inline matplotlib, plain tracebacks, and the per-execution output cap.
WARM = r"""
def __pandastack_warm(limit, marker, imports):
    import importlib, sys
    for m in imports:
        importlib.import_module(m)
    ip = get_ipython()
    if "matplotlib" in sys.modules:
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
    # The display formatter's first DataFrame (the rich result of a typical first run_code).
    if "pandas" in sys.modules:
        ip.display_formatter.format(sys.modules["pandas"].DataFrame({"a": range(3)}).describe())

__pandastack_warm(%d, %r, %r)
del __pandastack_warm
""" % (OUTPUT_LIMIT, MARKER, [m for m in IMPORTS.split(",") if m])

# Run in every new kernel after WARM, each as an ordinary execution (not silent: the display hook,
# the execute_result and error messages and their decoding here all run) that is kept out of the
# history and the execution count: the kinds of result a first run_code gives, so what their first
# use initializes (lazily imported formatters, traceback machinery) is in the snapshot.
WARM_RUNS = [
    "__import__('pandas').DataFrame({'a': range(10)}).describe() if 'pandas' in __import__('sys').modules else None",
    "print('warm'); {'a': [1, 2]}",
    "1/0",
]

# Run silently after WARM_RUNS: no trace of them for the code (_, Out, the last exception), and
# what exists then (the imports, IPython, ipykernel, what the warm-ups initialized) stays for the
# kernel's life: out of the collector's sight, so no collection walks (and touches, page by page,
# in every restored VM) its hundreds of thousands of objects.
WARM_DONE = r"""
def __pandastack_done():
    import gc, sys
    get_ipython().displayhook.flush()
    for a in ("last_type", "last_value", "last_traceback", "last_exc"):
        sys.__dict__.pop(a, None)
    gc.collect()
    gc.freeze()

__pandastack_done()
del __pandastack_done
"""

# The default JavaScript context's execution before the snapshot: the runner's paths for a main
# result and a display() (V8 compiles a function on its first call; the snapshot keeps it).
JS_WARM = "display.html('<b>warm</b>'); [{a: 1, b: 'x'}, {a: 2, b: 'y'}].map((r) => r)"

DIED = ("the kernel of this context exited (os._exit, a crash, or out of memory); the context goes on "
        "in a fresh kernel: its variables are gone")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
MIME = {"text/plain": "text", "text/html": "html", "text/markdown": "markdown", "image/png": "png",
        "image/jpeg": "jpeg", "image/svg+xml": "svg", "application/json": "json",
        "text/latex": "latex", "application/javascript": "javascript"}


class Fail(Exception):
    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


class Zygote:
    """A child forked before this process starts threads or ZeroMQ: it imports the data stack and
    ipykernel, then forks one kernel per request (connection file, cwd) and answers its pid."""

    def __init__(self):
        import socket
        ours, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            ours.close()
            try:
                self._serve(theirs)
            finally:
                os._exit(0)
        theirs.close()
        self.io = ours.makefile("rwb", buffering=0)
        self.mu = threading.Lock()
        if self.io.readline().strip() != b"ready":
            raise RuntimeError("the zygote failed to start (see this log)")

    @staticmethod
    def _serve(sock):
        import importlib
        import ipykernel.kernelapp  # noqa: F401 - imported once, here, for every kernel
        for m in IMPORTS.split(","):
            if m:
                importlib.import_module(m)
        Zygote._exercise()
        import gc
        gc.collect()
        gc.freeze()  # shared by every kernel (copy-on-write), never walked by their collections
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the OS reaps exited kernels: no zombies
        io = sock.makefile("rwb", buffering=0)
        io.write(b"ready\n")
        for line in io:
            req = json.loads(line)
            pid = os.fork()
            if pid == 0:
                io.close()
                sock.close()
                Zygote._kernel(req["connection_file"], req["cwd"])
            io.write(b"%d\n" % pid)

    @staticmethod
    def _exercise():
        """Runs what a first execution typically runs (a DataFrame's describe and its text and
        HTML forms), so the lazy imports and caches it fills are in every kernel's memory before
        the snapshot. (A chart's first rendering is left out: it costs the bake minutes on a
        loaded TCG host, against the ready check's 15.)"""
        if "pandas" in sys.modules:
            import pandas as pd
            d = pd.DataFrame({"a": range(10), "b": [v * 0.5 for v in range(10)]}).describe()
            repr(d), d._repr_html_()

    @staticmethod
    def _kernel(connection_file, cwd):
        code = 1
        try:
            os.setsid()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            os.chdir(cwd)
            from ipykernel.kernelapp import IPKernelApp
            app = IPKernelApp.instance()
            # No history database: IPython would write every execution to SQLite from a thread
            # of its own (In/Out and _i<n> live in memory either way).
            app.initialize(["-f", connection_file, "--HistoryManager.enabled=False"])
            app.start()
            code = 0
        finally:
            os._exit(code)

    def spawn(self, connection_file, cwd):
        with self.mu:
            self.io.write(json.dumps({"connection_file": connection_file, "cwd": cwd}).encode() + b"\n")
            line = self.io.readline()
        if not line:
            raise Fail("unavailable", "the kernel zygote is gone")
        return int(line)


ZYGOTE = None
RUNTIME = os.path.join(HOME, ".local", "share", "pandastack-code")


class Kernel:
    """One warm ipykernel (forked from the zygote) and its client; one execution at a time."""

    def __init__(self, cwd):
        from jupyter_client.blocking import BlockingKernelClient
        from jupyter_client.connect import write_connection_file
        os.makedirs(RUNTIME, mode=0o700, exist_ok=True)
        self.cf = os.path.join(RUNTIME, "kernel-%s.json" % uuid.uuid4().hex)
        write_connection_file(self.cf, ip="127.0.0.1", key=uuid.uuid4().hex.encode())
        self.pid = ZYGOTE.spawn(self.cf, cwd)
        self.kc = BlockingKernelClient(connection_file=self.cf)
        self.kc.load_connection_file()
        # No heartbeat channel: on a loaded TCG host a starting kernel misses heartbeats and the
        # client would call it dead. Liveness is its pid; readiness its kernel_info reply.
        self.kc.start_channels(hb=False)
        deadline = time.monotonic() + 600
        while True:
            try:
                self.kc.wait_for_ready(timeout=5)
                break
            except RuntimeError as e:
                if not self.alive() or time.monotonic() > deadline:
                    self.shutdown()
                    raise Fail("unavailable", "the new kernel did not start: %s" % e)
        self.lock = threading.Lock()
        self.dead = False
        with self.lock:
            for ev in self.execute(WARM, 300, silent=True):
                if "error" in ev:
                    raise RuntimeError("warm-up failed: %s" % ev["error"])
            for code in WARM_RUNS:
                for _ in self.execute(code, 300, history=False):
                    pass
            for ev in self.execute(WARM_DONE, 300, silent=True):
                if "error" in ev:
                    raise RuntimeError("warm-up failed: %s" % ev["error"])

    def alive(self):
        try:
            os.kill(self.pid, 0)  # the zygote reaps its children: a dead kernel is gone, not a zombie
            return True
        except ProcessLookupError:
            return False

    def interrupt(self):
        try:
            os.kill(self.pid, signal.SIGINT)
        except ProcessLookupError:
            raise Fail("unavailable", "the context's kernel is gone")

    def shutdown(self):
        try:
            self.kc.stop_channels()
        except Exception:
            pass
        for f in (lambda: os.kill(self.pid, signal.SIGKILL), lambda: os.remove(self.cf)):
            try:
                f()
            except OSError:
                pass

    def execute(self, code, timeout, silent=False, history=True):
        """Yields events for one execution (the caller holds self.lock); one without history does
        not count."""
        start = time.monotonic()
        msg_id = self.kc.execute(code, silent=silent, store_history=history and not silent, allow_stdin=False)
        deadline = start + timeout
        timed_out = False
        sent = 0
        while True:
            left = deadline - time.monotonic()
            try:
                msg = self.kc.get_iopub_msg(timeout=min(max(left, 0.01), 1.0))
            except queue.Empty:
                if not self.alive():
                    self.dead = True
                    yield {"error": {"name": "KernelDied", "value": DIED, "traceback": ""}}
                    yield {"end": {"execution_count": None, "duration_ms": int((time.monotonic() - start) * 1000)}}
                    return
                if time.monotonic() < deadline:
                    continue
                if timed_out:  # the kernel ignores the interrupt: give up on this one
                    yield {"error": {"name": "TimeoutError", "value": "the kernel did not stop after an interrupt", "traceback": ""}}
                    break
                timed_out = True
                deadline = time.monotonic() + 30
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


class NodeKernel:
    """One JavaScript context: a Node.js process running pandastack-code-node, which answers a
    request line with the same events as a Python kernel; one execution at a time."""

    def __init__(self, cwd):
        ours, theirs = socket.socketpair()
        env = dict(os.environ, PANDASTACK_CODE_FD=str(theirs.fileno()),
                   PANDASTACK_CODE_OUTPUT_LIMIT=str(OUTPUT_LIMIT))
        try:
            self.proc = subprocess.Popen(["node", "--no-warnings", NODE_RUNNER], cwd=cwd, env=env, pass_fds=(theirs.fileno(),),
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as e:
            raise Fail("unavailable", "JavaScript contexts need Node.js and %s: %s" % (NODE_RUNNER, e))
        finally:
            theirs.close()
        self.sock, self.buf = ours, b""
        self.pid = self.proc.pid
        self.lock = threading.Lock()
        self.dead = False
        if self._line(time.monotonic() + 300) is None:
            self.shutdown()
            raise Fail("unavailable", "the JavaScript context did not start (see /var/log/pandastack-start.log)")

    def _line(self, deadline):
        """The runner's next line, or None when it is gone or deadline passed."""
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                return None
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                self.dead = True
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def alive(self):
        return self.proc.poll() is None

    def interrupt(self):
        try:
            os.kill(self.pid, signal.SIGINT)
        except ProcessLookupError:
            raise Fail("unavailable", "the context's runner is gone")

    def shutdown(self):
        for f in (self.sock.close, self.proc.kill, self.proc.wait):
            try:
                f()
            except OSError:
                pass

    def execute(self, code, timeout, silent=False):
        """Yields events for one execution (the caller holds self.lock); silent ones are not
        counted."""
        start = time.monotonic()
        self.sock.sendall(json.dumps({"code": code, "timeout": timeout, "silent": silent}).encode() + b"\n")
        # The runner stops the code at its timeout; past that and a grace it is stuck (a busy
        # loop in a callback): it is killed and the context goes on afresh.
        deadline = start + timeout + 30
        while True:
            ev = self._line(deadline)
            if ev is None:
                if not self.dead:
                    yield {"error": {"name": "TimeoutError", "value": "the JavaScript context did not stop after %g s; it was restarted" % timeout,
                                     "traceback": ""}}
                    self.dead = True
                    self.proc.kill()
                else:
                    yield {"error": {"name": "KernelDied", "value": DIED, "traceback": ""}}
                yield {"end": {"execution_count": None, "duration_ms": int((time.monotonic() - start) * 1000)}}
                return
            yield ev
            if "end" in ev:
                return


def new_kernel(language, cwd):
    return NodeKernel(cwd) if language == "javascript" else Kernel(cwd)


class Contexts:
    def __init__(self):
        self.mu = threading.Lock()
        self.items = {}  # id -> (info, Kernel)

    def create(self, cwd, cid=None, language="python"):
        cwd = cwd or HOME
        language = ALIASES.get(language, language)
        if language not in DEFAULTS:
            raise Fail("invalid", "language %r is not one of %s" % (language, ", ".join(DEFAULTS)))
        if not os.path.isdir(cwd):
            raise Fail("invalid", "cwd %s is not a directory in the sandbox" % cwd)
        k = new_kernel(language, cwd)
        info = {"id": cid or uuid.uuid4().hex[:16], "language": language, "cwd": cwd}
        with self.mu:
            self.items[info["id"]] = (info, k)
        return info

    def get(self, cid):
        with self.mu:
            item = self.items.get(cid or "default")
        if item is None:
            raise Fail("not_found", "no code context %s in this sandbox" % cid)
        return item

    def replace(self, cid, old):
        """Gives context cid a fresh kernel in place of old (dead); returns the new one."""
        old.shutdown()
        with self.mu:
            info, cur = self.items[cid]
        if cur is not old:
            return cur
        k = new_kernel(info["language"], info["cwd"])
        with self.mu:
            self.items[cid] = (info, k)
        return k

    def delete(self, cid):
        if cid in DEFAULTS.values():
            raise Fail("invalid", "a default context cannot be deleted")
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
                self.send({"context": CTX.create(req.get("cwd"), language=req.get("language"))})
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
        lang = req.get("language")
        cid = req.get("context") or DEFAULTS.get(ALIASES.get(lang, lang))
        if cid is None:
            raise Fail("invalid", "language %r is not one of %s" % (req.get("language"), ", ".join(DEFAULTS)))
        info, k = CTX.get(cid)
        with k.lock:
            if k.dead or not k.alive():  # it died idle (out of memory, say): say so, go on afresh
                k = CTX.replace(cid, k)
                self.send({"stderr": "[%s]\n" % DIED})
        with k.lock:
            gone = False
            for ev in k.execute(req.get("code", ""), float(req.get("timeout") or 300)):
                if gone:
                    continue
                try:
                    self.send(ev)
                except (BrokenPipeError, ConnectionResetError):
                    gone = True  # the caller left: stop the execution, drain the kernel
                    k.interrupt()
        if k.dead:
            CTX.replace(cid, k)


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    global ZYGOTE
    t = time.monotonic()
    ZYGOTE = Zygote()  # first: it forks, so before any thread or ZeroMQ context exists
    print("zygote ready after %.1f s" % (time.monotonic() - t), flush=True)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # interrupts are for kernels
    CTX.create(HOME, cid="default")
    print("default kernel warm after %.1f s" % (time.monotonic() - t), flush=True)
    try:
        CTX.create(HOME, cid=DEFAULTS["javascript"], language="javascript")
        k = CTX.get(DEFAULTS["javascript"])[1]
        with k.lock:  # one execution, so the snapshot holds the runner's code paths compiled
            for _ in k.execute(JS_WARM, 120, silent=True):
                pass
        print("default JavaScript context ready after %.1f s" % (time.monotonic() - t), flush=True)
    except Fail as e:
        print("no default JavaScript context: %s" % e, flush=True)
    # All addresses: the host agent's port path reaches the guest's network address; the public
    # port proxy refuses this port, so only the API's callers get here.
    srv = Server(("0.0.0.0", PORT), Handler)
    print("listening on port %d" % PORT, flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
