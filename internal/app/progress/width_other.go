//go:build !unix

package progress

import "os"

// termWidth returns 80: the width of a console is not asked here.
func termWidth(*os.File) int { return 80 }
