// Command pandastack-guest is the in-VM agent. As PID 1 it does the minimal
// init work and supervises `pandastack-guest serve`, which serves the host over
// the virtio-serial port. `serve --listen-unix PATH` serves the same protocol
// on a unix socket instead, to test without a VM. Logic lives in internal/guest/agent.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"golang.org/x/sys/unix"
	"log"
	"net"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/guest/agent"
)

func usage() {
	fmt.Fprintf(os.Stderr, `usage:
  pandastack-guest                 as PID 1: init + supervise "serve"; otherwise same as "serve"
  pandastack-guest init            force init mode
  pandastack-guest serve [--port-name NAME] [--listen-unix PATH] [--user NAME]
  pandastack-guest version
`)
}

func main() {
	args := os.Args[1:]
	if len(args) == 0 {
		if os.Getpid() == 1 {
			args = []string{"init"}
		} else {
			args = []string{"serve"}
		}
	}
	self, err := os.Executable()
	if err != nil {
		self = "/proc/self/exe"
	}
	switch args[0] {
	case "init":
		log.Fatal(agent.RunInit(self))
	case "serve":
		os.Exit(serve(args[1:]))
	case "version":
		fmt.Println(guest.Version)
	default:
		usage()
		os.Exit(2)
	}
}

func serve(args []string) int {
	// The port reader and exec's wait4 block in raw syscalls while holding a P; with one vCPU
	// (GOMAXPROCS=1) other goroutines would then wait for sysmon to retake it, up to 10 ms per
	// hop. Spare Ps let them run at once; idle Ps cost nothing.
	if runtime.GOMAXPROCS(0) < 4 {
		runtime.GOMAXPROCS(4)
	}
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	portName := fs.String("port-name", guest.PortName, "virtio-serial port name to serve")
	listen := fs.String("listen-unix", "", "serve on this unix socket instead of the virtio port (testing)")
	defUser := fs.String("user", "", `account for requests without a user (default "user")`)
	fs.Parse(args)

	lg := log.New(os.Stderr, "pandastack-guest: ", log.LstdFlags|log.Lmicroseconds)
	syscall.Umask(0o022)
	// Cap the processes (threads) of unprivileged accounts: every command inherits this limit and
	// the kernel counts it per uid, so a fork bomb run as the sandbox user stalls at the cap instead
	// of freezing the guest, and root (which the limit does not bind) can still clean up.
	if *listen == "" {
		lim := syscall.Rlimit{Cur: guest.MaxUserProcs, Max: guest.MaxUserProcs}
		if err := syscall.Setrlimit(unix.RLIMIT_NPROC, &lim); err != nil {
			lg.Printf("cannot cap user processes: %v", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if *listen != "" {
		os.Remove(*listen)
		ln, err := net.Listen("unix", *listen)
		if err != nil {
			lg.Print(err)
			return 1
		}
		defer os.Remove(*listen)
		a := agent.New(agent.Options{Logger: lg, DefaultUser: *defUser})
		lg.Printf("serving on unix socket %s", *listen)
		if err := a.ServeListener(ctx, ln); err != nil && !errors.Is(err, context.Canceled) {
			lg.Print(err)
			return 1
		}
		return 0
	}
	a := agent.New(agent.Options{Logger: lg, DefaultUser: *defUser, SyncClock: true, SeedRNG: true})
	if err := a.ServeVirtio(ctx, *portName); err != nil && !errors.Is(err, context.Canceled) {
		lg.Print(err)
		return 1
	}
	return 0
}
