//go:build !unix

package h1

import "net"

func alive(net.Conn) bool { return true }
