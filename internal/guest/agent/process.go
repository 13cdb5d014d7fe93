package agent

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/creack/pty"
	"github.com/hashicorp/yamux"
	"github.com/pandastack/pandastack/internal/guest"
	"golang.org/x/sys/unix"
)

// Background processes (internal/guest/process.go has the protocol). The agent owns them: each
// runs in its own process group, its output goes into a bounded ring whatever readers do, and its
// exit is kept for a while after it ends.

// procTable is the agent's background processes, by pid.
type procTable struct {
	mu     sync.Mutex
	procs  map[int]*proc
	exited []int // pids in order of exit, oldest first
	// exitSeq is the ExitSeq of the last exit recorded (guest.ProcessInfo.ExitSeq).
	exitSeq uint64
}

// lastExitSeq is the number of the last exit recorded (guest.Ready.ExitSeq).
func (t *procTable) lastExitSeq() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.exitSeq
}

// proc is one background process.
type proc struct {
	pid int

	mu      sync.Mutex // guards the fields below
	info    guest.ProcessInfo
	ring    outRing
	exited  bool
	end     guest.ProcessEnd // the exit, once exited
	changed chan struct{}    // closed (and replaced) whenever output or the exit arrives

	stdinMu   sync.Mutex  // one proc_stdin writer at a time; guards stdin
	stdin     *os.File    // nil: no stdin pipe, or it was closed (a PTY's: a duplicate of term)
	term      *os.File    // a PTY process's terminal (master side); nil otherwise
	stdinOpen atomic.Bool // stdin != nil, for readers that must not wait for a writer
}

// notify wakes the readers waiting for news (p.mu held).
func (p *proc) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *proc) append(stderr bool, b []byte) {
	if len(b) == 0 {
		return
	}
	p.mu.Lock()
	p.ring.append(stderr, b)
	p.notify()
	p.mu.Unlock()
}

// hasExited reports whether the process has exited (it takes p.mu).
func (p *proc) hasExited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// snapshot is the process's description now (p.mu held).
func (p *proc) snapshot() guest.ProcessInfo {
	in := p.info
	in.OutputStart, in.OutputEnd = p.ring.start, p.ring.end
	in.Stdin = p.stdinOpen.Load()
	return in
}

// outRing keeps the last ProcessOutputRing bytes of a process's combined output as chunks, each
// of one stream, with absolute offsets.
type outRing struct {
	chunks []outChunk
	start  int64 // offset of the oldest byte kept
	end    int64 // offset of the next byte
}

type outChunk struct {
	stderr bool
	off    int64
	data   []byte
}

// maxChunk bounds one chunk so a reader's frame stays small and eviction fine-grained.
const maxChunk = 32 << 10

func (r *outRing) append(stderr bool, b []byte) {
	for len(b) > 0 {
		if n := len(r.chunks); n > 0 {
			last := &r.chunks[n-1]
			if last.stderr == stderr && len(last.data) < maxChunk {
				k := min(len(b), maxChunk-len(last.data))
				last.data = append(last.data, b[:k]...)
				r.end += int64(k)
				b = b[k:]
				continue
			}
		}
		k := min(len(b), maxChunk)
		r.chunks = append(r.chunks, outChunk{stderr: stderr, off: r.end, data: append(make([]byte, 0, k), b[:k]...)})
		r.end += int64(k)
		b = b[k:]
	}
	for r.end-r.start > guest.ProcessOutputRing {
		drop := r.end - r.start - guest.ProcessOutputRing
		c := &r.chunks[0]
		if int64(len(c.data)) <= drop {
			r.start += int64(len(c.data))
			r.chunks = r.chunks[1:]
			continue
		}
		c.data = append([]byte(nil), c.data[drop:]...)
		c.off += drop
		r.start += drop
	}
}

// from returns copies of the output at and after off (at most about max bytes); an offset
// before the oldest kept byte reads from the oldest.
func (r *outRing) from(off int64, max int) []guest.OutputChunk {
	off = maxInt64(off, r.start)
	i := sort.Search(len(r.chunks), func(i int) bool { return r.chunks[i].off+int64(len(r.chunks[i].data)) > off })
	var out []guest.OutputChunk
	for n := 0; i < len(r.chunks) && n < max; i++ {
		c := r.chunks[i]
		d := c.data[off-c.off:]
		out = append(out, guest.OutputChunk{Stderr: c.stderr, Offset: off, Data: append([]byte(nil), d...)})
		n += len(d)
		off += int64(len(d))
	}
	return out
}

