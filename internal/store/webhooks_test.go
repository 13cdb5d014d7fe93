package store

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestDeliveriesOncePerEventAndClaim: replicas recording the same event make one delivery; replicas
// claiming at once each get distinct deliveries; a retry is claimable only when due; finished ones
// are neither claimed nor kept past the retention.
func TestDeliveriesOncePerEventAndClaim(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		now := time.Now().UTC().Truncate(time.Microsecond)
		d := func(id, key string) Delivery {
			return Delivery{ID: id, WebhookID: "wh_a", TeamID: "team_a", EventKey: key, EventType: "sandbox.killed", Payload: "{}",
				State: DeliveryPending, NextAt: now, CreatedAt: now, UpdatedAt: now}
		}
		for i, c := range []struct {
			d    Delivery
			want bool
		}{{d("whd_1", "k1"), true}, {d("whd_2", "k1"), false}, {d("whd_3", "k2"), true}, {d("whd_4", "k3"), true}} {
			if got, err := s.EnqueueDelivery(ctx, c.d); err != nil || got != c.want {
				t.Fatalf("enqueue %d: %v %v, want %v", i, got, err, c.want)
			}
		}
		// Two replicas claim at once: every due delivery goes to exactly one.
		var mu sync.Mutex
		claimed := map[string]int{}
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ds, err := s.ClaimDeliveries(ctx, now, now.Add(time.Minute), 10)
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				for _, x := range ds {
					claimed[x.ID]++
				}
				mu.Unlock()
			}()
		}
		wg.Wait()
		if len(claimed) != 3 || claimed["whd_1"] != 1 || claimed["whd_3"] != 1 || claimed["whd_4"] != 1 {
			t.Fatalf("claims %v", claimed)
		}
		if ds, _ := s.ClaimDeliveries(ctx, now, now.Add(time.Minute), 10); len(ds) != 0 {
			t.Fatalf("leased deliveries claimed again: %v", ds)
		}
		// whd_1 failed: a retry in 10 s; whd_3 succeeded.
		retry := d("whd_1", "k1")
		retry.Attempts, retry.NextAt, retry.StatusCode, retry.Error = 1, now.Add(10*time.Second), 500, "HTTP 500"
		ok := d("whd_3", "k2")
		ok.State, ok.Attempts, ok.StatusCode = DeliverySucceeded, 1, 204
		for _, x := range []Delivery{retry, ok} {
			if err := s.FinishAttempt(ctx, x); err != nil {
				t.Fatal(err)
			}
		}
		if ds, _ := s.ClaimDeliveries(ctx, now.Add(5*time.Second), now.Add(time.Minute), 10); len(ds) != 0 {
			t.Fatalf("claimed before due: %v", ds)
		}
		ds, err := s.ClaimDeliveries(ctx, now.Add(11*time.Second), now.Add(2*time.Minute), 10)
		if err != nil || len(ds) != 1 || ds[0].ID != "whd_1" || ds[0].Attempts != 1 || ds[0].StatusCode != 500 {
			t.Fatalf("the due retry: %+v %v", ds, err)
		}
		list, err := s.ListDeliveries(ctx, "team_a", "wh_a", 10)
		if err != nil || len(list) != 3 {
			t.Fatalf("list: %+v %v", list, err)
		}
		if other, _ := s.ListDeliveries(ctx, "team_b", "wh_a", 10); len(other) != 0 {
			t.Fatalf("another team lists %v", other)
		}
		if n, err := s.PruneDeliveries(ctx, now.Add(time.Hour)); err != nil || n != 1 {
			t.Fatalf("prune: %d %v (only the succeeded one)", n, err)
		}
	})
}
