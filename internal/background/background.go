// Package background holds the work a control-plane service runs past the request that started
// it (app builds and drains, async function runs and kills, schedule runs): it runs under the
// group's context, which Close cancels before it waits. The apps and functions services and the
// schedules engine each spelled this context, its cancel and a WaitGroup.
package background

import (
	"context"
	"sync"
)

// Group is a service's background work. Create with New.
type Group struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a group whose context is live until Close.
func New() *Group {
	ctx, cancel := context.WithCancel(context.Background())
	return &Group{ctx: ctx, cancel: cancel}
}

// Ctx is the group's context: cancelled by Close.
func (g *Group) Ctx() context.Context { return g.ctx }

// Go runs fn in a goroutine that Wait and Close wait for.
func (g *Group) Go(fn func()) { g.wg.Go(fn) }

// Close cancels the group's context and waits for the work in flight.
func (g *Group) Close() {
	g.cancel()
	g.wg.Wait()
}

// Wait waits for the work in flight without cancelling it.
func (g *Group) Wait() { g.wg.Wait() }
