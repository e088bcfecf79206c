//go:build !linux && !darwin && !freebsd && !windows

package sysinfo

import "errors"

func memoryInfo(procRoot, cgRoot string) (MemInfo, error) { return MemInfo{}, errUnsupported }

func freeSpace(dir string) (DiskSpace, error) { return DiskSpace{}, errUnsupported }

var errUnsupported = errors.ErrUnsupported
