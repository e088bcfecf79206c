package k3

import (
	"errors"

	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/model"
)

// Sentinel errors. Every error k3 returns wraps one of these where it
// applies; test with errors.Is.
var (
	// ErrBadConfig: config.json is missing keys, has mistyped values or
	// describes an impossible model.
	ErrBadConfig = model.ErrBadConfig
	// ErrBadCheckpoint: the checkpoint's files or tensors are missing,
	// malformed, of the wrong dtype or shape, or changed on disk.
	ErrBadCheckpoint = model.ErrBadCheckpoint
	// ErrTokenOutOfRange: a token id outside [0, vocab).
	ErrTokenOutOfRange = model.ErrTokenOutOfRange
	// ErrContextFull: the sequence would exceed the session's capacity
	// (Options.MaxContext).
	ErrContextFull = model.ErrContextFull
	// ErrClosed: the Model was closed (a running step stops at the next
	// layer boundary with it), or the Session (Session.Close).
	ErrClosed = model.ErrClosed
	// ErrBudget: Options.RAMBudget cannot hold the model's fixed floor
	// (Open), a model without a budget does not fit the machine's memory
	// (Open), or every session slot the budget reserves
	// (Options.Sessions) is held by another session when one more needs
	// state (a step, Fork, Load).
	ErrBudget = model.ErrBudget
	// ErrNoTokenizer: a text operation on a model opened without a
	// tokenizer (tiktoken.model and tokenizer_config.json).
	ErrNoTokenizer = errors.New("no tokenizer")
	// ErrNonFinite: a step's activations, router scores or logits held a
	// NaN or an infinity, which means corrupt weights (NaN/Inf in a matrix
	// the loader does not scan), a corrupt saved state or an overflow; the
	// error names the layer and the op. The output would be garbage, so the
	// step fails; the sessions of its pass must be reset, the model stays
	// usable.
	ErrNonFinite = model.ErrNonFinite
	// ErrExpertLoad: a routed expert could not be read during a step; the
	// step fails instead of running without it.
	ErrExpertLoad = model.ErrExpertLoad
	// ErrBadOptions: an option value is invalid.
	ErrBadOptions = errors.New("invalid options")
	// ErrBadState: a saved session state (Session.Load) is truncated,
	// corrupt, or was saved with a model of another configuration or
	// checkpoint.
	ErrBadState = model.ErrBadState
)

// checkpointErr marks low-level container errors as checkpoint errors.
func checkpointErr(err error) error {
	if err == nil || errors.Is(err, ErrBadCheckpoint) {
		return err
	}
	if errors.Is(err, iox.ErrFormat) || errors.Is(err, iox.ErrCheckpoint) || errors.Is(err, iox.ErrNotFound) || errors.Is(err, iox.ErrNotRegular) {
		return &wrapped{err: err, kind: ErrBadCheckpoint}
	}
	return err
}

// wrapped adds a sentinel to an error chain without changing its message.
type wrapped struct {
	err  error
	kind error
}

func (w *wrapped) Error() string   { return w.err.Error() }
func (w *wrapped) Unwrap() []error { return []error{w.err, w.kind} }
