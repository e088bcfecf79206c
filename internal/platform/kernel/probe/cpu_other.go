//go:build !unix

package probe

import "time"

func processCPU() (time.Duration, bool) { return 0, false }
