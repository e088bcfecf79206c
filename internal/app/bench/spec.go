package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/cli"
)

// specRow is one decoding run of k3 bench --spec: plain (k = 0) or
// speculative with k drafts at most.
type specRow struct {
	K                 int     `json:"k"`
	DecodeTokens      int     `json:"decode_tokens"`
	DecodeSPerToken   float64 `json:"decode_s_per_token"`
	VsPlain           float64 `json:"s_per_token_vs_plain"`
	Passes            int64   `json:"passes"`
	PassesPerToken    float64 `json:"passes_per_token"`
	AcceptedPerPass   float64 `json:"accepted_per_pass"`
	BytesReadPerToken int64   `json:"bytes_read_per_token"`
	Exact             bool    `json:"exact"`
}

// fixedDrafter proposes a known continuation: the ceiling of speculation
// (every draft right as long as the continuation lasts).
type fixedDrafter struct{ prompt, cont []int }

func (d fixedDrafter) Draft(seq []int, n int, dst []int) []int {
	at := len(seq) - len(d.prompt)
	if at < 0 || at >= len(d.cont) {
		return dst
	}
	return append(dst, d.cont[at:min(at+n, len(d.cont))]...)
}

type benchSpecRun struct {
	ks        []int
	drafter   string
	tokens    int
	promptLen int
	seed      uint64
	json      bool
}

// benchSpec decodes one prompt greedily, plainly and then with each k in
// the same process, and reports s/token, passes, accepted drafts and bytes
// per generated token next to plain decoding; every run must give the
// plain run's tokens.
func benchSpec(mf *cli.ModelFlags, br benchSpecRun, stdout, stderr io.Writer) error {
	ctx, cancel := cli.SignalContext()
	defer cancel()
	maxK := slices.Max(br.ks)
	m, err := mf.OpenWith(ctx, func(o *k3.Options) {
		o.Speculate = maxK
		o.MaxContext = max(o.MaxContext, br.promptLen+br.tokens+maxK+2)
	})
	if err != nil {
		return err
	}
	defer m.Close()
	V := m.Config().Vocab
	rng := rand.New(rand.NewPCG(br.seed, 0))
	prompt := make([]int, br.promptLen)
	switch br.drafter {
	case "ngram":
		// A prompt that repeats itself: a block of 8 random tokens.
		block := make([]int, 8)
		for i := range block {
			block[i] = rng.IntN(V)
		}
		for i := range prompt {
			prompt[i] = block[i%len(block)]
		}
	default:
		for i := range prompt {
			prompt[i] = rng.IntN(V)
		}
	}
	watch, err := mf.Progress.Watch(m, stderr)
	if err != nil {
		return err
	}
	defer watch.Close()
	stderr = watch.Text(stderr)
	run := func(k int, d k3.Drafter) (specRow, []int, error) {
		row := specRow{K: k}
		s := m.NewSession()
		defer s.Close()
		var st1 k3.Stats
		var t0 time.Time
		var ids []int
		watch.Start()
		defer watch.Idle()
		for tok, err := range s.Generate(watch.Prefill(ctx, len(prompt)), prompt, k3.GenerateOptions{MaxTokens: br.tokens + 1, Speculate: k, Drafter: d}) {
			if err != nil {
				return row, nil, err
			}
			watch.Token()
			if len(ids) == 0 {
				st1, t0 = m.Stats(), time.Now()
			}
			ids = append(ids, tok.ID)
		}
		el := time.Since(t0).Seconds()
		dd := m.Stats().Sub(st1)
		n := float64(len(ids) - 1)
		row.DecodeTokens = len(ids) - 1
		row.DecodeSPerToken = el / n
		row.Passes = dd.Passes
		row.PassesPerToken = float64(dd.Passes) / n
		if dd.SpecPasses > 0 {
			row.AcceptedPerPass = float64(dd.SpecAccepted) / float64(dd.SpecPasses)
		}
		row.BytesReadPerToken = int64(float64(dd.BytesRead) / n)
		return row, ids, nil
	}
	fmt.Fprintf(stderr, "bench: plain decoding, %d tokens...\n", br.tokens)
	plain, plainIDs, err := run(0, nil)
	if err != nil {
		return err
	}
	plain.Exact, plain.VsPlain = true, 1
	rows := []specRow{plain}
	for _, k := range br.ks {
		var d k3.Drafter = k3.NGramDrafter{}
		if br.drafter == "ceiling" {
			d = fixedDrafter{prompt: prompt, cont: plainIDs}
		}
		fmt.Fprintf(stderr, "bench: speculating with k=%d (%s drafts)...\n", k, br.drafter)
		row, ids, err := run(k, d)
		if err != nil {
			return err
		}
		row.Exact = slices.Equal(ids, plainIDs)
		row.VsPlain = row.DecodeSPerToken / plain.DecodeSPerToken
		rows = append(rows, row)
		if !row.Exact {
			return fmt.Errorf("k=%d generated %v, plain decoding %v", k, ids, plainIDs)
		}
	}
	if br.json {
		return json.NewEncoder(stdout).Encode(struct {
			Model   string    `json:"model"`
			Drafter string    `json:"drafter"`
			Prompt  int       `json:"prompt_len"`
			Spec    []specRow `json:"spec"`
		}{mf.Dir, br.drafter, br.promptLen, rows})
	}
	fmt.Fprintf(stdout, "%4s %8s %12s %9s %10s %12s %14s %6s\n", "k", "tokens", "s/token", "vs plain", "passes/tok", "accepted/pass", "GB read/token", "exact")
	for _, r := range rows {
		fmt.Fprintf(stdout, "%4d %8d %12.3f %8.2fx %10.2f %12.2f %14.3f %6v\n", r.K, r.DecodeTokens, r.DecodeSPerToken, r.VsPlain,
			r.PassesPerToken, r.AcceptedPerPass, float64(r.BytesReadPerToken)/1e9, r.Exact)
	}
	return nil
}
