package api

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/pandastack/pandastack/internal/testenv"
)

// proxyGet sends a request for host through the server, with the app's own Authorization header.
func (e *env) proxyDo(method, host, path, body string) (int, http.Header, string) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.hs.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Host = host
	req.Header.Set("Authorization", "Bearer app-secret")
	res, b := testenv.Send(e.t, req)
	return res.StatusCode, res.Header, string(b)
}

// The control plane half of the port proxy: Host routing, what reaches the agent, and the error
// pages. (The agent half, into a real guest with WebSockets, is hostagent's TestNetworking.)
func TestPortProxy(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ProxyDomain = "sandboxes.example.test" })
	sb := e.create(e.admin, map[string]any{"template": "base"})

	host := "8000-" + sb.ID + ".sandboxes.example.test:443"
	code, _, body := e.proxyDo("POST", host, "/api/items?x=1", "payload")
	if code != 200 {
		t.Fatalf("proxied request: %d %s", code, body)
	}
	var got map[string]string
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("agent answer %q: %v", body, err)
	}
	want := map[string]string{"method": "POST", "port": "8000", "path": "/api/items", "query": "x=1",
		"host": host, "authorization": "Bearer app-secret", "body": "payload"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("forwarded %s = %q, want %q", k, got[k], v)
		}
	}

	for _, c := range []struct {
		name, host string
		status     int
		page       string
	}{
		{"unknown sandbox", "8000-sb_nosuchsandbox.sandboxes.example.test", 502, "No such sandbox"},
		{"port out of range", "99999-" + sb.ID + ".sandboxes.example.test", 400, "not a TCP port"},
		{"the code server's port", "49999-" + sb.ID + ".sandboxes.example.test", 403, "code interpreter"},
	} {
		code, hdr, body := e.proxyDo("GET", c.host, "/", "")
		if code != c.status || !strings.Contains(body, c.page) || !strings.HasPrefix(hdr.Get("Content-Type"), "text/html") {
			t.Errorf("%s: %d %q, want %d with %q", c.name, code, body, c.status, c.page)
		}
	}

	// Another host name is the API itself (JSON errors, key required).
	if code, _, body := e.proxyDo("GET", "api.sandboxes.example.test", "/v1/sandboxes", ""); code != 401 || !strings.Contains(body, `"error"`) {
		t.Errorf("API host: %d %s", code, body)
	}

	// A killed sandbox's ports answer 502 with the reason.
	if r := e.do("DELETE", "/v1/sandboxes/"+sb.ID, e.admin, nil); r.status != 204 {
		t.Fatalf("kill: %d %s", r.status, r.body)
	}
	if code, _, body := e.proxyDo("GET", host, "/", ""); code != 502 || !strings.Contains(body, "was killed") {
		t.Errorf("killed sandbox: %d %s", code, body)
	}
}

func TestPortTarget(t *testing.T) {
	s := &Server{cfg: Config{ProxyDomain: "localhost"}}
	for host, want := range map[string]string{
		"8000-sb_abc.localhost":      "8000 sb_abc",
		"8000-SB_ABC.LOCALHOST:8080": "8000 sb_abc",
		"8000-sb_abc.localhost.":     "8000 sb_abc",
		"localhost":                  "",
		"8000-sb_abc.evil.com":       "",
		"8000-sb_abc.x.localhost":    "",
		"x8000-sb_abc.localhost":     "",
		"8000-sb_abc-x.localhost":    "",
		"123456-sb_abc.localhost":    "",
		"8000-sb_abc.notlocalhost":   "",
	} {
		port, id, ok := s.portTarget(host)
		got := ""
		if ok {
			got = strings.TrimSpace(strings.Join([]string{itoa(port), id}, " "))
		}
		if got != want {
			t.Errorf("portTarget(%q) = %q, want %q", host, got, want)
		}
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// rawGet sends a GET whose request line carries path byte for byte (as curl --path-as-is does).
func (e *env) rawGet(host, path string) *http.Response {
	e.t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(e.hs.URL, "http://"))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, host)
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		e.t.Fatalf("GET %s: %v", path, err)
	}
	return res
}

