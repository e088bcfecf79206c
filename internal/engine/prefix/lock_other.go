//go:build !unix

package prefix

import (
	"errors"
	"io/fs"
	"os"
)

const canLock = false

func tryLock(f *os.File) (bool, error) { return true, nil }

func isNoSpace(err error) bool { return false }

func isNotPermitted(err error) bool { return errors.Is(err, fs.ErrPermission) }
