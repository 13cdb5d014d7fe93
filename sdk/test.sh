#!/usr/bin/env bash
# Runs both SDKs' tests, the stock E2B SDKs' (sdk/e2b-test, docs/e2b.md) and the official MCP SDK's
# (sdk/mcp-test, docs/mcp.md) against one real PandaStack:
#   builds bin/ (make build), starts `bin/pandastack up` on a free loopback port with a throwaway data
#   dir (shared image cache), runs the Python tests (Debian python3, unittest) and the TypeScript
#   tests (npm ci, build, node --test on the build), then the E2B compatibility tests (npm ci of the
#   pinned e2b and @e2b/code-interpreter, node --test against up's --e2b-addr with E2B keys of two
#   teams), then kills the server and removes everything it
#   made, on success, failure or interrupt alike.
# The last line of output is always `N passed, N failed` (both SDKs together); the exit status is
# non-zero if anything failed.
# With SDK_TEST_OFFLINE=1 it runs only the offline unit tests (python/tests/test_offline.py and
# typescript/test/offline.test.mjs, answers scripted through the SDKs' injected transport): no
# build, no server, no root. A full run includes them too.
#
# Environment:
#   PANDASTACK_IMAGE_CACHE  image cache shared between runs (default /var/tmp/pandastack-images)
#   PYTHON                  Python interpreter (default /usr/bin/python3, else python3)
#   SDK_TEST_ONLY           "python", "typescript", "e2b" or "mcp" to run one SDK only
#   SDK_TEST_OFFLINE=1      only the offline unit tests (no server)
#   SDK_TEST_SUITE=NAME     only one suite of each SDK: python/tests/test_NAME.py, typescript/test/NAME.test.mjs
#   SDK_TEST_KEEP_LOG=1     keep the server log (its path is printed)
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

ONLY="${SDK_TEST_ONLY:-}"
SUITE="${SDK_TEST_SUITE:-}"
if ! [[ "$SUITE" =~ ^[a-z_]*$ ]]; then echo "SDK_TEST_SUITE must be a suite name such as processes"; exit 2; fi
OFFLINE="${SDK_TEST_OFFLINE:-}"
case "$OFFLINE" in "" | 0) OFFLINE="" ;; 1) ;; *) echo "SDK_TEST_OFFLINE must be 1 or unset"; exit 2 ;; esac
case "$ONLY" in "" | python | typescript | e2b | mcp) ;; *) echo "SDK_TEST_ONLY must be python, typescript, e2b or mcp"; exit 2 ;; esac

PASSED=0
FAILED=0
SERVER_PID=""
CHILD=""
DATA=""
WORK="$(mktemp -d /tmp/pandastack-sdk-test-XXXXXX)"
LOG="$WORK/server.log"
IMAGE_CACHE="${PANDASTACK_IMAGE_CACHE:-/var/tmp/pandastack-images}"
if [ -n "${PYTHON:-}" ]; then :; elif [ -x /usr/bin/python3 ]; then PYTHON=/usr/bin/python3; else PYTHON=python3; fi

say() { echo "sdk/test.sh: $*"; }

# Run a step in the background and wait for it: a trapped signal interrupts `wait` at once
# (a foreground child would delay the trap until it ends, or swallow it).
run() {
  "$@" &
  CHILD=$!
  wait "$CHILD"
  local rc=$?
  CHILD=""
  return $rc
}

setup_failed() {
  say "$*"
  FAILED=$((FAILED + 1))
  exit 2
}

# -- cleanup ----------------------------------------------------------------------------------