// A port request's path reaches the sandbox exactly as sent: the proxy never cleans it and never
// answers with a redirect (which would also leak the agent's internal route in Location).
func TestPortProxyRawPath(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ProxyDomain = "localhost" })
	sb := e.create(e.admin, map[string]any{"template": "base"})
	host := "8001-" + sb.ID + ".localhost"
	for _, p := range []string{"//etc", "/a/../b", "/./x", "/x%2Fy", "/a/..%2F..%2Fb", "/..", "/", "//", "/a//b/./"} {
		res := e.rawGet(host, p+"?q=1")
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || res.Header.Get("Location") != "" {
			t.Errorf("GET %s: %d Location %q %s, want 200 from the sandbox", p, res.StatusCode, res.Header.Get("Location"), b)
			continue
		}
		var got map[string]string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("GET %s: agent answer %q: %v", p, b, err)
		}
		if got["path"] != p || got["port"] != "8001" || got["query"] != "q=1" {
			t.Errorf("GET %s: the sandbox got path %q port %q query %q", p, got["path"], got["port"], got["query"])
		}
	}
}

// proxyWith sends a GET for host through the server with extra headers, and returns the status,
// the answer's headers and the sandbox's description of what reached it (nil for a proxy page).
func (e *env) proxyWith(host, path string, hdr map[string]string) (int, http.Header, map[string]string) {
	e.t.Helper()
	req, err := http.NewRequest("GET", e.hs.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Host = host
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, b := testenv.Send(e.t, req)
	var got map[string]string
	if res.StatusCode == 200 {
		if err := json.Unmarshal(b, &got); err != nil {
			e.t.Fatalf("agent answer %q: %v", b, err)
		}
	}
	return res.StatusCode, res.Header, got
}

// Private ports: without the sandbox's traffic token the proxy answers 401; with it (header, query
// or cookie) the request passes and the token never reaches the sandbox.
func TestPrivatePorts(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ProxyDomain = "localhost" })
	public := e.create(e.admin, map[string]any{"template": "base"})
	r := e.do("POST", "/v1/sandboxes", e.admin, map[string]any{"template": "base", "public_ports": false})
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var priv struct {
		ID           string `json:"id"`
		PublicPorts  bool   `json:"public_ports"`
		TrafficToken string `json:"traffic_token"`
	}
	json.Unmarshal(r.body, &priv)
	if priv.PublicPorts || !strings.HasPrefix(priv.TrafficToken, "pdt_") || len(priv.TrafficToken) != 36 {
		t.Fatalf("private create answered %s", r.body)
	}
	if !strings.Contains(string(e.do("GET", "/v1/sandboxes/"+public.ID, e.admin, nil).body), `"public_ports":true`) {
		t.Error("a default create is not public")
	}
	// The token is shown once: a GET does not carry it.
	if g := e.do("GET", "/v1/sandboxes/"+priv.ID, e.admin, nil); strings.Contains(string(g.body), "traffic_token") || !strings.Contains(string(g.body), `"public_ports":false`) {
		t.Errorf("GET of a private sandbox: %s", g.body)
	}

	host := "8000-" + priv.ID + ".localhost"
	for name, hdr := range map[string]map[string]string{
		"no token":           nil,
		"wrong token":        {TrafficTokenHeader: "pdt_" + strings.Repeat("x", 32)},
		"another's key":      {"Authorization": "Bearer " + e.admin},
		"wrong cookie":       {"Cookie": "pandastack_traffic_token=nope"},
		"token of a sibling": {TrafficTokenHeader: strings.ToUpper(priv.TrafficToken)},
	} {
		if code, _, _ := e.proxyWith(host, "/", hdr); code != 401 {
			t.Errorf("%s: %d, want 401", name, code)
		}
	}
	if code, _, _ := e.proxyWith(host, "/?pandastack_traffic_token=bad", nil); code != 401 {
		t.Errorf("bad query token: %d", code)
	}

	code, _, got := e.proxyWith(host, "/a", map[string]string{TrafficTokenHeader: priv.TrafficToken})
	if code != 200 || got["traffic_token"] != "" {
		t.Errorf("header token: %d, the sandbox saw %v", code, got)
	}
	code, hdr, got := e.proxyWith(host, "/b?x=1&pandastack_traffic_token="+priv.TrafficToken, nil)
	if code != 200 || got["query"] != "x=1" || got["path"] != "/b" {
		t.Errorf("query token: %d, the sandbox saw %v", code, got)
	}
	if c := hdr.Get("Set-Cookie"); !strings.Contains(c, "pandastack_traffic_token="+priv.TrafficToken) || !strings.Contains(c, "HttpOnly") {
		t.Errorf("query token set no cookie: %q", c)
	}
	code, _, got = e.proxyWith(host, "/c", map[string]string{"Cookie": "app=1; pandastack_traffic_token=" + priv.TrafficToken + "; theme=dark"})
	if code != 200 || got["cookie"] != "app=1; theme=dark" {
		t.Errorf("cookie token: %d, the sandbox saw cookie %q", code, got["cookie"])
	}

	// The public sandbox's ports stay open, and its app's cookies pass untouched.
	code, _, got = e.proxyWith("8000-"+public.ID+".localhost", "/", map[string]string{"Cookie": "app=1"})
	if code != 200 || got["cookie"] != "app=1" {
		t.Errorf("public sandbox: %d %v", code, got)
	}

	// A fork's children keep their parent's token.
	f := e.do("POST", "/v1/sandboxes/"+priv.ID+"/fork", e.admin, nil)
	var kids struct {
		Sandboxes []struct {
			ID          string `json:"id"`
			PublicPorts bool   `json:"public_ports"`
		} `json:"sandboxes"`
	}
	json.Unmarshal(f.body, &kids)
	if f.status != 201 && f.status != 200 || len(kids.Sandboxes) != 1 || kids.Sandboxes[0].PublicPorts {
		t.Fatalf("fork: %d %s", f.status, f.body)
	}
	child := "8000-" + kids.Sandboxes[0].ID + ".localhost"
	if code, _, _ := e.proxyWith(child, "/", nil); code != 401 {
		t.Errorf("child without token: %d", code)
	}
	if code, _, _ := e.proxyWith(child, "/", map[string]string{TrafficTokenHeader: priv.TrafficToken}); code != 200 {
		t.Errorf("child with the parent's token: %d", code)
	}
}