func maxInt64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

func (t *procTable) get(pid int) (*proc, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.procs[pid]; p != nil {
		return p, nil
	}
	return nil, gerr(guest.CodeNotFound, fmt.Sprintf("no process %d started through the API (see the process list)", pid))
}

func (a *Agent) opProcStart(w *frameWriter, req *guest.Request) {
	p, err := a.startProcess(req)
	if err != nil {
		w.fail(err)
		return
	}
	w.json(guest.FrameResult, guest.ProcessStarted{Pid: p.pid})
}

func (a *Agent) startProcess(req *guest.Request) (*proc, error) {
	t := &a.procs
	t.mu.Lock()
	running := len(t.procs) - len(t.exited)
	t.mu.Unlock()
	if running >= guest.MaxProcesses {
		return nil, gerr(guest.CodeConflict, fmt.Sprintf("%d background processes are running, the most at once; kill one first", running))
	}
	if err := guest.CheckTag(req.Tag); err != nil {
		return nil, gerr(guest.CodeInvalidArgument, err.Error())
	}
	if req.PTY {
		return a.startPTYProcess(req)
	}
	x, err := a.prepareExec(req)
	if err != nil {
		return nil, err
	}
	var files []*os.File // the child's ends, closed once it has them
	var stdinR, stdinW *os.File
	if req.Stdin {
		if stdinR, stdinW, err = os.Pipe(); err != nil {
			return nil, err
		}
		files = append(files, stdinR)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(stdinR, stdinW)
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(stdinR, stdinW, outR, outW)
		return nil, err
	}
	files = append(files, outW, errW)
	cmd := &exec.Cmd{
		Path: x.path, Args: x.argv, Env: x.env, Dir: x.cwd, Stdout: outW, Stderr: errW,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Credential: x.cred},
	}
	if stdinR != nil {
		cmd.Stdin = stdinR
	}
	err = cmd.Start()
	closeAll(files...)
	if err != nil {
		closeAll(stdinW, outR, errR)
		return nil, err
	}
	p := a.track(req, x, cmd, stdinW, nil)
	a.procs.own(p, cmd, map[*os.File]bool{outR: false, errR: true})
	return p, nil
}

// startPTYProcess starts req on a terminal of its own: a session leader whose stdin, stdout and
// stderr are the terminal; its output is the terminal's, and stdin writes type into it.
func (a *Agent) startPTYProcess(req *guest.Request) (*proc, error) {
	cmd, master, x, err := a.startOnTerminal(req)
	if err != nil {
		return nil, err
	}
	// Writes go through a duplicate, so that closing "stdin" leaves the terminal to the reader.
	var typer *os.File
	if rc, err := master.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			if nfd, err := unix.Dup(int(fd)); err == nil {
				typer = os.NewFile(uintptr(nfd), "pty")
			}
		})
	}
	if typer == nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		master.Close()
		return nil, fmt.Errorf("duplicating the terminal failed")
	}
	p := a.track(req, x, cmd, typer, master)
	a.procs.own(p, cmd, map[*os.File]bool{master: false})
	return p, nil
}

// track records a started process in the table.
func (a *Agent) track(req *guest.Request, x *preparedExec, cmd *exec.Cmd, stdin, term *os.File) *proc {
	t := &a.procs
	u, _ := a.lookupUser(req.User)
	p := &proc{pid: cmd.Process.Pid, changed: make(chan struct{}), stdin: stdin, term: term}
	p.stdinOpen.Store(stdin != nil)
	p.info = guest.ProcessInfo{Pid: p.pid, Tag: req.Tag, Cmd: req.Cmd, Argv: req.Argv, Cwd: x.cwd, Running: true, StartedAt: time.Now().UTC(),
		PTY: term != nil}
	if u != nil {
		p.info.User = u.Name
	}
	t.mu.Lock()
	if old := t.procs[p.pid]; old != nil { // a remembered exit whose pid came round again
		t.forget(p.pid)
	}
	t.procs[p.pid] = p
	t.mu.Unlock()
	return p
}

