package k3

import (
	"github.com/k3go/k3/expert"
	"github.com/k3go/k3/internal/engine"
	"github.com/k3go/k3/internal/engine/planner"
	"github.com/k3go/k3/internal/engine/statefile"
	"github.com/k3go/k3/internal/platform/crash"
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
	ErrBudget = errBudget() // "RAM budget too small"
	// ErrNoTokenizer: a text operation on a model opened without a
	// tokenizer (tiktoken.model and tokenizer_config.json).
	ErrNoTokenizer = errNoTokenizer() // "no tokenizer"
	// ErrNonFinite: a step's activations, router scores or logits held a
	// NaN or an infinity, which means corrupt weights (NaN/Inf in a matrix
	// the loader does not scan), a corrupt saved state or an overflow; the
	// error names the layer and the op. The output would be garbage, so the
	// step fails; the sessions of its pass must be reset, the model stays
	// usable.
	ErrNonFinite = model.ErrNonFinite
	// ErrExpertLoad: a routed expert could not be read during a step; the
	// step fails instead of running without it.
	ErrExpertLoad = expert.ErrLoad
	// ErrBadOptions: an option value is invalid.
	ErrBadOptions = errBadOptions() // "invalid options"
	// ErrBadState: a saved session state (Session.Load) is truncated,
	// corrupt, or was saved with a model of another configuration or
	// checkpoint.
	ErrBadState = errBadState() // "bad saved state"
	// ErrInternal: a bug in k3. A panic on one of the engine's goroutines
	// (an I/O reader, the trunk's ring, a kernel worker) fails the step
	// with an error wrapping it, whose text names where it happened; its
	// stack is logged once. The process goes on, and the sessions of the
	// failed pass must be reset.
	ErrInternal = errInternal() // "internal error"
	// ErrSlice: the checkpoint directory is a rank's slice (Slice), and
	// it was opened by another rank of a cluster, or by one process: the
	// bytes that rank does not read are holes, which must not be read as
	// weights.
	ErrSlice = errSlice() // "the checkpoint is another rank's slice"
)

// The engine's sentinels, behind functions so that the documentation shows
// what they are rather than where they live (the io/fs idiom).
func errBudget() error      { return planner.ErrBudget }
func errNoTokenizer() error { return engine.ErrNoTokenizer }
func errBadOptions() error  { return engine.ErrBadOptions }
func errBadState() error    { return statefile.ErrBadState }
func errInternal() error    { return crash.ErrInternal }
func errSlice() error       { return engine.ErrSlice }
