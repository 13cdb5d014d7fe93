# PandaStack function runner (python3). Started once per version at deploy, before the warm
# snapshot: it imports the handler, then waits for invocations on RUNNER_PORT. Every invocation
# runs in a VM restored from that snapshot, so the import is never paid again.
# argv: handler ("module.function"). The bundle is the working directory.
import asyncio, contextlib, io, json, os, socket, sys, time, traceback

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


def invoke(path, req):
    # /warmup (at deploy, before the snapshot): the whole path but a no-op for the handler,
    # so that the snapshot holds a runner whose code is already warm.
    target = (lambda event, context: None) if path == "/warmup" else fn
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
    return out


# The HTTP side is a minimal HTTP/1.1 server on a plain socket, one request per connection: its
# only client is the host agent's port proxy. Every invocation runs in a freshly restored VM whose
# emulator has translated none of the guest's code yet, so the less interpreter and library code
# a request walks through (http.server parses headers with the email package), the faster it is.
def read_request(conn):
    f = conn.makefile("rb")
    start = f.readline().split(b" ")
    if len(start) < 3:
        return None, None, None
    length, chunked = 0, False
    for line in iter(f.readline, b""):
        if not line.strip():
            break
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
    body = f.read(length) if not chunked else b""
    while chunked:
        n = int(f.readline().split(b";")[0], 16)
        if n == 0:
            break
        body += f.read(n)
        f.readline()
    return start[0].decode(), start[1].decode().split("?")[0], body


def serve(conn):
    conn.settimeout(60)
    method, path, body = read_request(conn)
    if method is None:
        return
    if method == "GET":
        out = {"ready": import_error is None, "error": import_error, "runner": STATS}
    else:
        out = invoke(path, json.loads(body or b"{}"))
    data = json.dumps(out).encode()
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: "
                 + str(len(data)).encode() + b"\r\n\r\n" + data)


srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", PORT))
srv.listen(64)
while True:
    conn, _ = srv.accept()
    try:
        serve(conn)
    except Exception:
        traceback.print_exc()
    finally:
        conn.close()