kill_sandboxes() {
  # `pandastack up` leaves sandboxes running when it stops (a restart re-adopts them): kill them
  # through the API first.
  [ -n "${BASE_URL:-}" ] || return 0
  "$PYTHON" - "$BASE_URL" "$KEY" <<'PY' || true
import json, sys, urllib.request
base, key = sys.argv[1], sys.argv[2]
h = {"Authorization": "Bearer " + key}
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never a proxy
def call(method, path):
    req = urllib.request.Request(base + path, method=method, headers=h)
    with opener.open(req, timeout=30) as r:
        return json.loads(r.read() or b"{}")
try:
    cursor = ""
    ids = []
    while True:
        d = call("GET", "/v1/sandboxes?state=running,hibernated,error,lost&limit=1000" + ("&cursor=" + cursor if cursor else ""))
        ids += [s["id"] for s in d.get("sandboxes", [])]
        cursor = d.get("next_cursor") or ""
        if not cursor:
            break
    for i in ids:
        try:
            call("DELETE", "/v1/sandboxes/" + i)
        except Exception as e:
            print("kill %s: %s" % (i, e))
    print("killed %d leftover sandbox(es)" % len(ids))
except Exception as e:
    print("listing sandboxes failed: %s" % e)
PY
}

cleanup() {
  if [ -n "$CHILD" ] && kill -0 "$CHILD" 2>/dev/null; then
    kill -TERM "$CHILD" 2>/dev/null   # `timeout` passes it on to the test runner
    wait "$CHILD" 2>/dev/null
  fi
  kill_sandboxes
  # The VMMs are the server's child processes; note their ids before it goes away.
  local kids=""
  if [ -n "$SERVER_PID" ]; then kids="$(pgrep -P "$SERVER_PID" 2>/dev/null | tr '\n' ' ')"; fi
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$SERVER_PID" 2>/dev/null && kill -KILL "$SERVER_PID" 2>/dev/null
    wait "$SERVER_PID" 2>/dev/null
  fi
  if [ -n "$DATA" ] && [ -d "$DATA" ]; then
    # Any of those children still alive (a VMM whose sandbox the API could not kill): end it by
    # id, after checking the id still names a process of this data dir.
    for p in $kids; do
      if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF -- "$DATA/"; then kill -KILL "$p" 2>/dev/null; fi
    done
    sleep 0.5
    # Unmount what is mounted under the data dir (deepest first), then detach only the loop
    # devices backed by files in it.
    awk -v d="$DATA/" 'index($2, d) == 1 { print $2 }' /proc/mounts | sort -r | while read -r m; do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || echo "cannot unmount $m"
    done
    losetup -nO NAME,BACK-FILE 2>/dev/null | awk -v d="$DATA/" 'index($2, d) == 1 { print $1 }' | while read -r dev; do
      losetup -d "$dev" 2>/dev/null || echo "cannot detach $dev"
    done
    rm -rf "$DATA" 2>/dev/null || echo "cannot remove $DATA"
  fi
}

finish() {
  local rc=$?
  trap - EXIT INT TERM
  if [ "$rc" -ne 0 ] && [ "$FAILED" -eq 0 ]; then
    say "stopped early (exit $rc)"
    FAILED=1
  fi
  cleanup >>"$LOG" 2>&1
  if [ "${SDK_TEST_KEEP_LOG:-}" = 1 ] || [ "$rc" -ne 0 ] || [ "$FAILED" -gt 0 ]; then
    say "server log kept: $LOG"
  else
    rm -rf "$WORK"
  fi
  echo "$PASSED passed, $FAILED failed"
  if [ "$FAILED" -gt 0 ] || [ "$rc" -ne 0 ]; then exit 1; fi
  exit 0
}
trap finish EXIT
trap 'exit 130' INT TERM

# -- server -----------------------------------------------------------------------------------

