package lexer

import (
	"cmp"
	"slices"
	"strings"
)

// Trie holds token byte strings in preorder: node i has the byte by[i]
// at depth dep[i] (the root, node 0, has depth 0 and no byte), its
// subtree is the nodes [i, skip[i]), and the tokens ending there are
// ids[rec[i]:rec[i+1]].
type Trie struct {
	By   []byte
	Dep  []uint16
	Skip []int32
	Rec  []int32
	IDs  []int32
	// aux, when set, carries one value per entry of ids (the characters
	// before the quote, in a string's exit Trie).
	Aux []uint32
}

// Nodes returns the number of nodes, the root included.
func (t *Trie) Nodes() int { return len(t.By) }

// BuildTrie builds the trie of the non-empty strings in toks, keyed by
// their index.
func BuildTrie(toks []string) Trie {
	var order []int32
	for id, s := range toks {
		if s != "" {
			order = append(order, int32(id))
		}
	}
	slices.SortFunc(order, func(a, b int32) int {
		if c := strings.Compare(toks[a], toks[b]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	keys := make([]string, len(order))
	for k, id := range order {
		keys[k] = toks[id]
	}
	return buildTrieFrom(keys, order, nil)
}

// buildTrieFrom builds a trie of keys (sorted, possibly repeated or
// empty), recording ids[k] (and aux[k], if aux is not nil) at the node of
// keys[k].
func buildTrieFrom(keys []string, ids []int32, aux []uint32) Trie {
	t := Trie{By: []byte{0}, Dep: []uint16{0}, Skip: []int32{0}, Rec: []int32{0}}
	t.IDs = make([]int32, 0, len(ids))
	if aux != nil {
		t.Aux = make([]uint32, 0, len(aux))
	}
	path := []int32{0} // node at each depth of the current key
	prev := ""
	for k, key := range keys {
		lcp := 0
		for lcp < len(key) && lcp < len(prev) && key[lcp] == prev[lcp] {
			lcp++
		}
		// Close the nodes deeper than the shared prefix.
		for len(path) > lcp+1 {
			n := path[len(path)-1]
			t.Skip[n] = int32(len(t.By))
			path = path[:len(path)-1]
		}
		for d := lcp; d < len(key); d++ {
			t.By = append(t.By, key[d])
			t.Dep = append(t.Dep, uint16(d+1))
			t.Skip = append(t.Skip, 0)
			t.Rec = append(t.Rec, int32(len(t.IDs)))
			path = append(path, int32(len(t.By)-1))
		}
		// Every node after the key's own node starts past its record, so
		// the node's records run to the next node's start.
		t.IDs = append(t.IDs, ids[k])
		if aux != nil {
			t.Aux = append(t.Aux, aux[k])
		}
		prev = key
	}
	for len(path) > 0 {
		n := path[len(path)-1]
		t.Skip[n] = int32(len(t.By))
		path = path[:len(path)-1]
	}
	t.Rec = append(t.Rec, int32(len(t.IDs)))
	return t
}

// records returns the range of ids (and aux) ending at node i.
func (t *Trie) Records(i int) (int32, int32) {
	return t.Rec[i], t.Rec[i+1]
}
