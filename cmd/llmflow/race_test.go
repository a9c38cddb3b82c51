//go:build race

package main

// raceEnabled: the tests run under the race detector (slower processes).
const raceEnabled = true
