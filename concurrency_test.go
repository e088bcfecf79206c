package k3_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/k3go/k3"
)

// TestConcurrentSessions runs several sessions of one model from several
// goroutines and checks each gets exactly the tokens a lone session gets.
func TestConcurrentSessions(t *testing.T) {
	for _, budget := range []int64{0, 56e6} {
		m, exp := openOracle(t, "tiny-mxfp4", k3.Options{RAMBudget: budget, MaxContext: 64, Sessions: 4})
		ctx := context.Background()
		prompt := exp.PromptIDs
		want := exp.FullIDs[len(prompt) : len(prompt)+6]
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Go(func() {
				var got []int
				for tok, err := range m.Generate(ctx, prompt, k3.GenerateOptions{MaxTokens: len(want)}) {
					if err != nil {
						t.Errorf("goroutine %d: %v", g, err)
						return
					}
					got = append(got, tok.ID)
				}
				for i := range want {
					if got[i] != want[i] {
						t.Errorf("budget %d goroutine %d: token %d = %d, want %d", budget, g, i, got[i], want[i])
						return
					}
				}
			})
		}
		wg.Wait()
	}
}

// TestCloseWhileGenerating closes the model while generations run: each
// ends with ErrClosed (or finishes), Close returns, and later calls fail
// cleanly. With 12 sessions and 4 rows per pass, most steps wait for a
// pass when Close comes.
func TestCloseWhileGenerating(t *testing.T) {
	t.Run("3 generations", func(t *testing.T) { closeWhileGenerating(t, 3, k3.Options{MaxContext: 4096}) })
	t.Run("12 waiting for passes", func(t *testing.T) {
		closeWhileGenerating(t, 12, k3.Options{MaxContext: 4096, Sessions: 12, MaxBatch: 4})
	})
}

func closeWhileGenerating(t *testing.T, n int, opts k3.Options) {
	m, exp := openOracle(t, "tiny-mxfp4", opts)
	ctx := context.Background()
	started := make(chan struct{}, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for g := 0; g < n; g++ {
		wg.Go(func() {
			first := true
			for _, err := range m.Generate(ctx, exp.PromptIDs, k3.GenerateOptions{MaxTokens: 4000}) {
				if first {
					started <- struct{}{}
					first = false
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		})
	}
	for i := 0; i < n; i++ {
		<-started
	}
	done := make(chan error)
	go func() { done <- m.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return while generations ran")
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil && !errors.Is(err, k3.ErrClosed) {
			t.Errorf("generation ended with %v, want ErrClosed", err)
		}
	}
	if _, err := m.NewSession().Step(ctx, []int{1}); !errors.Is(err, k3.ErrClosed) {
		t.Errorf("Step after Close: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestCancelStopsPromptly cancels a long generation and checks it ends
// with the context's error soon after.
func TestCancelStopsPromptly(t *testing.T) {
	m, exp := openOracle(t, "tiny-mxfp4", k3.Options{MaxContext: 4096})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	var last error
	var cancelledAt time.Time
	for _, err := range m.Generate(ctx, exp.PromptIDs, k3.GenerateOptions{MaxTokens: 4000}) {
		if err != nil {
			last = err
			break
		}
		n++
		if n == 3 {
			cancelledAt = time.Now()
			cancel()
		}
	}
	if !errors.Is(last, context.Canceled) {
		t.Fatalf("generation ended with %v after %d tokens, want context.Canceled", last, n)
	}
	if n != 3 {
		t.Errorf("%d tokens after cancelling at 3", n)
	}
	if d := time.Since(cancelledAt); d > 5*time.Second {
		t.Errorf("stopping took %v", d)
	}
}
