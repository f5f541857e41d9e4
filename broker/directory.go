package broker

import "sync"

// SessionDirectory maps the id of every running session to the broker that
// runs it, for a process that runs several brokers at once: a Caddy config
// reload that changes the broker's settings builds a new broker while the
// old one drains its sessions. Brokers sharing a directory hand a tool
// result or a status request for a session they do not run to the broker
// that does, so a caller-answered tool call reaches the draining broker
// through the new one. Across processes, a shared Redis does the same.
//
// The zero value is not usable; create one with NewSessionDirectory. It is
// safe for concurrent use.
type SessionDirectory struct {
	mu sync.RWMutex
	m  map[string]*Broker
}

// NewSessionDirectory returns an empty directory.
func NewSessionDirectory() *SessionDirectory {
	return &SessionDirectory{m: make(map[string]*Broker)}
}

// Lookup returns the broker running session id, or nil.
func (d *SessionDirectory) Lookup(id string) *Broker {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.m[id]
}

// Len is the number of running sessions listed (leak checks use it).
func (d *SessionDirectory) Len() int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return len(d.m)
}

func (d *SessionDirectory) add(id string, b *Broker) {
	d.mu.Lock()
	d.m[id] = b
	d.mu.Unlock()
}

func (d *SessionDirectory) remove(id string, b *Broker) {
	d.mu.Lock()
	if d.m[id] == b {
		delete(d.m, id)
	}
	d.mu.Unlock()
}

// runner returns the broker that runs session id: the one the directory
// names, else b.
func (b *Broker) runner(id string) *Broker {
	if d := b.opts.Directory; d != nil {
		if o := d.Lookup(id); o != nil {
			return o
		}
	}
	return b
}
