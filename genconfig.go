package k3

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"

	"github.com/k3go/k3/internal/engine"
	"github.com/k3go/k3/iox"
)

// GenerationConfigFile is the file whose eos_token_id gives a chat's stop
// tokens: beside the tokenizer (Options.TokenizerDir), else in the
// checkpoint directory.
const GenerationConfigFile = "generation_config.json"

// loadGenerationEOS reads eos_token_id (one id or a list) from
// generation_config.json in tokDir or ckptDir; no file is no ids.
func loadGenerationEOS(ckptDir, tokDir string) ([]int, error) {
	for _, dir := range []string{tokDir, ckptDir} {
		if dir == "" {
			continue
		}
		path := filepath.Join(dir, GenerationConfigFile)
		raw, err := iox.ReadFileLimit(path, engine.MaxConfigBytes)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if errors.Is(err, iox.ErrNotRegular) || errors.Is(err, iox.ErrTooLarge) {
			return nil, fmt.Errorf("k3: %w: %w", ErrBadConfig, err)
		}
		if err != nil {
			return nil, fmt.Errorf("k3: %w", err)
		}
		var cfg struct {
			EOS json.RawMessage `json:"eos_token_id"`
		}
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return nil, fmt.Errorf("k3: %s: %w: %v", path, ErrBadConfig, err)
		}
		e := bytes.TrimSpace(cfg.EOS)
		var ids []int
		switch {
		case len(e) == 0 || string(e) == "null":
		case e[0] == '[':
			err = json.Unmarshal(e, &ids)
		default:
			var id int
			err = json.Unmarshal(e, &id)
			ids = []int{id}
		}
		if err != nil {
			return nil, fmt.Errorf("k3: %s: %w: eos_token_id: %v", path, ErrBadConfig, err)
		}
		return ids, nil
	}
	return nil, nil
}

// StopTokens returns the ids a chat reply stops at: eos_token_id of the
// checkpoint's generation_config.json, and the tokenizer's <|end_of_msg|>
// and [EOS] (the released model may end with either).
func (m *Model) StopTokens() []int {
	ids := slices.Clone(m.eos)
	if m.tok != nil {
		for _, s := range []string{"<|end_of_msg|>", "[EOS]"} {
			if id, ok := m.tok.ID(s); ok && !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	return ids
}
