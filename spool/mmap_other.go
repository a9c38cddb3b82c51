//go:build !linux

package spool

import (
	"errors"
	"os"
)

// canMap: elsewhere every append is a write(2).
const canMap = false

func preallocate(*os.File, int64) error { return errNoPrealloc }

func mapFile(*os.File, int) ([]byte, error) { return nil, errors.ErrUnsupported }

func unmap([]byte) error { return nil }
