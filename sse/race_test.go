//go:build race

package sse_test

func init() { raceEnabled = true }
