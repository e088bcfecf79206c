package sysinfo

import (
	"fmt"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/windows"
)

// memoryStatusEx is Windows' MEMORYSTATUSEX.
type memoryStatusEx struct {
	length               uint32
	memoryLoad           uint32
	totalPhys            uint64
	availPhys            uint64
	totalPageFile        uint64
	availPageFile        uint64
	totalVirtual         uint64
	availVirtual         uint64
	availExtendedVirtual uint64
}

var procGlobalMemoryStatusEx = windows.NewLazySystemDLL("kernel32.dll").NewProc("GlobalMemoryStatusEx")

func memoryInfo(procRoot, cgRoot string) (MemInfo, error) {
	ms := memoryStatusEx{length: uint32(unsafe.Sizeof(memoryStatusEx{}))}
	if err := procGlobalMemoryStatusEx.Find(); err != nil {
		return MemInfo{}, fmt.Errorf("iox: GlobalMemoryStatusEx: %w", err)
	}
	if ok, _, err := procGlobalMemoryStatusEx.Call(uintptr(unsafe.Pointer(&ms))); ok == 0 {
		return MemInfo{}, fmt.Errorf("iox: GlobalMemoryStatusEx: %w", err)
	}
	return MemInfo{Total: int64(ms.totalPhys), Available: int64(min(ms.availPhys, ms.totalPhys))}, nil
}

func freeSpace(dir string) (DiskSpace, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return DiskSpace{}, fmt.Errorf("iox: %s: %w", dir, err)
	}
	p, err := windows.UTF16PtrFromString(abs)
	if err != nil {
		return DiskSpace{}, fmt.Errorf("iox: %s: %w", dir, err)
	}
	var free, total, totalFree uint64
	if err := windows.GetDiskFreeSpaceEx(p, &free, &total, &totalFree); err != nil {
		return DiskSpace{}, fmt.Errorf("iox: GetDiskFreeSpaceEx %s: %w", dir, err)
	}
	ds := DiskSpace{Free: int64(free), Total: int64(total)}
	// The file system's name, from the volume that holds dir.
	var root, fs [windows.MAX_PATH + 1]uint16
	if windows.GetVolumePathName(p, &root[0], uint32(len(root))) == nil &&
		windows.GetVolumeInformation(&root[0], nil, 0, nil, nil, nil, &fs[0], uint32(len(fs))) == nil {
		ds.FSType = windows.UTF16ToString(fs[:])
	}
	return ds, nil
}
