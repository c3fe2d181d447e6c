//go:build race

package main

// raceEnabled says the test binary was built with -race.
const raceEnabled = true
