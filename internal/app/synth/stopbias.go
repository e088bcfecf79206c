package synth

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
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

// closeTokenIDs finds the tokens WriteOptions.CloseBias favours:
// <|close|> in tokenizer_config.json, which ends the reasoning, an
// argument (a string argument's raw text) and every element of the
// format, and the one-byte token ", which ends a JSON string, in
// tiktoken.model.
func closeTokenIDs(config, model []byte, vocab int) ([]int, error) {
	var c struct {
		Added map[string]struct {
			Content string `json:"content"`
		} `json:"added_tokens_decoder"`
	}
	if err := json.Unmarshal(config, &c); err != nil {
		return nil, fmt.Errorf("synth: close bias: tokenizer_config.json: %w", err)
	}
	ids := []int{-1, -1}
	for id, a := range c.Added {
		if a.Content == "<|close|>" {
			n, err := strconv.Atoi(id)
			if err != nil {
				return nil, fmt.Errorf("synth: close bias: tokenizer_config.json: added token id %q", id)
			}
			ids[0] = n
		}
	}
	quote := base64.StdEncoding.EncodeToString([]byte(`"`)) + " "
	for _, line := range strings.Split(string(model), "\n") {
		if rank, ok := strings.CutPrefix(strings.TrimSpace(line), quote); ok {
			n, err := strconv.Atoi(strings.TrimSpace(rank))
			if err != nil {
				return nil, fmt.Errorf("synth: close bias: tiktoken.model: rank %q", rank)
			}
			ids[1] = n
		}
	}
	for k, name := range []string{"<|close|>", `"`} {
		if ids[k] < 0 || ids[k] >= vocab {
			return nil, fmt.Errorf("synth: close bias: the tokenizer has no %s token in the vocabulary of %d", name, vocab)
		}
	}
	return ids, nil
}

// biasStops makes the head's rows of the two stop tokens ±bias along the
// first hidden dimension and zero elsewhere: whatever the sign of the
// final hidden state's first component, one of the two stop tokens gets a
// logit of about bias times its size, so a sampled reply ends after a few
// tokens instead of running to its limit.
func (L *Layout) biasStops(ids []int, bias float64) { L.biasRows(ids, bias, 0) }

// biasCloses does for the close tokens what biasStops does for the stop
// tokens, along the second hidden dimension, so that the two biases are
// independent: at a position where the stop tokens are masked (inside a
// constrained answer), <|close|> or the quote still stands out half the
// time each.
func (L *Layout) biasCloses(ids []int, bias float64) { L.biasRows(ids, bias, 1) }

// biasRows makes the head's rows of ids ±bias (alternating, from +) along
// hidden dimension dim and zero elsewhere.
func (L *Layout) biasRows(ids []int, bias float64, dim int) {
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
				binary.LittleEndian.PutUint16(row[2*dim:], uint16(math.Float32bits(v)>>16))
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
