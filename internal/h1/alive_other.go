//go:build !unix

package h1

import (
	"net"
	"syscall"
)

func alive(net.Conn) bool { return true }

func waitReadable(syscall.RawConn) error { return nil }

func rawConn(net.Conn) syscall.RawConn { return nil }
