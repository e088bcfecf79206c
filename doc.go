// Package k3 runs Kimi K3, a 2.78-trillion-parameter mixture-of-experts
// language model, on an ordinary CPU.
//
// # Quick start
//
//	m, err := k3.Open("/models/kimi-k3", k3.Options{})
//	if err != nil { ... }
//	defer m.Close()
//	for tok, err := range m.Generate(ctx, promptIDs, k3.GenerateOptions{MaxTokens: 32}) {
//		if err != nil { ... }
//		fmt.Println(tok.ID)
//	}
//
// # Model, sessions, steps
//
// A [Model] is a loaded checkpoint and is safe for concurrent use. A
// [Session] is one sequence: it owns the KDA recurrent state, the
// short-convolution histories and the latent MLA cache, so several sessions
// share one model. [Session.Step] feeds tokens and returns the logits of the
// last position; [Session.Logits] returns the logits of every position (one
// teacher-forced pass); [Session.Generate] streams generated tokens as an
// iter.Seq2. Decoding is incremental by default; [FullRecompute] re-runs the
// whole sequence per token and gives bit-identical logits.
//
// # Exactness
//
// Every reduction has a fixed order that depends only on the shapes and the
// selected kernels, never on the thread count, the prefill chunk or (with
// the streaming engine) the RAM budget: the same inputs give the same bits.
//
// # Errors
//
// Errors wrap the sentinels [ErrBadConfig], [ErrBadCheckpoint],
// [ErrTokenOutOfRange], [ErrContextFull], [ErrClosed], [ErrBudget] and
// [ErrBadOptions]; test them with errors.Is.
package k3
