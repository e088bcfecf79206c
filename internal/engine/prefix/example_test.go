package prefix_test

import (
	"fmt"
	"io"
	"os"

	"github.com/k3go/k3/internal/engine/prefix"
)

// An engine saves the blocks and the state at the end of a prompt; the
// next turn of the conversation finds them and restores instead of
// prefilling.
func Example() {
	dir, _ := os.MkdirTemp("", "prefix-example-")
	defer os.RemoveAll(dir)
	s, err := prefix.Open(prefix.Options{Fingerprint: "model fingerprint", BlockSize: 4,
		RAMBytes: 1 << 20, Dir: dir, DiskBytes: 1 << 30})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()

	// Turn 1: ten tokens. After its prefill, save its two full blocks and
	// the state at its end.
	turn1 := []int{101, 102, 103, 104, 105, 106, 107, 108, 109, 110}
	p := s.Prompt(turn1)
	for i := range p.Blocks() {
		k, m := p.BlockMeta(i)
		m.Size, m.Saves = 16, 1<<20 // the latents of 4 positions; the reads a hit avoids
		s.Put(k, m, func(w io.Writer) error { _, err := w.Write(make([]byte, 16)); return err })
	}
	k, m := p.StateMeta(p.Len())
	m.Size, m.Saves = 64, 1<<22
	s.Put(k, m, func(w io.Writer) error { _, err := w.Write(make([]byte, 64)); return err })

	// Turn 2 resends turn 1, the reply and a new message.
	turn2 := append(turn1, 201, 202, 203, 301, 302)
	p2 := s.Prompt(turn2)
	hit := s.Lookup(p2, p2.Len())
	fmt.Printf("resume at %d of %d tokens: %d blocks, then the state\n", hit.Pos, p2.Len(), hit.Anchor)
	r, err := s.Get(hit.State)
	if err != nil {
		fmt.Println(err)
		return
	}
	state := make([]byte, r.Meta().Size)
	io.ReadFull(r, state)
	fmt.Println("state verified:", r.Close() == nil)
	// Output:
	// resume at 10 of 15 tokens: 2 blocks, then the state
	// state verified: true
}
