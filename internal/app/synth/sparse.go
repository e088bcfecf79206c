package synth

import (
	"fmt"
	"os"
	"path/filepath"
)

// Full returns a profile with the released Kimi K3's shape and files: the
// real widths of Medium, 93 layers (every fourth and the last MLA), 896
// routed experts per layer, top 16, the release's 163,840-entry
// vocabulary, the released tensor names, shapes and dtypes, in the
// release's layout (ReleaseLayout: one layer per shard, 96 shards, the
// tensors in safetensors' canonical order, the vision tower's 168 tensors
// beside the language model's 497,052). Written whole it would be 1.56
// TB; WriteSparse writes it in seconds as headers and holes.
func Full() Profile {
	p := Medium()
	p.Name = "full"
	p.SetLayers(93)
	p.Config.Experts = 896
	p.Config.Vocab = 163840
	return ReleaseLayout(p)
}

// Released is Full under the name it had first.
func Released() Profile {
	p := Full()
	p.Name = "released"
	return p
}

// WriteSparse writes the checkpoint of profile p into dir as sparse files:
// config.json, the index and every shard's header are real, the tensor
// data are holes (zeros, no disk space). The headers describe exactly what
// Write would write, so a planner or an inspection (k3.Inspect, k3 doctor)
// sees the full checkpoint; reading weights from it gives zeros. dir must
// not exist. shardSize is as in PlanLayout. Only the headers take disk
// space: about 75 MB of JSON for the full profile, as in the release, and
// the index. A profile with Tokenizer gets the generated tokenizer and its
// generation_config.json too, so that text commands run on it.
func WriteSparse(dir string, p Profile, shardSize int64) (*Layout, error) {
	L, err := PlanLayout(p, shardSize)
	if err != nil {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	for _, sh := range L.Shards {
		f, err := os.OpenFile(filepath.Join(dir, sh.Name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, fmt.Errorf("synth: %w", err)
		}
		_, err = f.Write(sh.header)
		if err == nil {
			err = f.Truncate(sh.Size)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("synth: %s: %w", sh.Name, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, IndexFile), L.indexJSON, 0o644); err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	if p.Tokenizer {
		if err := WriteTokenizer(dir, p.Config.Vocab); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), L.configJSON, 0o644); err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	return L, nil
}
