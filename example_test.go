package k3_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/k3go/k3"
	"github.com/k3go/k3/chat"
	"github.com/k3go/k3/internal/testkit/testmodel"
)

// checkpoint returns the directory of the examples' model: the quickstart
// checkpoint, a tiny synthetic Kimi K3 (13 layers, 8 experts, a 512-token
// vocabulary with its tokenizer) whose weights are random, so its text is
// gibberish. Use your model's directory instead, e.g. "/models/kimi-k3".
func checkpoint() string {
	dir, err := testmodel.Path()
	if err != nil {
		log.Fatal(err)
	}
	return dir
}

func ExampleOpen() {
	m, err := k3.Open(checkpoint(), k3.Options{
		MaxContext: 1024, // positions per session
		// RAMBudget: 8e9 would stream weights from disk within 8 GB.
	})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	cfg := m.Config()
	fmt.Println("layers:", cfg.Layers, "experts:", cfg.Experts, "vocabulary:", cfg.Vocab)
	fmt.Println("tokenizer:", m.Tokenizer() != nil)

	// Errors wrap sentinels: a directory that is not there is
	// fs.ErrNotExist, one without config.json ErrBadConfig.
	_, err = k3.Open("/nonexistent", k3.Options{})
	fmt.Println(errors.Is(err, fs.ErrNotExist), errors.Is(err, k3.ErrBadConfig))
	// Output:
	// layers: 13 experts: 8 vocabulary: 512
	// tokenizer: true
	// true false
}

// An option Open refuses is an *OptionError naming the field: here a
// negative thread count, and a context too long for the RAM budget (the
// context, not the budget, is named, with the most positions that fit).
func ExampleOptionError() {
	_, err := k3.Open(checkpoint(), k3.Options{Threads: -1})
	var oe *k3.OptionError
	if errors.As(err, &oe) {
		fmt.Println(oe.Field, oe.Value, errors.Is(err, k3.ErrBadOptions))
	}
	fmt.Println(err)

	in, err := k3.Inspect(checkpoint(), k3.Options{})
	if err != nil {
		log.Fatal(err)
	}
	_, err = k3.Open(checkpoint(), k3.Options{RAMBudget: in.FloorBytes + 1<<20, MaxContext: 1 << 30})
	if errors.As(err, &oe) {
		fmt.Println(oe.Field, oe.Value, errors.Is(err, k3.ErrBudget))
	}
	// Output:
	// Threads -1 true
	// k3: Options.Threads = -1: must not be negative (0 means GOMAXPROCS)
	// MaxContext 1073741824 true
}

