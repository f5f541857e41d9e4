package oauth

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// registrations counts the live dynamically registered clients, so that
// open registration keeps at most MaxRegisteredClients of them: each
// registration is an entry with the expiry of its record. It is kept next
// to the records (in this process, or a sorted set in the same Redis), not
// derived from them, so counting costs one step and not a scan.
type registrations interface {
	// admit drops the entries expired at now and, while fewer than max
	// remain, adds id until exp and reports true; else it reports false
	// and when the first entry expires.
	admit(ctx context.Context, id string, now, exp time.Time, max int) (ok bool, free time.Time, err error)
	// extend moves id's expiry to exp; an id not counted stays so.
	extend(ctx context.Context, id string, exp time.Time) error
	// forget removes id.
	forget(ctx context.Context, id string) error
}

// memoryRegistrations are the entries of the memory storage.
type memoryRegistrations struct {
	mu sync.Mutex
	m  map[string]time.Time
	// first is no later than every entry's expiry (the last sweep's
	// earliest, or an earlier one added or extended to since): until then
	// a full count has nothing to sweep.
	first time.Time
}

func newMemoryRegistrations() *memoryRegistrations {
	return &memoryRegistrations{m: make(map[string]time.Time)}
}

func (r *memoryRegistrations) admit(_ context.Context, id string, now, exp time.Time, max int) (bool, time.Time, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.m) >= max && now.Before(r.first) {
		return false, r.first, nil
	}
	if len(r.m) >= max {
		// Only at the cap, once per expiry: the map never holds more than
		// max entries, so the sweep is bounded too.
		r.first = time.Time{}
		for k, e := range r.m {
			switch {
			case !now.Before(e):
				delete(r.m, k)
			case r.first.IsZero() || e.Before(r.first):
				r.first = e
			}
		}
		if len(r.m) >= max {
			return false, r.first, nil
		}
	}
	r.m[id] = exp
	if r.first.IsZero() || exp.Before(r.first) {
		r.first = exp
	}
	return true, time.Time{}, nil
}

func (r *memoryRegistrations) extend(_ context.Context, id string, exp time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.m[id]; ok {
		r.m[id] = exp
		// A used client's lifetime may be shorter than an unused one's
		// (registered_client_ttl and the token lifetimes under 24 h).
		if exp.Before(r.first) {
			r.first = exp
		}
	}
	return nil
}

func (r *memoryRegistrations) forget(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, id)
	return nil
}

// redisRegistrations are a sorted set {prefix}clients of client ids
// scored by their expiry (Unix milliseconds), shared by every instance on
// the Redis.
type redisRegistrations struct {
	c    redis.UniversalClient
	key  string
	what string // what is counted, for errors: "registered clients"
}

// admitScript is admit in one step, so two instances cannot both take
// the last place.
var admitScript = redis.NewScript(`
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", ARGV[1])
if redis.call("ZCARD", KEYS[1]) >= tonumber(ARGV[2]) then
  local first = redis.call("ZRANGE", KEYS[1], 0, 0, "WITHSCORES")
  return {0, tonumber(first[2] or ARGV[1])}
end
redis.call("ZADD", KEYS[1], ARGV[3], ARGV[4])
return {1, 0}`)

func (r redisRegistrations) admit(ctx context.Context, id string, now, exp time.Time, max int) (bool, time.Time, error) {
	res, err := admitScript.Run(ctx, r.c, []string{r.key}, now.UnixMilli(), max, exp.UnixMilli(), id).Int64Slice()
	if err != nil {
		return false, time.Time{}, storageErr("counting "+r.what, err)
	}
	if len(res) != 2 {
		return false, time.Time{}, storageErr("counting "+r.what, redis.Nil)
	}
	if res[0] == 1 {
		return true, time.Time{}, nil
	}
	return false, time.UnixMilli(res[1]), nil
}

func (r redisRegistrations) extend(ctx context.Context, id string, exp time.Time) error {
	err := r.c.ZAddXX(ctx, r.key, redis.Z{Score: float64(exp.UnixMilli()), Member: id}).Err()
	if err != nil {
		return storageErr("extending a registered client's count", err)
	}
	return nil
}

func (r redisRegistrations) forget(ctx context.Context, id string) error {
	if err := r.c.ZRem(ctx, r.key, id).Err(); err != nil {
		return storageErr("forgetting a registered client", err)
	}
	return nil
}

// Interface guards
var (
	_ registrations = (*memoryRegistrations)(nil)
	_ registrations = redisRegistrations{}
)