// own pumps p's outputs (each file: whether it is stderr) into its ring and records its exit
// once they are drained.
func (t *procTable) own(p *proc, cmd *exec.Cmd, outs map[*os.File]bool) {
	var drained sync.WaitGroup
	drained.Add(len(outs))
	for f, stderr := range outs {
		go p.pump(f, stderr, &drained)
	}
	go func() {
		cmd.Wait()
		// What the process wrote before it exited is in the pipes: take it in before the exit is
		// told, while children that still hold the pipes keep writing into the ring afterwards.
		for f := range outs {
			f.SetReadDeadline(pastDeadline)
		}
		drained.Wait()
		end := guest.ProcessEnd{}
		end.ExitCode, end.Signal = exitStatus(cmd.ProcessState)
		// The exit is numbered under the table's lock, with the process's state, so a hello's
		// Ready.ExitSeq never counts an exit the table does not show yet.
		t.mu.Lock()
		t.exitSeq++
		p.mu.Lock()
		p.exited, p.end = true, end
		code := end.ExitCode
		p.info.Running, p.info.ExitCode, p.info.Signal, p.info.ExitedAt = false, &code, end.Signal, time.Now().UTC()
		p.info.ExitSeq = t.exitSeq
		p.notify()
		p.mu.Unlock()
		t.exited = append(t.exited, p.pid)
		for len(t.exited) > guest.MaxExitedProcesses {
			t.forget(t.exited[0])
		}
		t.mu.Unlock()
	}()
}

// exitStatus is how a process ended, as a shell reports it: its exit code, or 128 + the number
// of the signal that killed it (then named, e.g. "SIGTERM").
func exitStatus(ps *os.ProcessState) (int, string) {
	ws := ps.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return 128 + int(ws.Signal()), unix.SignalName(ws.Signal())
	}
	return ws.ExitStatus(), ""
}

// forget drops a process from the table (t.mu held).
func (t *procTable) forget(pid int) {
	p := t.procs[pid]
	delete(t.procs, pid)
	if i := indexOf(t.exited, pid); i >= 0 {
		t.exited = append(t.exited[:i], t.exited[i+1:]...)
	}
	if p != nil {
		p.closeStdin()
	}
}

func indexOf(s []int, v int) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// pump copies one output pipe into the ring until every writer closed it. The first deadline
// (set when the process exits) makes it take in what is buffered and report drained; it then
// goes on for children that still write.
func (p *proc) pump(r *os.File, stderr bool, drained *sync.WaitGroup) {
	var once sync.Once
	done := func() { once.Do(drained.Done) }
	defer done()
	defer r.Close()
	buf := make([]byte, 32<<10)
	var hold []byte // an incomplete UTF-8 sequence at the end of a read, completed by the next
	put := func(b []byte, flush bool) {
		b = append(hold, b...)
		cut := len(b)
		if !flush {
			cut = utf8Cut(b)
		}
		p.append(stderr, b[:cut])
		hold = append([]byte(nil), b[cut:]...)
	}
	for {
		n, err := r.Read(buf)
		if n > 0 {
			put(buf[:n], false)
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			put(nil, true)
			return // EOF: no writer left
		}
		// The process exited: read what the pipe holds now without blocking.
		if rc, err := r.SyscallConn(); err == nil {
			for {
				var m int
				var rerr error
				rc.Read(func(fd uintptr) bool {
					m, rerr = unix.Read(int(fd), buf)
					return true
				})
				if m <= 0 || rerr != nil {
					break
				}
				put(buf[:m], false)
			}
		}
		put(nil, true)
		done()
		r.SetReadDeadline(time.Time{})
	}
}

// utf8Cut is where b ends before an incomplete trailing UTF-8 sequence (len(b) if none).
func utf8Cut(b []byte) int {
	for i := 1; i <= 3 && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return len(b) - i
			}
			break
		}
	}
	return len(b)
}

func (a *Agent) opProcList(w *frameWriter) {
	t := &a.procs
	t.mu.Lock()
	ps := make([]*proc, 0, len(t.procs))
	for _, p := range t.procs {
		ps = append(ps, p)
	}
	t.mu.Unlock()
	out := guest.ProcessList{Processes: make([]guest.ProcessInfo, 0, len(ps))}
	for _, p := range ps {
		p.mu.Lock()
		out.Processes = append(out.Processes, p.snapshot())
		p.mu.Unlock()
	}
	sort.Slice(out.Processes, func(i, j int) bool {
		a, b := out.Processes[i], out.Processes[j]
		if !a.StartedAt.Equal(b.StartedAt) {
			return a.StartedAt.Before(b.StartedAt)
		}
		return a.Pid < b.Pid
	})
	w.json(guest.FrameResult, out)
}

