//go:build !linux

package grammar_test

import "time"

func threadCPU() (time.Duration, bool) { return 0, false }
