//go:build !unix

package iox

import "errors"

func lockDir(dir string) (func(), error) { return nil, errors.ErrUnsupported }
