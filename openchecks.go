package k3

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/model"
	"github.com/k3go/k3/tokenizer"
)

// maxConfigBytes bounds config.json (the release's is under 4 KiB): it is
// read whole into memory, so a symlink to /dev/zero or a huge file must be
// refused before reading.
const maxConfigBytes = 1 << 20

// readConfig reads and parses dir's config.json. A missing, oversized or
// non-regular file is ErrBadConfig; a file that exists but cannot be read
// (permissions, I/O) keeps its own error, which is not the config's fault.
func readConfig(path string) (*model.Config, error) {
	raw, err := iox.ReadFileLimit(path, maxConfigBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, iox.ErrNotRegular), errors.Is(err, iox.ErrTooLarge):
		return nil, fmt.Errorf("k3: %w: %w", ErrBadConfig, err)
	case err != nil:
		return nil, fmt.Errorf("k3: reading config: %w", err)
	}
	cfg, err := model.ParseConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("k3: %s: %w", path, err)
	}
	return cfg, nil
}

// checkTokenizerFits refuses a tokenizer with ids the model has no
// embedding row for: they would only fail once a generation met them.
func checkTokenizerFits(tok *tokenizer.Tokenizer, cfg *model.Config) error {
	if tok == nil || tok.VocabSize() <= cfg.Vocab {
		return nil
	}
	return fmt.Errorf("k3: %w: the tokenizer has %d ids, the model's vocabulary %d", ErrBadCheckpoint, tok.VocabSize(), cfg.Vocab)
}

// memoryLimit returns the memory the process may hold (RAM, or a smaller
// cgroup limit), 0 if unknown.
func memoryLimit() int64 {
	mi, err := iox.MemoryInfo()
	if err != nil {
		return 0
	}
	return mi.Limit()
}

// checkResidentFits refuses, before anything is allocated, a model opened
// without a budget (everything resident) that needs more memory than the
// machine has: the allocator would otherwise kill the process.
// machine, if not nil, replaces memoryLimit (tests shrink the machine).
func checkResidentFits(mem *model.MemoryPlan, machine func() int64) error {
	if machine == nil {
		machine = memoryLimit
	}
	limit := machine()
	if limit <= 0 || mem.Total() <= limit {
		return nil
	}
	return fmt.Errorf("%w: with no RAM budget every weight is resident: %s needed, the machine has %s; set Options.RAMBudget to stream the weights",
		ErrBudget, model.Human(mem.Total()), model.Human(limit))
}
