package trunk

import (
	"errors"
	"testing"
)

func FuzzParsePackIndex(f *testing.F) {
	f.Add([]byte(`{"format":"k3-trunk","version":1,"align":4096,"size":8192,"parts":[{"layer":0,"part":"attention","offset":0,"bytes":4096},{"layer":0,"part":"ffn","offset":4096,"bytes":4096}]}`))
	f.Add([]byte(`{"format":"k3-trunk","version":1,"align":4096,"size":4096,"parts":[{"offset":4095,"bytes":1}]}`))
	f.Add([]byte(`{"format":"other"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		x, err := ParsePackIndex(data)
		if err != nil {
			if !errors.Is(err, ErrPackMismatch) {
				t.Fatalf("error does not wrap ErrPackMismatch: %v", err)
			}
			return
		}
		var end int64
		for _, p := range x.Parts {
			if p.Offset%Align != 0 || p.Offset < end || p.Offset+p.Bytes > x.Size || p.Bytes < 0 {
				t.Fatalf("accepted a misplaced part %+v in a %d-byte file", p, x.Size)
			}
			end = p.Offset + p.Bytes
		}
	})
}
