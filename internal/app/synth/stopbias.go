package synth

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// Stop tokens the head can be biased towards (WriteOptions.StopBias): a
// chat reply ends at either.
var stopTokenNames = []string{"<|end_of_msg|>", "[EOS]"}

// stopTokenIDs finds the stop tokens in a tokenizer_config.json.
func stopTokenIDs(config []byte, vocab int) ([]int, error) {
	var c struct {
		Added map[string]struct {
			Content string `json:"content"`
		} `json:"added_tokens_decoder"`
	}
	if err := json.Unmarshal(config, &c); err != nil {
		return nil, fmt.Errorf("synth: stop bias: tokenizer_config.json: %w", err)
	}
	ids := make([]int, len(stopTokenNames))
	for k, name := range stopTokenNames {
		ids[k] = -1
		for id, a := range c.Added {
			if a.Content == name {
				n, err := strconv.Atoi(id)
				if err != nil {
					return nil, fmt.Errorf("synth: stop bias: tokenizer_config.json: added token id %q", id)
				}
				ids[k] = n
			}
		}
		if ids[k] < 0 || ids[k] >= vocab {
			return nil, fmt.Errorf("synth: stop bias: the tokenizer has no %s token in the vocabulary of %d", name, vocab)
		}
	}
	return ids, nil
}

// biasStops makes the head's rows of the two stop tokens ±bias along the
// first hidden dimension and zero elsewhere: whatever the sign of the
// final hidden state's first component, one of the two stop tokens gets a
// logit of about bias times its size, so a sampled reply ends after a few
// tokens instead of running to its limit.
func (L *Layout) biasStops(ids []int, bias float64) {
	for s := range L.Shards {
		for i := range L.Shards[s].Tensors {
			t := &L.Shards[s].Tensors[i]
			if t.Name != lmHeadName {
				continue
			}
			rowBytes := uint64(t.Shape[1]) * 2
			rows := map[uint64][]byte{}
			for k, id := range ids {
				row := make([]byte, rowBytes)
				v := float32(bias)
				if k%2 == 1 {
					v = -v
				}
				binary.LittleEndian.PutUint16(row, uint16(math.Float32bits(v)>>16))
				rows[uint64(id)] = row
			}
			t.gen = rowOverride{base: t.gen, rowBytes: rowBytes, rows: rows}
		}
	}
}

// rowOverride is a BF16 matrix's generator with some rows replaced.
type rowOverride struct {
	base     generator
	rowBytes uint64
	rows     map[uint64][]byte
}

func (g rowOverride) fillWords(dst []byte, w0 uint64) {
	g.base.fillWords(dst, w0)
	lo, hi := 8*w0, 8*w0+uint64(len(dst))
	for r, row := range g.rows {
		start, end := r*g.rowBytes, (r+1)*g.rowBytes
		if end <= lo || start >= hi {
			continue
		}
		from, to := max(start, lo), min(end, hi)
		copy(dst[from-lo:to-lo], row[from-start:to-start])
	}
}