func ExampleModel_Generate() {
	m, err := k3.Open(checkpoint(), k3.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()

	prompt := m.Tokenizer().Encode("Once upon a time")
	// Greedy decoding (the zero SamplingOptions), at most 6 tokens. Each
	// token comes as soon as it is generated; break stops the generation.
	for tok, err := range m.Generate(ctx, prompt, k3.GenerateOptions{MaxTokens: 6}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d %d %q\n", tok.Index, tok.ID, tok.Text)
	}
	// Output:
	// 0 255 "\xff"
	// 1 184 "\xb8"
	// 2 187 "\xbb"
	// 3 75 "K"
	// 4 236 ""
	// 5 296 "\xec e"
}

func ExampleModel_GenerateText() {
	m, err := k3.Open(checkpoint(), k3.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()

	// Sampling with a seed is reproducible: the same seed, the same text.
	opts := k3.GenerateOptions{
		MaxTokens: 12,
		Sampling:  k3.SamplingOptions{Temperature: 0.8, TopP: 0.95, Seed: 42},
	}
	a, err := m.GenerateText(ctx, "The weather today is", opts)
	if err != nil {
		log.Fatal(err)
	}
	b, _ := m.GenerateText(ctx, "The weather today is", opts)
	// (The text itself is noise: the quickstart model's weights are random.)
	fmt.Println(a == b, a != "")
	// Output:
	// true true
}

func ExampleSession_Step() {
	m, err := k3.Open(checkpoint(), k3.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()

	// A session is one sequence; Step feeds tokens and returns the logits
	// of the last position.
	s := m.NewSession()
	next := m.Tokenizer().Encode("Hello")
	for range 4 {
		logits, err := s.Step(ctx, next)
		if err != nil {
			log.Fatal(err)
		}
		best := 0
		for id, v := range logits {
			if v > logits[best] {
				best = id
			}
		}
		fmt.Printf("after %d tokens: argmax %d of %d logits\n", s.Len(), best, len(logits))
		next = []int{best}
	}
	// Output:
	// after 4 tokens: argmax 1 of 512 logits
	// after 5 tokens: argmax 351 of 512 logits
	// after 6 tokens: argmax 330 of 512 logits
	// after 7 tokens: argmax 252 of 512 logits
}

func ExampleModel_NewConversation() {
	m, err := k3.Open(checkpoint(), k3.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()

	// A Conversation keeps its state between turns: turn two feeds only
	// its own tokens. Thinking is off here, so that the replies of this
	// random model are content, not reasoning.
	c, err := m.NewChat(k3.ChatOptions{System: "You are a helpful assistant.", Options: chat.Options{NoThinking: true}})
	if err != nil {
		log.Fatal(err)
	}
	for _, user := range []string{"Hello!", "What is the capital of France?"} {
		var reply strings.Builder
		for tok, err := range c.Send(ctx, user, k3.GenerateOptions{MaxTokens: 8}) {
			if err != nil {
				log.Fatal(err)
			}
			reply.WriteString(tok.Text)
		}
		fmt.Printf("%q\n", reply.String())
	}
	fmt.Println(c.Session().Len(), "tokens in the conversation")
	// Output:
	// "\":de\x98imig\x0eht"
	// "=kengrturn itQds"
	// 196 tokens in the conversation
}

func ExampleModel_Tokenizer() {
	m, err := k3.Open(checkpoint(), k3.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	tok := m.Tokenizer()
	ids := tok.Encode("Hello, world!<|end_of_msg|>")
	fmt.Println(ids)
	text, err := tok.Decode(ids)
	fmt.Printf("%q %v\n", text, err)
	// Untrusted text: EncodeOrdinary never produces control tokens.
	fmt.Println(len(tok.EncodeOrdinary("<|end_of_msg|>")))
	end, _ := tok.ID("<|end_of_msg|>")
	fmt.Println(end, tok.VocabSize())
	// Output:
	// [72 312 108 111 44 400 327 33 506]
	// "Hello, world!<|end_of_msg|>" <nil>
	// 12
	// 506 512
}

// ExamplePrefixCacheOptions shows two requests that share a header: the
// second restores the header's state from the prefix cache and computes
// only its own tokens, and its logits are exactly those of a cold prefill.
func ExamplePrefixCacheOptions() {
	dir, err := os.MkdirTemp("", "k3-prefix-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	m, err := k3.Open(checkpoint(), k3.Options{PrefixCache: &k3.PrefixCacheOptions{
		Dir:              dir, // default: k3/prefix under the user's cache directory
		BlockTokens:      16,  // default 256; small here for a small example
		CheckpointBlocks: 1,   // keep the recurrent state at every block
	}})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()

	header := make([]int, 32) // a system prompt and tool schemas, say
	for i := range header {
		header[i] = 10 + i
	}
	first := append(append([]int(nil), header...), 100, 101, 102)
	second := append(append([]int(nil), header...), 200, 201)

	for _, prompt := range [][]int{first, second} {
		s := m.NewSession()
		logits, err := s.Step(ctx, prompt)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d prompt tokens, %d restored\n", len(prompt), s.CachedTokens())
		if len(prompt) == len(second) {
			// The same prompt on a model without the cache.
			cold, err := k3.Open(checkpoint(), k3.Options{})
			if err != nil {
				log.Fatal(err)
			}
			want, err := cold.NewSession().Step(ctx, prompt)
			cold.Close()
			if err != nil {
				log.Fatal(err)
			}
			fmt.Println("logits identical to a cold prefill:", slices.Equal(logits, want))
		}
		s.Close()
	}
	// Output:
	// 35 prompt tokens, 0 restored
	// 34 prompt tokens, 32 restored
	// logits identical to a cold prefill: true
}

// Project a cluster before buying it: each of 4 ranks, with a budget of
// its own, holds its rows of every weight; rank 0 also holds the
// sessions. DecodePass counts the gathers of one token (one sequence: its
// top-k experts in each MoE layer) and the bytes rank 0 exchanges in them.
func ExampleInspection_PlanCluster() {
	in, err := k3.Inspect(checkpoint(), k3.Options{MaxContext: 1024})
	if err != nil {
		log.Fatal(err)
	}
	cp, err := in.PlanCluster(1e9, 4, 2) // 1 GB per rank, room for 2 sessions on rank 0
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("rank 0 sessions:", cp.Rank0.Sessions, "worker sessions' state:", cp.Worker.StateBytes)
	fmt.Println("expert halves each rank's cache chooses from:", cp.WorkerExperts.Units)
	pass := cp.DecodePass(1, float64(in.Config.TopK))
	fmt.Println("gathers per token:", pass.Gathers)
	// Output:
	// rank 0 sessions: 2 worker sessions' state: 28800
	// expert halves each rank's cache chooses from: 192
	// gathers per token: 93
}

// A long prompt is fed in several passes over the weights; WithProgress
// hears of each, as a progress bar needs to.
func ExampleWithProgress() {
	// At most 8 token rows per pass, so that this short prompt takes three.
	m, err := k3.Open(checkpoint(), k3.Options{MaxBatch: 8})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	ctx := k3.WithProgress(context.Background(), func(p k3.Progress) {
		fmt.Printf("fed %d of %d tokens\n", p.Done, p.Total)
	})
	prompt := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}
	if _, err := m.NewSession().Step(ctx, prompt); err != nil {
		log.Fatal(err)
	}
	// Output:
	// fed 0 of 20 tokens
	// fed 8 of 20 tokens
	// fed 16 of 20 tokens
	// fed 20 of 20 tokens
}

func ExampleSpeculateAuto() {
	// Options.Speculate reserves what speculation needs inside a budget;
	// without one nothing is reserved up front.
	m, err := k3.Open(checkpoint(), k3.Options{Speculate: k3.SpeculateAuto})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()

	// Text that repeats itself gives the drafter something to propose.
	prompt := m.Tokenizer().Encode(strings.Repeat("one two three four ", 8))
	opts := k3.GenerateOptions{MaxTokens: 24, Sampling: k3.SamplingOptions{Temperature: 0.8, Seed: 5}}
	var plain, spec []int
	for tok, err := range m.Generate(ctx, prompt, opts) {
		if err != nil {
			log.Fatal(err)
		}
		plain = append(plain, tok.ID)
	}
	// With SpeculateAuto the engine verifies, pass by pass, the drafts
	// worth their rows (perhaps none: on this tiny model a row costs
	// about what a pass does); the tokens are the same either way.
	opts.Speculate = k3.SpeculateAuto
	s := m.NewSession()
	defer s.Close()
	for tok, err := range s.Generate(ctx, prompt, opts) {
		if err != nil {
			log.Fatal(err)
		}
		spec = append(spec, tok.ID)
	}
	drafted, accepted := s.Speculation()
	fmt.Println(slices.Equal(plain, spec), accepted <= drafted)
	// Output:
	// true true
}

// Give each node of a 2-rank cluster only its share of the checkpoint:
// the slice for rank 1 holds the bytes that rank reads, as sparse files,
// and keeps the checkpoint's fingerprint, so rank 0 accepts it.
func ExampleSlice() {
	out, err := os.MkdirTemp("", "k3-rank1-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(out)
	info, err := k3.Slice(context.Background(), checkpoint(), filepath.Join(out, "slice"), k3.SliceOptions{Rank: 1, Ranks: 2})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("rank %d of %d, fewer bytes than the checkpoint: %v\n", info.Rank, info.Ranks, info.Bytes < info.Total)
	// Then, on that node: k3 worker --model <out>/slice --rank 1 --ranks 2 ...
	// Output:
	// rank 1 of 2, fewer bytes than the checkpoint: true
}
