package store

import (
	"context"
	"time"
)

// Clock is the database's clock (leases are compared across replicas: DBNow), else the local one.
func (s *Store) Clock(ctx context.Context) time.Time {
	if t, err := s.DBNow(ctx); err == nil {
		return t
	}
	return time.Now().UTC()
}

// HoldLease renews a lease of length lease every quarter of it, until stop is closed: renew gets
// the new end (Clock + lease); its errors go to failed.
func (s *Store) HoldLease(stop <-chan struct{}, lease time.Duration, renew func(ctx context.Context, until time.Time) error, failed func(error)) {
	t := time.NewTicker(lease / 4)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			ctx := context.Background()
			if err := renew(ctx, s.Clock(ctx).Add(lease)); err != nil {
				failed(err)
			}
		}
	}
}
