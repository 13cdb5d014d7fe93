package agent

import (
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/splice"
)

// opDial connects the stream to req.Port on the guest's loopback (guest.OpDial) and joins the
// two until both directions end.
func opDial(st *yamux.Stream, w *frameWriter, req *guest.Request) {
	if req.Port < 1 || req.Port > 65535 {
		w.fail(gerr(guest.CodeInvalidArgument, "port must be 1-65535"))
		return
	}
	conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(req.Port)), 10*time.Second)
	if err != nil {
		w.fail(gerr(guest.CodeNotFound, "nothing listens on port "+strconv.Itoa(req.Port)+": "+err.Error()))
		return
	}
	defer conn.Close()
	if w.frame(guest.FrameResult, []byte("{}")) != nil {
		return
	}
	splice.Join(st, nil, conn)
}
