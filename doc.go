// Package k3 runs Kimi K3, a 2.78-trillion-parameter mixture-of-experts
// language model, on an ordinary CPU, in pure Go.
//
// A checkpoint directory holds config.json, the safetensors shards and,
// for text, the tokenizer (tiktoken.model and tokenizer_config.json).
// [Open] loads it into a [Model]; a [Session] is one sequence of tokens
// on it; [Model.Generate] and [Session.Generate] stream generated tokens;
// a [Conversation] is a chat in Kimi K3's own format that keeps its state
// from turn to turn.
//
// # Quick start
//
//	m, err := k3.Open("/models/kimi-k3", k3.Options{RAMBudget: 32e9})
//	if err != nil {
//		return err
//	}
//	defer m.Close()
//
//	prompt := m.Tokenizer().Encode("The capital of France is")
//	for tok, err := range m.Generate(ctx, prompt, k3.GenerateOptions{MaxTokens: 32}) {
//		if err != nil {
//			return err
//		}
//		fmt.Print(tok.Text)
//	}
//
// [Model.GenerateText] does the same and returns the text. The runnable
// examples below use a tiny synthetic checkpoint with random weights (its
// text is gibberish); so does "go run ./cmd/k3 run" without --model.
//
// # Models, sessions and concurrency
//
// A Model is safe for concurrent use. A Session owns everything one
// sequence needs (the KDA recurrent state, the short-convolution
// histories and the latent MLA cache of up to [Options].MaxContext
// positions), so many sessions share one model, each used by one
// goroutine at a time. [Session.Step] feeds tokens and returns the logits
// of the last position; [Session.Logits] returns the logits of every
// position (teacher forcing). Generated tokens become part of the session:
// a later Step or Generate continues the sequence. [Model.Generate] runs a
// fresh session per call; [Model.Step] uses one default session and is not
// for concurrent use.
//
// Decoding is incremental: the prompt is fed once (in chunks of
// Options.PrefillChunk tokens that share one pass over the weights), then
// one token per step. The logits are bit-identical to a fresh forward over
// the whole sequence per token, which the tests check ("k3 generate --mode
// full" does the same from the command line).
//
// # Streaming and cancellation
//
// Generate returns an iter.Seq2[[Token], error]: range over it and each
// token arrives as soon as it is chosen. Breaking out of the loop stops
// the generation at once and leaves the session usable. Cancelling the
// context stops the running forward pass at the next layer boundary; the
// sequence then yields the context's error, last (at most one error is
// ever yielded). A session whose step failed that way must be Reset.
// [Model.Close] stops every running generation with [ErrClosed] and waits
// for them.
//
// # Text
//
// With a tokenizer (see package [github.com/k3go/k3/tokenizer]), each
// Token carries Text: whole UTF-8 characters only, a character split
// across tokens coming out with the token that completes it.
// [GenerateOptions].StopStrings end a generation at a string even when it
// spans tokens; the stop string is never part of the text, and text that
// may begin one is held back until it is clear. StopTokens end it at
// token ids. Without a tokenizer, text operations fail with
// [ErrNoTokenizer]; ids still work.
//
// [Model.NewConversation] and [Model.NewChat] speak Kimi K3's chat format,
// XTML (package [github.com/k3go/k3/chat] renders and parses it): messages
// framed by <|open|>, <|close|>, <|sep|> and <|end_of_msg|>, replies with
// reasoning in a think channel, the answer in a response channel, and tool
// calls with typed arguments. [ChatOptions] declare tools, turn thinking
// off, set the effort, the tool choice and the response format; a turn
// is a user message, tool results or a system message declaring new tools
// ([Conversation.Stream]), and [Conversation.Reply] is the reply parsed
// into reasoning, content and tool calls. A reply stops at the checkpoint's
// generation_config.json eos_token_id, <|end_of_msg|> or [EOS]
// ([Model.StopTokens]). Message contents are plain text: "<|end_of_msg|>"
// typed by a user is not a control token. A Conversation keeps its session
// between turns, so turn two feeds only its own tokens;
// [Conversation.SaveFile] and [Conversation.LoadFile] persist it
// ([Session.Save] and [Session.Load] for any session).
//
// # Sampling
//
// The zero [SamplingOptions] is greedy decoding (argmax, the lower id on
// ties), as is any Temperature of 0. Otherwise the logits, after the
// repetition, presence and frequency penalties, are divided by the
// temperature and cut by TopK, then MinP, then TopP, and a token is drawn
// with a generator seeded by Seed: the same seed, prompt and options give
// the same tokens, whatever the thread count or RAM budget.
//
// # RAM budget
//
// [Options].RAMBudget is a hard limit on the memory the engine plans for.
// Zero means no limit: every weight is read into memory at Open. With a
// budget, Open first reserves a fixed floor: the output head, the small
// vectors, per-session state and MLA cache (Options.MaxContext positions
// for each of Options.Sessions sessions), scratch, and an expert cache
// of top-k+1 slots. The dense trunk comes next: the largest layer parts
// that fit stay resident, the others stream from disk through a ring of
// buffers, read ahead while the previous part computes (a trunk packed by
// [Pack] into Options.TrunkDir is read with one aligned request per part;
// one packed with PackOptions.Compress is decoded on every core as it is
// read, when [MeasureCompression] says that beats the disk).
// What is left enlarges the routed-expert cache, and finally holds the
// token embeddings, which are otherwise read one row per token. A budget
// below the floor fails with [ErrBudget], naming what the floor needs.
// The plan decides only where bytes live and when they are read: the
// output is identical under every budget. [Model.Stats] reports bytes
// read, cache hits and misses, time spent computing and waiting, and the
// peak RSS.
//
// # Exactness
//
// Every reduction has a fixed order that depends only on the shapes and
// the selected kernels, never on the thread count, the prefill chunk or
// the RAM budget: the same inputs give the same bits.
//
// # Errors
//
// Errors wrap the sentinels [ErrBadConfig], [ErrBadCheckpoint],
// [ErrTokenOutOfRange], [ErrContextFull], [ErrClosed], [ErrBudget],
// [ErrNoTokenizer], [ErrNonFinite], [ErrExpertLoad], [ErrBadOptions],
// [ErrBadState] and [ErrInternal]; test them with errors.Is.
//
// # Platforms
//
// k3 needs no cgo and builds for every GOOS and GOARCH that Go supports.
// On Linux it reads the checkpoint with O_DIRECT where the file system
// allows it, into aligned buffers mapped outside the Go heap; elsewhere
// reads are buffered and buffers come from the heap. The k3 command (cmd/k3) adds run, tokenize, generate,
// pack, synth and more; examples/ holds a quick start, a streaming
// program and an OpenAI-compatible HTTP server.
package k3
