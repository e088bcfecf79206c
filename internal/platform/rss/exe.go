package rss

import (
	"crypto/fips140"
	"debug/elf"
	"os"
	"sync"
)

var (
	exeOnce  sync.Once
	exeBytes int64
)

// bssCounted is how much of the executable's zero-filled data
// ExecutableBytes counts outside FIPS mode. Zero-filled pages become
// resident only when written: k3 has 76 kB of its 33.8 MB resident, and the
// one large object a Go program carries there, the FIPS 140 DRBG's 32 MiB
// buffer, is written only in FIPS mode.
const bssCounted = 4 << 20

// ExecutableBytes returns an upper bound of the resident memory the running
// executable itself accounts for: the file-backed part of every loadable
// segment of its ELF file (text, read-only data, data) in full, and its
// zero-filled part (bss) up to bssCounted, or in full in FIPS mode; all
// page-rounded. Where the executable is not ELF, its file size. Computed
// once per process.
func ExecutableBytes() int64 {
	exeOnce.Do(func() { exeBytes = executableBytes() })
	return exeBytes
}

func executableBytes() int64 {
	path, err := os.Executable()
	if err != nil {
		return 0
	}
	if f, err := elf.Open(path); err == nil {
		defer f.Close()
		var file, zero int64
		const page = 4096
		for _, p := range f.Progs {
			if p.Type != elf.PT_LOAD {
				continue
			}
			// The segment occupies whole pages from the page holding its
			// first byte to the page holding its last; the file's part
			// ends with the page holding its last file byte.
			start := int64(p.Vaddr) &^ (page - 1)
			fileEnd := (int64(p.Vaddr+p.Filesz) + page - 1) &^ (page - 1)
			end := (int64(p.Vaddr+p.Memsz) + page - 1) &^ (page - 1)
			file += fileEnd - start
			zero += end - fileEnd
		}
		if file > 0 {
			if !fips140.Enabled() {
				zero = min(zero, bssCounted)
			}
			return file + zero
		}
	}
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}
