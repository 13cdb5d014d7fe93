package hostagent

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// portThief, run as root in the guest (detached, so the exec that starts it returns), kills the
// guest agent and takes its virtio port before init restarts the agent, then holds it silently.
const portThief = `
import glob, os, time
time.sleep(1)
dev = None
for n in glob.glob('/sys/class/virtio-ports/*'):
    if open(n + '/name').read().strip() == 'pandastack.agent':
        dev = '/dev/' + os.path.basename(n)
for p in os.listdir('/proc'):
    if not p.isdigit() or p == '1':
        continue
    try:
        argv = open('/proc/%s/cmdline' % p, 'rb').read().split(b'\0')
    except OSError:
        continue
    if argv[0].endswith(b'pandastack-guest') and b'serve' in argv:
        os.kill(int(p), 9)
while True:
    try:
        fd = os.open(dev, os.O_RDWR)
        break
    except OSError:
        time.sleep(0.001)
time.sleep(3600)
`

// A process that kills the guest agent and holds its port must not make calls hang: the host
// answers guest_unreachable in bounded time, for the call in flight and for the re-dial after it.
func TestHijackedGuestPort(t *testing.T) {
	h := newHarness(t)
	sb := h.create()
	var r hostapi.ExecResult
	if code := h.call("PUT", "/v1/sandboxes/"+sb.ID+"/files?path=/tmp/thief.py", []byte(portThief), nil); code != 200 && code != 204 {
		t.Fatalf("upload: %d", code)
	}
	r = h.exec(sb.ID, map[string]any{"user": "root", "cmd": "setsid nohup python3 /tmp/thief.py >/dev/null 2>&1 < /dev/null & echo started"})
	if r.Stdout != "started\n" {
		t.Fatalf("start the thief: %+v", r)
	}

	// exec answers within guest.ReplyTimeout (30 s) and a few seconds: a hang fails here.
	execBounded := func() (int, apiErr) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), guest.ReplyTimeout+20*time.Second)
		defer cancel()
		body, _ := json.Marshal(map[string]any{"cmd": "echo ok", "timeout_seconds": 60})
		req, _ := http.NewRequestWithContext(ctx, "POST", h.srv.URL+"/v1/sandboxes/"+sb.ID+"/exec", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer test-token")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("exec did not answer: %v", err)
		}
		defer res.Body.Close()
		data, _ := io.ReadAll(res.Body)
		var e apiErr
		json.Unmarshal(data, &e)
		return res.StatusCode, e
	}
	// Until the thief has struck, execs work; the first one after it must fail cleanly.
	code, e := 200, apiErr{}
	for i := 0; i < 600 && code == 200; i++ {
		if code, e = execBounded(); code == 200 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if code != http.StatusBadGateway || e.Error.Code != "guest_unreachable" {
		t.Fatalf("exec with the port held: %d %+v, want 502 guest_unreachable", code, e)
	}
	t.Logf("in flight: %s", e.Error.Message)
	// The next call re-dials: the silent holder fails the handshake, again in bounded time.
	if code, e = execBounded(); code != http.StatusBadGateway || e.Error.Code != "guest_unreachable" {
		t.Fatalf("exec after the re-dial: %d %+v, want 502 guest_unreachable", code, e)
	}
	t.Logf("re-dial: %s", e.Error.Message)

	// The host agent itself is fine and the sandbox can be killed.
	var list struct {
		Sandboxes []hostapi.Sandbox `json:"sandboxes"`
	}
	if code := h.call("GET", "/v1/sandboxes", nil, &list); code != 200 {
		t.Fatalf("list: %d", code)
	}
	if code := h.call("DELETE", "/v1/sandboxes/"+sb.ID, nil, nil); code != 204 && code != 200 {
		t.Fatalf("kill: %d", code)
	}
}