# Sets KEY, BASE_URL, DATA, SERVER_PID (globals: cleanup uses them) and exports the client env.
# (Body not indented: its heredocs end at column 0.)
start_server() {
# Always (incremental, seconds): stale binaries would test old code.
say "building bin/"
run make build || setup_failed "make build failed"

KEY="pds_$(LC_ALL=C tr -dc 'A-Za-z0-9' </dev/urandom | head -c 32)"
PORT="$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
E2B_PORT="$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
DATA="$(mktemp -d /var/tmp/ps-sdk-XXXX)"
BASE_URL="http://127.0.0.1:$PORT"
mkdir -p "$IMAGE_CACHE"

say "starting pandastack up on $BASE_URL (data dir $DATA, image cache $IMAGE_CACHE)"
# Its own session: a Ctrl-C meant for this script must not reach the server and its VMMs before
# the cleanup has killed the sandboxes through the API.
# Sandbox network: a /20 no route of this host uses, so a `pandastack up` already running here
# (10.200.0.0/16 by default) keeps its slots.
for _ in $(seq 1 50); do
  NET="10.$((201 + RANDOM % 50)).$(( (RANDOM % 16) * 16 ))"
  ip -4 route | grep -q "^${NET%.*}\." || break
done
PANDASTACK_API_KEY="$KEY" setsid bin/pandastack up --data-dir "$DATA" --addr "127.0.0.1:$PORT" --e2b-addr "127.0.0.1:$E2B_PORT" \
  --image-cache "$IMAGE_CACHE" --network-cidr "$NET.0/20" >>"$LOG" 2>&1 &
SERVER_PID=$!

ready=""
for _ in $(seq 1 600); do
  kill -0 "$SERVER_PID" 2>/dev/null || break
  if "$PYTHON" - "$BASE_URL" <<'PY' 2>/dev/null; then ready=1; break; fi
import json, sys, urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
with opener.open(sys.argv[1] + "/healthz", timeout=5) as r:
    sys.exit(0 if json.load(r).get("hosts_up", 0) >= 1 else 1)
PY
  sleep 0.5
done
if [ -z "$ready" ]; then
  tail -n 40 "$LOG"
  setup_failed "pandastack up did not become healthy (log: $LOG)"
fi
say "server ready"

export PANDASTACK_BASE_URL="$BASE_URL" PANDASTACK_API_KEY="$KEY"
unset PANDASTACK_TOKEN
}

if [ -z "$OFFLINE" ]; then
  start_server
else
  say "offline unit tests only: no server"
fi

# node_suite DIR NAME FILES [NODE_FLAGS…]: node --test of FILES (globs, relative to DIR) in DIR, the
# spec report on stdout and the TAP one in $WORK/NAME.tap, whose counts go to PASSED and FAILED.
node_suite() {
  local dir="$1" name="$2" files="$3" tap="$WORK/$2.tap"
  shift 3
  run bash -c 'cd "$1" && tap="$2" files="$3" && shift 3 && exec timeout 3600 node --test "$@" \
    --test-reporter=spec --test-reporter-destination=stdout \
    --test-reporter=tap --test-reporter-destination="$tap" $files' _ "$dir" "$tap" "$files" "$@"
  if grep -q '^# pass ' "$tap" 2>/dev/null; then
    p=$(awk '/^# pass /{print $3}' "$tap")
    f=$(awk '/^# (fail|cancelled) /{s += $3} END {print s + 0}' "$tap")
    PASSED=$((PASSED + p)); FAILED=$((FAILED + f))
  else
    say "the $name tests did not finish"; FAILED=$((FAILED + 1))
  fi
}

# -- Python -----------------------------------------------------------------------------------

if [ -z "$ONLY" ] || [ "$ONLY" = python ]; then
  say "Python SDK tests ($("$PYTHON" --version 2>&1))"
  # (offline: only test_offline; a full run discovers every tests/test_*.py, that one included)
  run timeout 3600 "$PYTHON" sdk/python/tests/run.py --summary "$WORK/python.sum" ${OFFLINE:+test_offline} ${SUITE:+test_$SUITE}
  if [ -s "$WORK/python.sum" ]; then
    read -r p f <"$WORK/python.sum"
    PASSED=$((PASSED + p)); FAILED=$((FAILED + f))
  else
    say "the Python tests did not finish"; FAILED=$((FAILED + 1))
  fi
fi

# -- TypeScript -------------------------------------------------------------------------------