// opProcOutput sends the output from req.Offset on; with Follow it waits for more until the
// process exits or the host goes away (which never touches the process).
func (a *Agent) opProcOutput(st *yamux.Stream, fr *guest.FrameReader, w *frameWriter, req *guest.Request) {
	p, err := a.procs.get(req.Pid)
	if err != nil {
		w.fail(err)
		return
	}
	p.mu.Lock()
	end := p.ring.end
	p.mu.Unlock()
	if req.Offset < 0 || req.Offset > end {
		w.fail(gerr(guest.CodeInvalidArgument, fmt.Sprintf("offset %d is outside the output (0 to %d)", req.Offset, end)))
		return
	}
	w.frame(guest.FrameResult, []byte("{}")) // accepted: what follows is the output
	gone := make(chan struct{})
	go func() { // anything from the host, or its close, ends the stream
		fr.Next()
		close(gone)
	}()
	defer st.SetReadDeadline(pastDeadline)
	off := req.Offset
	for {
		p.mu.Lock()
		chunks := p.ring.from(off, 256<<10)
		exited, pend, changed := p.exited, p.end, p.changed
		caughtUp := len(chunks) == 0 && off >= p.ring.end
		if len(chunks) == 0 {
			off = maxInt64(off, p.ring.start)
		}
		p.mu.Unlock()
		for _, c := range chunks {
			typ := guest.FrameStdout
			if c.Stderr {
				typ = guest.FrameStderr
			}
			if w.frame(typ, guest.EncodeOutputChunk(c.Offset, c.Data)) != nil {
				return
			}
			off = c.Offset + int64(len(c.Data))
		}
		if !caughtUp {
			continue
		}
		switch {
		case exited:
			pend.Next = off
			w.json(guest.FrameExit, pend)
			return
		case !req.Follow:
			w.json(guest.FrameExit, guest.ProcessEnd{Next: off, Running: true})
			return
		}
		select {
		case <-changed:
		case <-gone:
			return
		}
	}
}

// opProcStdin writes the data frames that follow to the process's stdin, then closes it if asked.
func (a *Agent) opProcStdin(fr *guest.FrameReader, w *frameWriter, req *guest.Request) {
	p, err := a.procs.get(req.Pid)
	if err != nil {
		w.fail(err)
		return
	}
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	deadline := time.Now().Add(guest.StdinWriteTimeout)
	var werr error
	total := 0
	for {
		typ, data, err := fr.Next()
		if err != nil {
			return // the host went away; nothing to answer
		}
		if typ == guest.FrameEOF {
			break
		}
		if typ != guest.FrameData {
			w.fail(gerr(guest.CodeInvalidArgument, fmt.Sprintf("unexpected frame %q in proc_stdin", typ)))
			return
		}
		total += len(data)
		switch {
		case total > guest.MaxStdinWrite:
			werr = gerr(guest.CodeInvalidArgument, fmt.Sprintf("stdin data is over %d bytes", guest.MaxStdinWrite))
		case werr != nil:
		case p.stdin == nil:
			werr = gerr(guest.CodeConflict, fmt.Sprintf("process %d has no stdin to write to (start it with stdin: true; it may have been closed)", p.pid))
		default:
			p.stdin.SetWriteDeadline(deadline)
			if _, err := p.stdin.Write(data); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					werr = gerr(guest.CodeConflict, fmt.Sprintf("process %d did not read its stdin within %v", p.pid, guest.StdinWriteTimeout))
				} else {
					werr = gerr(guest.CodeConflict, fmt.Sprintf("process %d closed its stdin (or exited)", p.pid))
				}
			}
		}
	}
	if werr != nil {
		w.fail(werr)
		return
	}
	if req.EOF && p.stdin != nil {
		p.stdin.Close()
		p.stdin = nil
		p.stdinOpen.Store(false)
	}
	w.frame(guest.FrameResult, []byte("{}"))
}

func (p *proc) closeStdin() {
	p.stdinMu.Lock()
	if p.stdin != nil {
		p.stdin.Close()
		p.stdin = nil
		p.stdinOpen.Store(false)
	}
	p.stdinMu.Unlock()
}

func (a *Agent) opProcSignal(w *frameWriter, req *guest.Request) {
	sig, ok := guest.ParseSignal(req.Signal)
	if !ok {
		w.fail(gerr(guest.CodeInvalidArgument, fmt.Sprintf("signal %q is not one of TERM, KILL, INT, HUP, QUIT, USR1, USR2, STOP, CONT", req.Signal)))
		return
	}
	p, err := a.procs.get(req.Pid)
	if err != nil {
		w.fail(err)
		return
	}
	if p.hasExited() {
		w.fail(gerr(guest.CodeConflict, fmt.Sprintf("process %d has exited", p.pid)))
		return
	}
	if err := syscall.Kill(-p.pid, sig); err != nil && err != syscall.ESRCH {
		w.fail(err)
		return
	}
	w.frame(guest.FrameResult, []byte("{}"))
}

