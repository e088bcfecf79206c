//go:build unix

package progress

import (
	"os"

	"golang.org/x/sys/unix"
)

// termWidth returns the terminal's columns, 80 if it cannot tell.
func termWidth(f *os.File) int {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Col == 0 {
		return 80
	}
	return int(ws.Col)
}
