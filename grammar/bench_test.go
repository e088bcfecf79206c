package grammar_test

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/k3go/k3/grammar"
	"github.com/k3go/k3/internal/testkit/grammartest"
)

// benchSchemas are what the mask benchmarks constrain: any JSON object,
// and a nested schema with bounded strings, patterns, formats, enums,
// numbers with ranges, arrays and anyOf.
var benchSchemas = []struct {
	name   string
	schema string // "" for json_object
	opts   grammar.Options
}{
	{"json_object", "", grammar.Options{Style: grammar.DefaultStyle, MaxDepth: 8}},
	{"nested", `{"type":"object","properties":{
		"id":{"type":"string","format":"uuid"},
		"name":{"type":"string","maxLength":40},
		"email":{"type":"string","format":"email"},
		"age":{"type":"integer","minimum":0,"maximum":150},
		"score":{"type":"number","minimum":0,"maximum":100},
		"created":{"type":"string","format":"date-time"},
		"role":{"enum":["admin","editor","viewer"]},
		"address":{"type":"object","properties":{
			"street":{"type":"string","maxLength":60},
			"city":{"type":"string","maxLength":30},
			"zip":{"type":"string","pattern":"^[0-9]{5}(-[0-9]{4})?$"},
			"country":{"type":"string","pattern":"^[A-Z]{2}$"}},
			"required":["street","city","zip","country"],"additionalProperties":false},
		"tags":{"type":"array","items":{"type":"string","maxLength":16},"maxItems":5},
		"contacts":{"type":"array","maxItems":3,"items":{"anyOf":[
			{"type":"object","properties":{"phone":{"type":"string","pattern":"^\\+?[0-9 ]{6,15}$"}},"required":["phone"],"additionalProperties":false},
			{"type":"object","properties":{"url":{"type":"string","maxLength":50}},"required":["url"],"additionalProperties":false},
			{"type":"null"}]}},
		"notes":{"type":["string","null"],"maxLength":100}},
		"required":["id","name","email","age","score","created","role","address","tags","contacts","notes"],
		"additionalProperties":false}`, grammar.Options{Style: grammar.DefaultStyle}},
}

func compileBench(b *testing.B, schema string, opts grammar.Options) *grammar.Grammar {
	if schema == "" {
		return grammar.JSONObject(opts)
	}
	g, err := grammar.CompileJSONSchema([]byte(schema), opts)
	if err != nil {
		b.Fatal(err)
	}
	return g
}

// BenchmarkVocab builds the grammar vocabulary of the release tokenizer
// (its trie and the token classes of plain strings): done once per
// tokenizer.
func BenchmarkVocab(b *testing.B) {
	_, v := grammartest.Release(b)
	toks := make([][]byte, v.Size())
	for id := range toks {
		toks[id], _ = v.TokenBytes(id)
	}
	specials := v.Specials()
	for b.Loop() {
		if _, err := grammar.NewVocab(toks, specials); err != nil {
			b.Fatal(err)
		}
	}
}

// wideSchema has 120 properties of assorted kinds: a large tool's
// parameters, say.
func wideSchema() string {
	kinds := []string{`{"type":"string","maxLength":50}`, `{"type":"integer","minimum":-100,"maximum":100}`,
		`{"type":"string","format":"date-time"}`, `{"enum":["a","b","c"]}`, `{"type":"array","items":{"type":"number"},"maxItems":8}`,
		`{"type":"string","pattern":"^[A-Z][a-z]+( [A-Z][a-z]+)*$"}`, `{"anyOf":[{"type":"boolean"},{"type":"null"}]}`,
		`{"type":"object","properties":{"x":{"type":"number","minimum":0,"maximum":1}},"required":["x"],"additionalProperties":false}`}
	s := `{"type":"object","additionalProperties":false,"properties":{`
	req := ""
	for k := range 120 {
		if k > 0 {
			s += ","
			req += ","
		}
		name := "field_" + string(rune('a'+k%26)) + string(rune('a'+k/26))
		s += `"` + name + `":` + kinds[k%len(kinds)]
		req += `"` + name + `"`
	}
	return s + `},"required":[` + req + `]}`
}

