//go:build unix

package h1

import (
	"net"
	"syscall"
)

// alive reports whether a kept-alive connection is still open and silent:
// one non-blocking peek, so a connection the engine closed while idle is
// not used for a request (it would fail it).
func alive(c net.Conn) bool {
	rc := rawConn(c)
	if rc == nil {
		return true
	}
	ok := true
	var b [1]byte
	err := rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
		case err != nil || n == 0: // reset, or closed by the engine
			ok = false
		default: // bytes nobody asked for: the connection is out of step
			ok = false
		}
		return true
	})
	return ok && err == nil
}

// waitReadable blocks until rc's socket has bytes (or an error, or its
// end) without reading any.
func waitReadable(rc syscall.RawConn) error {
	var b [1]byte
	return rc.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return err != syscall.EAGAIN && err != syscall.EWOULDBLOCK
	})
}

// rawConn is c's socket, through wrappers that expose the connection they
// wrap (NetConn, as crypto/tls does).
func rawConn(c net.Conn) syscall.RawConn {
	for range 8 {
		if sc, ok := c.(syscall.Conn); ok {
			rc, err := sc.SyscallConn()
			if err != nil {
				return nil
			}
			return rc
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		c = u.NetConn()
	}
	return nil
}
