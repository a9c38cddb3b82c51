package h1

import (
	"sync"
	"syscall"
)

const watcherSupported = true

// The watcher sees clients leave: one epoll set for the process, every
// served connection in it once (EPOLLRDHUP, edge-triggered: a FIN or a
// reset), and one goroutine blocked in epoll_wait that cancels the
// request of a connection whose client left. The event carries the
// connection's serial number, never its descriptor, so a descriptor
// reused by a newer connection is never mistaken for the old one.
type watcher struct {
	epfd  int
	mu    sync.Mutex
	conns map[uint64]*conn
	next  uint64
}

var (
	theWatcher     *watcher
	theWatcherErr  error
	theWatcherOnce sync.Once
)

func getWatcher() (*watcher, error) {
	theWatcherOnce.Do(func() {
		fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if err != nil {
			theWatcherErr = err
			return
		}
		theWatcher = &watcher{epfd: fd, conns: make(map[uint64]*conn)}
		go theWatcher.run()
	})
	return theWatcher, theWatcherErr
}

func (w *watcher) run() {
	events := make([]syscall.EpollEvent, 128)
	for {
		n, err := syscall.EpollWait(w.epfd, events, -1)
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			panic("h1: epoll_wait: " + err.Error())
		}
		for _, ev := range events[:n] {
			id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			w.mu.Lock()
			c := w.conns[id]
			w.mu.Unlock()
			if c != nil {
				c.peerGone()
			}
		}
	}
}

// watchHandle is a connection's place in the watcher (zero: not watched).
type watchHandle struct {
	w  *watcher
	id uint64
	rc syscall.RawConn
}

// watchConn puts c's socket in the watcher. A connection whose socket
// cannot be reached (not a syscall.Conn, even unwrapped) is not watched:
// its requests are canceled only when a write to the client fails.
func watchConn(c *conn) watchHandle {
	w, err := getWatcher()
	if err != nil {
		return watchHandle{}
	}
	rc := rawConn(c.rwc)
	if rc == nil {
		return watchHandle{}
	}
	w.mu.Lock()
	w.next++
	id := w.next
	w.conns[id] = c
	w.mu.Unlock()
	ev := syscall.EpollEvent{Events: syscall.EPOLLRDHUP | uint32(1)<<31 /* EPOLLET */, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
	var cerr error
	err = rc.Control(func(fd uintptr) { cerr = syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev) })
	if err != nil || cerr != nil {
		w.mu.Lock()
		delete(w.conns, id)
		w.mu.Unlock()
		return watchHandle{}
	}
	return watchHandle{w: w, id: id, rc: rc}
}

// stop takes the connection out of the watcher; the socket is still open.
func (h watchHandle) stop() {
	if h.w == nil {
		return
	}
	h.rc.Control(func(fd uintptr) { syscall.EpollCtl(h.w.epfd, syscall.EPOLL_CTL_DEL, int(fd), nil) })
	h.w.mu.Lock()
	delete(h.w.conns, h.id)
	h.w.mu.Unlock()
}