// BenchmarkCompile compiles a schema and binds it to the release
// vocabulary: what a request pays before its first token.
func BenchmarkCompile(b *testing.B) {
	_, v := grammartest.Release(b)
	schemas := append(benchSchemas[:len(benchSchemas):len(benchSchemas)], struct {
		name   string
		schema string
		opts   grammar.Options
	}{"wide", wideSchema(), grammar.Options{}})
	for _, sc := range schemas {
		b.Run(sc.name, func(b *testing.B) {
			for b.Loop() {
				g := compileBench(b, sc.schema, sc.opts)
				if _, err := g.Constraint(v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMask times FillMask token by token along recorded
// generations (random tokens among those allowed, 16 seeds, at most 400
// tokens each) over the release vocabulary, and reports the median, p99
// and largest time per token. The first pass, untimed, fills the token
// classes a fresh request computes as it goes (see BenchmarkMaskCold).
func BenchmarkMask(b *testing.B) {
	_, v := grammartest.Release(b)
	for _, sc := range benchSchemas {
		b.Run(sc.name, func(b *testing.B) {
			c, err := compileBench(b, sc.schema, sc.opts).Constraint(v)
			if err != nil {
				b.Fatal(err)
			}
			runs := recordRuns(b, c, v, 16, 400)
			replay(b, c, v, runs, nil, nil) // warm the caches
			var wall, cpu []time.Duration
			for b.Loop() {
				wall, cpu = replay(b, c, v, runs, wall, cpu)
			}
			reportTimes(b, wall, cpu)
		})
	}
}

// BenchmarkMaskWalk is BenchmarkMask's baseline, in the same process:
// token classes off, every mask walks the trie (fewer runs: it is slow).
func BenchmarkMaskWalk(b *testing.B) {
	_, v := grammartest.Release(b)
	for _, sc := range benchSchemas {
		b.Run(sc.name, func(b *testing.B) {
			c, err := compileBench(b, sc.schema, sc.opts).Constraint(v)
			if err != nil {
				b.Fatal(err)
			}
			runs := recordRuns(b, c, v, 4, 400)
			restore := grammar.WithoutClasses()
			defer restore()
			var wall, cpu []time.Duration
			for b.Loop() {
				wall, cpu = replay(b, c, v, runs, wall, cpu)
			}
			reportTimes(b, wall, cpu)
		})
	}
}

// BenchmarkMaskCold times the same as BenchmarkMask, but every pass binds
// the grammar afresh, so each pass computes the token classes of its
// patterns and formats again (those of plain strings stay in the
// vocabulary, as in a server after its first request).
func BenchmarkMaskCold(b *testing.B) {
	_, v := grammartest.Release(b)
	for _, sc := range benchSchemas {
		b.Run(sc.name, func(b *testing.B) {
			g := compileBench(b, sc.schema, sc.opts)
			c, err := g.Constraint(v)
			if err != nil {
				b.Fatal(err)
			}
			runs := recordRuns(b, c, v, 16, 400)
			var wall, cpu []time.Duration
			for b.Loop() {
				c, err := g.Constraint(v)
				if err != nil {
					b.Fatal(err)
				}
				wall, cpu = replay(b, c, v, runs, wall, cpu)
			}
			reportTimes(b, wall, cpu)
		})
	}
}

func recordRuns(b *testing.B, c grammar.Constraint, v *grammar.Vocab, n, maxTokens int) [][]int {
	var runs [][]int
	for seed := range n {
		rng := rand.New(rand.NewPCG(uint64(seed), 77))
		run := grammartest.Generate(b, c.NewMatcher(), v.MaskWords(), grammartest.Uniform(nil), rng, maxTokens, nil)
		runs = append(runs, run.IDs)
	}
	return runs
}

// replay runs the recorded generations and appends the wall-clock and
// thread CPU time of each FillMask to wall and cpu.
func replay(b *testing.B, c grammar.Constraint, v *grammar.Vocab, runs [][]int, wall, cpu []time.Duration) ([]time.Duration, []time.Duration) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	mask := make([]uint64, v.MaskWords())
	for _, ids := range runs {
		m := c.NewMatcher()
		for _, id := range ids {
			c0, _ := threadCPU()
			t0 := time.Now()
			if err := m.FillMask(mask); err != nil {
				b.Fatal(err)
			}
			wall = append(wall, time.Since(t0))
			if c1, ok := threadCPU(); ok {
				cpu = append(cpu, c1-c0)
			}
			if err := m.Accept(id); err != nil {
				b.Fatal(err)
			}
		}
	}
	return wall, cpu
}

// reportTimes reports the median, p99 and largest wall-clock time per
// token, and the median and p99 of the thread CPU time (which the other
// work on a shared machine does not inflate).
func reportTimes(b *testing.B, wall, cpu []time.Duration) {
	q := func(ts []time.Duration, f float64) float64 {
		return float64(ts[min(len(ts)-1, int(f*float64(len(ts))))].Nanoseconds())
	}
	slices.Sort(wall)
	b.ReportMetric(q(wall, 0.5), "p50-ns/token")
	b.ReportMetric(q(wall, 0.99), "p99-ns/token")
	b.ReportMetric(float64(wall[len(wall)-1].Nanoseconds()), "max-ns/token")
	if len(cpu) > 0 {
		slices.Sort(cpu)
		b.ReportMetric(q(cpu, 0.5), "cpu-p50-ns/token")
		b.ReportMetric(q(cpu, 0.99), "cpu-p99-ns/token")
	}
	b.ReportMetric(float64(len(wall))/float64(b.N), "tokens/op")
}
