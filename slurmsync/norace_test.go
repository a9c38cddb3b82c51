//go:build !race

package slurmsync

const raceEnabled = false
