# PandaStack function runner (python3). Started once per version at deploy, before the warm
# snapshot: it imports the handler, then waits for invocations on RUNNER_PORT. Every invocation
# runs in a VM restored from that snapshot, so the import is never paid again.
# argv: handler ("module.function"). The bundle is the working directory.
import asyncio, contextlib, io, json, os, sys, time, traceback
from http.server import BaseHTTPRequestHandler, HTTPServer

PORT = int(os.environ.get("PANDASTACK_RUNNER_PORT", "7411"))
MAX_LOGS = 64 << 10
HANDLER = sys.argv[1]
sys.path.insert(0, os.getcwd())

STATS = {"imports": 0, "imported_at": 0.0, "pid": os.getpid(), "invocations": 0}
import_error = None
fn = None
try:
    module_name, _, func_name = HANDLER.rpartition(".")
    import importlib
    mod = importlib.import_module(module_name)
    STATS["imports"] += 1
    fn = getattr(mod, func_name, None)
    if not callable(fn):
        raise AttributeError("module %r has no function %r" % (module_name, func_name))
except BaseException as e:  # the deploy reports it
    import_error = {"type": type(e).__name__, "message": str(e), "traceback": traceback.format_exc()}
STATS["imported_at"] = time.time()


class Context:
    def __init__(self, c):
        self.function_id = c.get("function_id", "")
        self.function_name = c.get("function_name", "")
        self.version = c.get("version", 0)
        self.run_id = c.get("run_id", "")
        self.deadline = time.time() + c.get("timeout_seconds", 0)

    def remaining_time_ms(self):
        return max(0, int((self.deadline - time.time()) * 1000))


def tail(s):
    return s[-MAX_LOGS:] if len(s) > MAX_LOGS else s


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, obj):
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.answer({"ready": import_error is None, "error": import_error, "runner": STATS})

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        # /warmup (at deploy, before the snapshot): the whole path but a no-op for the handler,
        # so that the snapshot holds a runner whose code is already warm.
        target = (lambda event, context: None) if self.path == "/warmup" else fn
        if target is fn:
            STATS["invocations"] += 1
        os.environ.update(req.get("secrets") or {})
        logs = io.StringIO()
        out = {"result": None, "error": None}
        start = time.monotonic()
        try:
            with contextlib.redirect_stdout(logs), contextlib.redirect_stderr(logs):
                res = target(req.get("payload"), Context(req.get("context") or {}))
                if asyncio.iscoroutine(res):
                    res = asyncio.run(res)
            try:
                json.dumps(res)
            except (TypeError, ValueError) as e:
                raise TypeError("the handler's return value is not JSON: %s" % e)
            out["result"] = res
        except BaseException as e:
            tb = e.__traceback__
            while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
                tb = tb.tb_next  # the user's frames only
            out["error"] = {"type": type(e).__name__, "message": str(e),
                            "traceback": "".join(traceback.format_exception(type(e), e, tb))}
        out["duration_ms"] = int((time.monotonic() - start) * 1000)
        out["logs"] = tail(logs.getvalue())
        out["runner"] = STATS
        self.answer(out)


HTTPServer(("0.0.0.0", PORT), Handler).serve_forever()
