package responses

import (
	"container/list"
	"encoding/json"
	"sync"

	"github.com/k3go/k3/chat"
)

// Store keeps the responses of /v1/responses (store: true, the
// API's default) for previous_response_id and GET / DELETE
// /v1/responses/{id}. It is bounded in count and in bytes: the least
// recently used go first, and a follow-up on one that went gets a 404.
type Store struct {
	mu       sync.Mutex
	max      int
	maxBytes int64
	bytes    int64
	order    *list.List // of *Stored, most recently used first
	byID     map[string]*list.Element
}

// Stored is one kept response.
type Stored struct {
	id     string
	object json.RawMessage // the response, as GET returns it
	// history is the conversation through this response's output, as
	// chat messages: what a follow-up continues. Instructions are not in
	// it (the API does not carry them over).
	history []chat.Message
	// conversation is the id of the chain's first response, the prefix
	// cache's key for a follow-up that gives no prompt_cache_key.
	conversation string
	size         int64
}

// NewStore keeps at most max responses of at most maxBytes in all (max 0
// keeps none).
func NewStore(max int, maxBytes int64) *Store {
	return &Store{max: max, maxBytes: maxBytes, order: list.New(), byID: map[string]*list.Element{}}
}

// sizeOf estimates the memory a stored response holds.
func sizeOf(object json.RawMessage, history []chat.Message) int64 {
	n := int64(len(object)) + 256
	for _, m := range history {
		n += int64(len(m.Content)+len(m.ReasoningContent)+len(m.ToolCallID)+len(m.Tool)) + 128
		for _, p := range m.Parts {
			n += int64(len(p.Text)) + 32
		}
		for _, c := range m.ToolCalls {
			n += int64(len(c.ID)+len(c.Function.Name)+len(c.Function.Arguments)) + 64
		}
	}
	return n
}

// Put keeps r, evicting the least recently used beyond the bounds. A
// response larger than all the room is not kept.
func (st *Store) Put(r *Stored) {
	if st.max <= 0 {
		return
	}
	r.size = sizeOf(r.object, r.history)
	if r.size > st.maxBytes {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if e, ok := st.byID[r.id]; ok {
		st.drop(e)
	}
	st.byID[r.id] = st.order.PushFront(r)
	st.bytes += r.size
	for st.order.Len() > st.max || st.bytes > st.maxBytes {
		st.drop(st.order.Back())
	}
}

func (st *Store) drop(e *list.Element) {
	r := st.order.Remove(e).(*Stored)
	delete(st.byID, r.id)
	st.bytes -= r.size
}

// Get returns the response id, if it is kept.
func (st *Store) Get(id string) (*Stored, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	e, ok := st.byID[id]
	if !ok {
		return nil, false
	}
	st.order.MoveToFront(e)
	return e.Value.(*Stored), true
}

// Remove forgets the response id and reports whether it was kept.
func (st *Store) Remove(id string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	e, ok := st.byID[id]
	if ok {
		st.drop(e)
	}
	return ok
}

// Object is the response as GET /v1/responses/{id} returns it.
func (r *Stored) Object() json.RawMessage { return r.object }
