//go:build linux

package spool

import (
	"errors"
	"os"
	"syscall"
)

// canMap: on Linux a segment is preallocated and appended through a
// shared mapping (see mapping in spool.go).
const canMap = true

// preallocate reserves size bytes of disk for f, so that storing into a
// mapping of them never needs a block the disk does not have. It returns
// errNoPrealloc when the file system cannot.
func preallocate(f *os.File, size int64) error {
	err := syscall.Fallocate(int(f.Fd()), 0, 0, size)
	if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.EINVAL) {
		return errNoPrealloc
	}
	return err
}

func mapFile(f *os.File, size int) ([]byte, error) {
	return syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
}

func unmap(m []byte) error { return syscall.Munmap(m) }
