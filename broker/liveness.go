package broker

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"
)

// liveness is the state of the keep-alive loop of a broker on a shared
// store: it renews the broker's liveness, restores what the store lost or
// missed, and ends the sessions of brokers that stopped.
type liveness struct {
	stop chan struct{}
	done chan struct{}

	mu sync.Mutex
	// storageErr is the last failure of the store (nil while it answers)
	// and since when it fails.
	storageErr   error
	storageSince time.Time
	// unwritten are finished sessions whose final record could not be
	// written; the loop writes them when the store answers again.
	unwritten map[string]*Session
}

// errOwnerLost is also the cancel cause of a run whose session the store
// holds as ended (declared lost while this broker could not reach it).

func (b *Broker) startKeepAlive() {
	if _, ok := b.store.(ownerStore); !ok {
		return
	}
	b.live.stop = make(chan struct{})
	b.live.done = make(chan struct{})
	go b.keepAlive()
}

// keepAlive runs every OwnerTimeout/3 until the broker closes.
func (b *Broker) keepAlive() {
	defer close(b.live.done)
	t := time.NewTicker(max(b.opts.OwnerTimeout/3, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-b.live.stop:
			return
		case <-t.C:
			b.tick(context.Background())
		}
	}
}

// tick renews the liveness, restores runs and records, and reaps.
func (b *Broker) tick(ctx context.Context) {
	os := b.store.(ownerStore)
	reset, err := os.heartbeat(ctx)
	if err != nil {
		b.storageFailed(err)
		return
	}
	if reset {
		b.logger.Warn("the session store lost this gateway's state (restarted without persistence, or unreachable past the owner timeout); restoring its running sessions")
	}
	failed := b.restoreRuns(ctx, reset)
	failed = b.writeUnwritten(ctx) || failed
	lost, err := os.reapLost(ctx)
	if err != nil {
		b.storageFailed(err)
		return
	}
	if len(lost) > 0 {
		b.logger.Warn("ended the sessions of stopped gateways", zap.Int("sessions", len(lost)))
	}
	if !failed {
		b.storageOK()
	}
}

// restoreRuns re-writes the running sessions of this broker: all of them
// after a reset, else those with a failed write. A session the store holds
// as ended is aborted here too. It reports whether a write failed.
func (b *Broker) restoreRuns(ctx context.Context, all bool) bool {
	b.mu.Lock()
	runs := make([]*run, 0, len(b.runs))
	for _, r := range b.runs {
		if all || r.dirty.Load() {
			runs = append(runs, r)
		}
	}
	b.mu.Unlock()
	failed := false
	for _, r := range runs {
		s := r.snapshot()
		if s.finished() {
			continue
		}
		r.dirty.Store(false)
		switch err := b.store.restore(ctx, s, r.restorable()); {
		case errors.Is(err, errSessionEnded):
			b.logger.Warn("session was declared lost while this gateway could not reach the store; aborting it", zap.String("session", s.ID))
			r.abort(errOwnerLost)
		case err != nil:
			r.dirty.Store(true)
			b.storageFailed(err)
			failed = true
		default:
			if all {
				// Await on other gateways re-reads, and the session's answers can
				// again be posted anywhere.
				_ = b.store.notify(ctx, s.ID)
			}
		}
	}
	return failed
}

// writeUnwritten writes the final records that failed before.
func (b *Broker) writeUnwritten(ctx context.Context) bool {
	b.live.mu.Lock()
	pending := make([]*Session, 0, len(b.live.unwritten))
	for _, s := range b.live.unwritten {
		pending = append(pending, s)
	}
	b.live.mu.Unlock()
	failed := false
	for _, s := range pending {
		err := b.store.put(ctx, s)
		if err == nil || errors.Is(err, errSessionEnded) {
			err = b.store.closeCalls(ctx, s)
		}
		if err != nil {
			b.storageFailed(err)
			failed = true
			continue
		}
		_ = b.store.notify(ctx, s.ID)
		b.live.mu.Lock()
		delete(b.live.unwritten, s.ID)
		b.live.mu.Unlock()
	}
	return failed
}

// keepUnwritten queues a final record for the keep-alive loop.
func (b *Broker) keepUnwritten(s *Session) {
	if b.live.stop == nil {
		return // a memory store does not fail
	}
	b.live.mu.Lock()
	if b.live.unwritten == nil {
		b.live.unwritten = make(map[string]*Session)
	}
	b.live.unwritten[s.ID] = s
	b.live.mu.Unlock()
}

func (b *Broker) storageFailed(err error) {
	b.live.mu.Lock()
	defer b.live.mu.Unlock()
	if b.live.storageErr == nil {
		b.live.storageSince = b.now()
		b.logger.Error("session store unavailable", zap.Error(err))
	}
	b.live.storageErr = err
}

// callerStorageFailed is storageFailed for a store operation made for a
// caller's request: one cut because that caller left (its context
// cancelled: it hung up mid-request) says nothing about the store. Anyone
// could otherwise have the gateway log the store unavailable, and report it
// so on /health, by closing requests (GET /health, a session read) as they
// reach Redis. A store that does not answer within storage_timeout still
// counts (the deadline, not a cancellation).
func (b *Broker) callerStorageFailed(ctx context.Context, err error) {
	if errors.Is(ctx.Err(), context.Canceled) {
		return
	}
	b.storageFailed(err)
}

func (b *Broker) storageOK() {
	b.live.mu.Lock()
	defer b.live.mu.Unlock()
	if b.live.storageErr != nil {
		b.logger.Info("session store available again", zap.Duration("after", b.now().Sub(b.live.storageSince)))
	}
	b.live.storageErr = nil
}

// StorageStatus reports whether the session store answered the last time
// the broker used it in the background: ok, or the last error and since
// when it fails. A memory store is always ok.
func (b *Broker) StorageStatus() (ok bool, lastErr error, since time.Time) {
	b.live.mu.Lock()
	defer b.live.mu.Unlock()
	return b.live.storageErr == nil, b.live.storageErr, b.live.storageSince
}

// stopKeepAlive ends the loop, writes what is left and withdraws this
// broker's liveness, so the others do not wait for its owner timeout.
func (b *Broker) stopKeepAlive() {
	if b.live.stop == nil {
		return
	}
	close(b.live.stop)
	<-b.live.done
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b.writeUnwritten(ctx)
	if err := b.store.(ownerStore).resign(ctx); err != nil {
		b.logger.Warn("withdrawing this gateway's liveness", zap.Error(err))
	}
}
