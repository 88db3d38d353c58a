//go:build race

package testenv

// raceEnabled reports whether this test binary was built with -race; Build builds
// with the same flag, so that it finds every package already compiled.
const raceEnabled = true
