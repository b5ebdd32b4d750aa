package claims

import (
	"context"
	"sync"
)

// Locks is a lock per key, made when first taken and dropped when no one
// holds or waits for it: the store's per-claim locks, and the runtime
// hooks' per-pod locks.
type Locks[K comparable] struct {
	mu    sync.Mutex
	locks map[K]*keyLock
}

type keyLock struct {
	// held has a token in it while the lock is held.
	held chan struct{}
	refs int
}

// Lock takes the key's lock and returns its release.
func (l *Locks[K]) Lock(k K) (unlock func()) {
	unlock, _ = l.LockContext(context.Background(), k)
	return unlock
}

// LockContext takes the key's lock, waiting for it until ctx ends, and
// returns its release; when ctx ends first, ctx's error, and nothing is
// held. A lock that is free is taken, whether ctx has ended or not.
func (l *Locks[K]) LockContext(ctx context.Context, k K) (unlock func(), _ error) {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[K]*keyLock{}
	}
	kl, ok := l.locks[k]
	if !ok {
		kl = &keyLock{held: make(chan struct{}, 1)}
		l.locks[k] = kl
	}
	kl.refs++
	l.mu.Unlock()
	unlock = func() {
		<-kl.held
		l.drop(k, kl)
	}
	// A free lock is taken, whether ctx has ended or not.
	select {
	case kl.held <- struct{}{}:
		return unlock, nil
	default:
	}
	select {
	case kl.held <- struct{}{}:
		return unlock, nil
	case <-ctx.Done():
		l.drop(k, kl)
		return nil, ctx.Err()
	}
}

// drop forgets one holder or waiter of the key's lock, and the lock with
// its last.
func (l *Locks[K]) drop(k K, kl *keyLock) {
	l.mu.Lock()
	if kl.refs--; kl.refs == 0 {
		delete(l.locks, k)
	}
	l.mu.Unlock()
}

// held is how many keys have a lock (tests).
func (l *Locks[K]) held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.locks)
}
