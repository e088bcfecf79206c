package bench

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/internal/testkit/testmodel"
)

// TestBenchServe: k3 bench-serve measures every level on loopback and
// reports the tokens each client asked for.
func TestBenchServe(t *testing.T) {
	code, out, stderr := runCmd(t, "bench-serve", "--model", testmodel.Dir(t), "--clients", "1,3", "--tokens", "4", "--json")
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var res benchServeResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(res.Levels) != 2 || res.Sessions != 3 {
		t.Fatalf("result %+v", res)
	}
	for i, lv := range res.Levels {
		if lv.GeneratedTokens != 4*lv.Clients || lv.TokensPerS <= 0 || lv.Passes == 0 {
			t.Errorf("level %d: %+v", i, lv)
		}
	}
	if res.Levels[0].RatioToFirst != 1 || res.Levels[1].RatioToFirst <= 0 {
		t.Errorf("ratios %v, %v", res.Levels[0].RatioToFirst, res.Levels[1].RatioToFirst)
	}
	if code, _, _ := runCmd(t, "bench-serve", "--model", "x", "--clients", "0"); code != cli.ExitUsage {
		t.Errorf("--clients 0: exit %d", code)
	}
}

// TestBenchServeAgent replays a short agent trace: from the second turn
// on, the prefix cache restores the whole previous prompt (the header and
// the conversation up to the new message), and the run without it
// restores nothing.
func TestBenchServeAgent(t *testing.T) {
	code, out, stderr := runCmd(t, "bench-serve", "--model", testmodel.Dir(t), "--agent", "--turns", "3", "--header", "40",
		"--user-tokens", "5", "--reply-tokens", "7", "--tokens", "2", "--json")
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var res agentResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(res.Turns) != 3 {
		t.Fatalf("%d turns: %+v", len(res.Turns), res)
	}
	for i, turn := range res.Turns {
		want := int64(0)
		if i > 0 {
			want = int64(res.Turns[i-1].PromptTokens)
		}
		if turn.PromptTokens != 40+5*(i+1)+7*i || turn.CachedTokens != want || turn.TTFT <= 0 || turn.TTFTUncached <= 0 {
			t.Errorf("turn %d: %+v, want %d tokens restored", i+1, turn, want)
		}
	}
	if !strings.Contains(stderr, "(uncached): 45 prompt tokens, 0 restored") {
		t.Errorf("the uncached run restored something:\n%s", stderr)
	}

	// The header's last 4 tokens change every turn: turn 2 finds the 4
	// blocks of 8 before them cached but no state there, and keeps one;
	// from turn 3 on those 32 tokens are restored.
	code, out, stderr = runCmd(t, "bench-serve", "--model", testmodel.Dir(t), "--agent", "--turns", "4", "--header", "40", "--header-tail", "4",
		"--prefix-cache-block", "8", "--user-tokens", "5", "--reply-tokens", "7", "--tokens", "2", "--uncached-turns", "1,4", "--json")
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	res = agentResult{}
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Turns) != 4 {
		t.Fatalf("not 4 turns of JSON: %v\n%s", err, out)
	}
	for i, turn := range res.Turns {
		want := int64(0)
		if i >= 2 {
			want = 32
		}
		if turn.CachedTokens != want {
			t.Errorf("changing header tail, turn %d: %d tokens restored, want %d", i+1, turn.CachedTokens, want)
		}
		// --uncached-turns 1,4: only those turns ran without the cache.
		if measured := turn.TTFTUncached > 0; measured != (i == 0 || i == 3) {
			t.Errorf("--uncached-turns 1,4: turn %d measured uncached: %v", i+1, measured)
		}
	}
	if strings.Count(stderr, "(uncached)") != 2 {
		t.Errorf("--uncached-turns 1,4 ran another number of uncached turns:\n%s", stderr)
	}
	if code, _, stderr := runCmd(t, "bench-serve", "--model", testmodel.Dir(t), "--agent", "--turns", "4", "--uncached-turns", "2,5"); code != cli.ExitUsage || !strings.Contains(stderr, "between 1 and 4") {
		t.Errorf("--uncached-turns 5 of 4 turns: exit %d: %s", code, stderr)
	}
}
