package claims

import "sync"

// Locks is a lock per key, made when first taken and dropped when no one
// holds or waits for it: the store's per-claim locks, and the runtime
// hooks' per-pod locks.
type Locks[K comparable] struct {
	mu    sync.Mutex
	locks map[K]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

// Lock takes the key's lock and returns its release.
func (l *Locks[K]) Lock(k K) (unlock func()) {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[K]*keyLock{}
	}
	kl, ok := l.locks[k]
	if !ok {
		kl = &keyLock{}
		l.locks[k] = kl
	}
	kl.refs++
	l.mu.Unlock()
	kl.mu.Lock()
	return func() {
		kl.mu.Unlock()
		l.mu.Lock()
		if kl.refs--; kl.refs == 0 {
			delete(l.locks, k)
		}
		l.mu.Unlock()
	}
}

// held is how many keys have a lock (tests).
func (l *Locks[K]) held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.locks)
}