if [ -z "$ONLY" ] || [ "$ONLY" = typescript ]; then
  say "TypeScript SDK tests (node $(node --version 2>/dev/null))"
  # cookbook/ (run by test/cookbook.test.mjs) links this package as @pandastack/sdk.
  if run bash -c 'cd sdk/typescript && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build && cd ../../cookbook && npm install --no-audit --no-fund --loglevel=error'; then
    if [ -n "$OFFLINE" ]; then files="test/offline.test.mjs"; elif [ -n "$SUITE" ]; then files="test/$SUITE.test.mjs"; else files="test/*.test.mjs test/*.test.cjs"; fi
    node_suite sdk/typescript TypeScript "$files"
  else
    say "npm ci or the TypeScript build failed"; FAILED=$((FAILED + 1))
  fi
fi

# -- E2B compatibility (the stock npm SDKs against the facade) --------------------------------

if [ -z "$OFFLINE" ] && { [ -z "$ONLY" ] || [ "$ONLY" = e2b ]; } && { [ -z "$SUITE" ] || [ -f "sdk/e2b-test/test/$SUITE.test.mjs" ]; }; then
  say "E2B compatibility tests (e2b and @e2b/code-interpreter from npm, node $(node --version 2>/dev/null))"
  # An E2B key of the default team, and one of a second team (its sandboxes must stay invisible).
  E2B_KEY="$(bin/pandastack keys create --e2b --name e2b-test 2>>"$LOG")"
  OTHER_KEY="$(bin/pandastack teams create "e2b-other-$$" 2>>"$LOG")"
  E2B_OTHER="$(PANDASTACK_API_KEY="$OTHER_KEY" bin/pandastack keys create --e2b --name e2b-test 2>>"$LOG")"
  if [ -z "$E2B_KEY" ] || [ -z "$E2B_OTHER" ]; then
    say "could not make the E2B keys"; FAILED=$((FAILED + 1))
  elif run bash -c 'cd sdk/e2b-test && npm ci --no-audit --no-fund --loglevel=error'; then
    # A first create of code-interpreter-v1 waits for the template's bake, which on a loaded TCG
    # host outlasts the SDK's 300 s header timeout: wait for up's background bake first.
    for _ in $(seq 1 900); do
      bin/pandastack template list --json 2>>"$LOG" | "$PYTHON" -c 'import json, sys
sys.exit(0 if any(t["name"] == "code-interpreter" and t.get("baked") for t in json.load(sys.stdin)) else 1)' && break
      sleep 2
    done
    if [ -n "$SUITE" ]; then files="test/$SUITE.test.mjs"; else files="test/*.test.mjs"; fi
    # Only loopback: the facade for both planes, a domain that resolves nowhere for the rest.
    export E2B_API_URL="http://127.0.0.1:$E2B_PORT" E2B_SANDBOX_URL="http://127.0.0.1:$E2B_PORT" E2B_DOMAIN=e2b.invalid \
      E2B_API_KEY="$E2B_KEY" E2B_OTHER_API_KEY="$E2B_OTHER" E2B_TEST_RUN="$$"
    node_suite sdk/e2b-test E2B "$files" --test-concurrency=3
  else
    say "npm ci of sdk/e2b-test failed"; FAILED=$((FAILED + 1))
  fi
fi

# -- MCP (the official MCP TypeScript SDK as a client, both transports) -------------------------

if [ -z "$OFFLINE" ] && { [ -z "$ONLY" ] || [ "$ONLY" = mcp ]; } && { [ -z "$SUITE" ] || [ -f "sdk/mcp-test/test/$SUITE.test.mjs" ]; }; then
  say "MCP tests (@modelcontextprotocol/sdk from npm against /mcp and \`pandastack mcp\`, node $(node --version 2>/dev/null))"
  if run bash -c 'cd sdk/mcp-test && npm ci --no-audit --no-fund --loglevel=error'; then
    if [ -n "$SUITE" ]; then files="test/$SUITE.test.mjs"; else files="test/*.test.mjs"; fi
    export PANDASTACK_BIN="$ROOT/bin/pandastack"
    node_suite sdk/mcp-test MCP "$files"
  else
    say "npm ci of sdk/mcp-test failed"; FAILED=$((FAILED + 1))
  fi
fi
