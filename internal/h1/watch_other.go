//go:build !linux

package h1

const watcherSupported = false

type watchHandle struct{}

func watchConn(*conn) watchHandle { return watchHandle{} }

func (watchHandle) stop() {}