// The operator's default: --private-ports makes every create private unless it asks otherwise.
func TestPrivatePortsByDefault(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ProxyDomain = "localhost"; c.PrivatePorts = true })
	for _, c := range []struct {
		body   map[string]any
		public bool
	}{
		{map[string]any{"template": "base"}, false},
		{map[string]any{"template": "base", "public_ports": true}, true},
		{map[string]any{"template": "base", "public_ports": false}, false},
	} {
		r := e.do("POST", "/v1/sandboxes", e.admin, c.body)
		var sb struct {
			ID           string `json:"id"`
			PublicPorts  bool   `json:"public_ports"`
			TrafficToken string `json:"traffic_token"`
		}
		json.Unmarshal(r.body, &sb)
		if r.status != 201 || sb.PublicPorts != c.public || (sb.TrafficToken == "") != c.public {
			t.Errorf("create %v: %d %s", c.body, r.status, r.body)
			continue
		}
		code, _, _ := e.proxyWith("8000-"+sb.ID+".localhost", "/", nil)
		if want := map[bool]int{true: 200, false: 401}[c.public]; code != want {
			t.Errorf("create %v: tokenless proxy %d, want %d", c.body, code, want)
		}
	}
	if r := e.do("POST", "/v1/sandboxes", e.admin, map[string]any{"template": "base", "public_ports": "yes"}); r.status != 400 {
		t.Errorf("public_ports \"yes\": %d %s", r.status, r.body)
	}
}