// opProcKill kills the process's whole tree (its group, and descendants that left it) and waits
// a little for its exit, so the answer usually shows it exited.
func (a *Agent) opProcKill(w *frameWriter, req *guest.Request) {
	p, err := a.procs.get(req.Pid)
	if err != nil {
		w.fail(err)
		return
	}
	p.mu.Lock()
	exited, changed := p.exited, p.changed
	p.mu.Unlock()
	if exited {
		// Its children may live on in its group (`sh -c 'server &'` exits at once). The group keeps
		// the pid from reuse while it has members; a live process with that pid is not ours.
		if _, err := os.Stat("/proc/" + strconv.Itoa(p.pid)); errors.Is(err, os.ErrNotExist) {
			syscall.Kill(-p.pid, syscall.SIGKILL)
		}
	} else {
		killTree(p.pid)
		t := time.NewTimer(5 * time.Second)
		defer t.Stop()
	wait:
		for {
			select {
			case <-changed:
			case <-t.C:
				break wait
			}
			p.mu.Lock()
			exited, changed = p.exited, p.changed
			p.mu.Unlock()
			if exited {
				break
			}
		}
	}
	p.closeStdin()
	p.mu.Lock()
	info := p.snapshot()
	p.mu.Unlock()
	w.json(guest.FrameResult, info)
}

// killTree stops the group of leader and every descendant first (so none forks or reparents
// meanwhile), then kills them all.
func killTree(leader int) {
	seen := map[int]bool{}
	for round := 0; round < 10; round++ {
		syscall.Kill(-leader, syscall.SIGSTOP)
		fresh := 0
		for _, pid := range descendants(leader) {
			if !seen[pid] {
				seen[pid] = true
				fresh++
			}
			syscall.Kill(pid, syscall.SIGSTOP)
		}
		if fresh == 0 {
			break
		}
	}
	syscall.Kill(-leader, syscall.SIGKILL)
	for pid := range seen {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	syscall.Kill(-leader, syscall.SIGCONT) // a stopped process dies of SIGKILL anyway; harmless
}

// descendants lists the processes below pid (from /proc's parent links).
func descendants(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp := parentOf(c); pp > 0 {
			children[pp] = append(children[pp], c)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		for _, c := range children[n] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// parentOf reads a process's parent pid from /proc/PID/stat (0 if it is gone).
func parentOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces and parens
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0
	}
	pp, _ := strconv.Atoi(f[1])
	return pp
}

// opProcess serves the proc_* ops.
func (a *Agent) opProcess(st *yamux.Stream, fr *guest.FrameReader, w *frameWriter, req *guest.Request) {
	switch req.Op {
	case guest.OpProcStart:
		a.opProcStart(w, req)
	case guest.OpProcList:
		a.opProcList(w)
	case guest.OpProcOutput:
		a.opProcOutput(st, fr, w, req)
	case guest.OpProcStdin:
		a.opProcStdin(fr, w, req)
	case guest.OpProcSignal:
		a.opProcSignal(w, req)
	case guest.OpProcKill:
		a.opProcKill(w, req)
	case guest.OpProcResize:
		a.opProcResize(w, req)
	}
}

// opProcResize sets a PTY process's terminal size (its programs get SIGWINCH).
func (a *Agent) opProcResize(w *frameWriter, req *guest.Request) {
	p, err := a.procs.get(req.Pid)
	if err != nil {
		w.fail(err)
		return
	}
	cols, rows, err := termSize(req.Cols, req.Rows)
	if err != nil {
		w.fail(err)
		return
	}
	switch {
	case p.term == nil:
		w.fail(gerr(guest.CodeConflict, fmt.Sprintf("process %d has no terminal (start it with a pty)", req.Pid)))
	case p.hasExited():
		w.fail(gerr(guest.CodeConflict, fmt.Sprintf("process %d has exited", req.Pid)))
	default:
		if err := pty.Setsize(p.term, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)}); err != nil {
			w.fail(gerr(guest.CodeConflict, fmt.Sprintf("process %d: its terminal is gone", req.Pid)))
			return
		}
		w.frame(guest.FrameResult, []byte("{}"))
	}
}
