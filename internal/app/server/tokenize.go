package server

import (
	"net/http"
	"unicode/utf8"

	"github.com/k3go/k3/internal/app/server/internal/wire"
)

// tokenizeRequest is a POST /tokenize body, as llama-server takes it.
type tokenizeRequest struct {
	Content string `json:"content"`
	// AddSpecial would add a BOS token; Kimi K3 has none, so there is
	// nothing to add.
	AddSpecial bool `json:"add_special"`
	// ParseSpecial (default true) reads added-token strings such as
	// <|end_of_msg|> as their tokens; false reads them as plain text.
	ParseSpecial *bool `json:"parse_special"`
	WithPieces   bool  `json:"with_pieces"`
}

// piece is a token with its text: a string when it is valid UTF-8, else
// its bytes (as llama-server does).
type piece struct {
	ID    int `json:"id"`
	Piece any `json:"piece"`
}

type detokenizeRequest struct {
	Tokens []int `json:"tokens"`
}

// withDecode runs f under a decode place and the body deadline, like a
// generation request's body (tokenizing is as heavy as decoding).
func (s *Server) withDecode(w http.ResponseWriter, r *http.Request, f func()) {
	ctx, cancel := s.requestContext(r.Context())
	defer cancel()
	if err := s.lim.startDecode(ctx); err != nil {
		writeAPIError(w, s.serverError(err))
		return
	}
	defer s.lim.endDecode()
	if s.inDecode != nil {
		s.inDecode(+1)
		defer s.inDecode(-1)
	}
	f()
}

func (s *Server) tokenize(w http.ResponseWriter, r *http.Request) {
	s.withDecode(w, r, func() {
		var req tokenizeRequest
		if e := s.decode(w, r, &req); e != nil {
			writeAPIError(w, e)
			return
		}
		var ids []int
		if req.ParseSpecial == nil || *req.ParseSpecial {
			ids = s.tok.Encode(req.Content)
		} else {
			ids = s.tok.EncodeOrdinary(req.Content)
		}
		if !req.WithPieces {
			wire.WriteJSON(w, http.StatusOK, map[string]any{"tokens": append([]int{}, ids...)})
			return
		}
		out := make([]piece, len(ids))
		for i, id := range ids {
			b, _ := s.tok.TokenBytes(id)
			out[i] = piece{ID: id, Piece: string(b)}
			if !utf8.Valid(b) {
				bs := make([]int, len(b))
				for k, c := range b {
					bs[k] = int(c)
				}
				out[i].Piece = bs
			}
		}
		wire.WriteJSON(w, http.StatusOK, map[string]any{"tokens": out})
	})
}

func (s *Server) detokenize(w http.ResponseWriter, r *http.Request) {
	s.withDecode(w, r, func() {
		var req detokenizeRequest
		if e := s.decode(w, r, &req); e != nil {
			writeAPIError(w, e)
			return
		}
		V := s.m.Config().Vocab
		for i, id := range req.Tokens {
			if id < 0 || id >= V {
				writeAPIError(w, wire.BadRequest("tokens", "", "tokens[%d] = %d is outside the vocabulary [0, %d)", i, id, V))
				return
			}
		}
		wire.WriteJSON(w, http.StatusOK, map[string]string{"content": s.tok.DecodeLenient(req.Tokens)})
	})
}
