package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/chat"
	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/internal/testkit/testmodel"
	"github.com/k3go/k3/tokenizer"
)

const runUsage = `[--model DIR] [--prompt TEXT | --prompt-file F] [--chat] [flags]

Generates text and streams it to stdout as it is produced.

  --prompt or --prompt-file   continue the prompt (raw text: added tokens such
                              as <|open|> in it are recognised unless
                              --no-special); the generation stops at [EOS]
                              unless --ignore-eos
  --chat with a prompt        one chat turn: the prompt is the user's message
  no prompt, stdin a terminal an interactive chat (also with --chat and stdin
                              a pipe): each line is a user message; /save FILE,
                              /load FILE, /reset, /quit; a line starting with
                              "//" sends the text after the first "/"
  no prompt, stdin a pipe     the prompt is read from stdin

Chats use Kimi K3's own format (XTML) and keep the conversation's state
between turns, so a turn feeds only its own tokens. The model reasons first
(--thinking=false turns that off; --effort low, high or max sets how much,
max by default): its reasoning goes to stderr, dimmed on a terminal, apart
from the answer on stdout (--hide-reasoning drops it). Ctrl-C stops a reply
at the next token; a second Ctrl-C before it stops abandons it (the
conversation restarts).

Sampling: temperature 1 with top-k, top-p and min-p off, seed 1: the
defaults of examples/server (the OpenAI API's), so that the command and the
server answer alike; the same prompt and seed give the same text.
--temperature 0 decodes greedily. (k3 generate stays greedy by default: it
produces the ids the conformance checks compare.)

A continuation stops at [EOS], --stop, --max-tokens or the end of the
context (--max-context; by default the largest the budget holds, said at
start), and says which on
stderr when it is the context. --json prints one object instead of the
stream: {"text", "reasoning" (chats), "prompt_tokens", "generated_tokens",
"stop_reason": "stop" | "max_tokens" | "context_full"}. In a chat, and on
a terminal, control tokens ([BOS], [PAD], ...) are not shown and bytes that
are not UTF-8 are shown as U+FFFD; into a pipe a continuation is the
model's exact bytes.

Constrained output: --json-schema FILE allows only a JSON value valid
under the schema in FILE (strict: a keyword k3 cannot enforce is an error
that names it and its JSON pointer; --schema-lenient enforces the rest, as
the API's "strict": false does); --json-object any JSON object (the API's
response_format json_object: --json above is the command's own output, not
this); --regex PATTERN text the expression (Go's regexp/syntax) matches as
a whole. Every token is masked to those that keep the output valid. A
continuation is constrained from its first token and ends once the value
is complete. In a chat the reasoning stays free and the answer is
constrained (a schema or an object is also stated in the prompt, as the
server renders response_format). If --max-tokens runs out first the
output is cut short ("max_tokens"), never repaired.

In the interactive chat, Ctrl-C at the prompt says how to leave, and a
second one leaves with exit code 130 (after a reply a Ctrl-C stopped, one
more does); Ctrl-D on a terminal ends the chat, during a reply too (the
reply stops at the next token). Ctrl-C while loading, or during a
prompt's continuation, exits 130 too.

With no --model, k3 run uses the quickstart checkpoint: a tiny synthetic model
with random weights (it writes gibberish), written once into the user's cache
directory. The tokenizer is read from --tokenizer, or else from the checkpoint
directory.`

// runOpts are the parsed flags of k3 run.
type runOpts struct {
	mf                   cli.ModelFlags
	tokenizer            string
	prompt, promptFile   string
	chat                 bool
	system               string
	noThinking           bool
	effort               string
	hideReasoning        bool
	noSpecial, ignoreEOS bool
	stats                bool
	json                 bool
	cons                 cli.ConstraintFlags
	gen                  k3.GenerateOptions
	show                 *display         // cleans chat text; set once the model is open
	watch                *cli.Watch       // shows the work on stderr; set once the model is open
	context              int              // positions per session; set once the model is open
	sig                  <-chan os.Signal // the interactive chat's Ctrl-Cs (nil: a reply listens itself)
}

// defaultTemperature is k3 run's sampling temperature, the one
// examples/server defaults to (the OpenAI API's): see runUsage.
const defaultTemperature = 1

func runRun(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("run", runUsage, stderr)
	var o runOpts
	o.mf.AutoContext = true
	o.mf.Register(fs)
	fs.StringVar(&o.tokenizer, "tokenizer", "", "`directory` with tiktoken.model and tokenizer_config.json (default: the checkpoint directory)")
	fs.StringVar(&o.prompt, "prompt", "", "prompt `text`")
	fs.StringVar(&o.promptFile, "prompt-file", "", "read the prompt from `file` (verbatim)")
	cli.InputDirs(fs, "tokenizer")
	cli.InputFiles(fs, "prompt-file")
	fs.BoolVar(&o.chat, "chat", false, "chat: one turn with --prompt, else an interactive chat on stdin")
	fs.StringVar(&o.system, "system", "", "system message of a chat")
	thinking := fs.Bool("thinking", true, "chat: let the model reason before it answers")
	fs.StringVar(&o.effort, "effort", chat.DefaultEffort, "chat: thinking `effort`: low, high or max")
	fs.BoolVar(&o.hideReasoning, "hide-reasoning", false, "chat: do not print the model's reasoning")
	fs.BoolVar(&o.noSpecial, "no-special", false, "treat added-token strings in the prompt (e.g. <|end_of_msg|>) as plain text")
	fs.BoolVar(&o.ignoreEOS, "ignore-eos", false, "do not stop a prompt's continuation at [EOS]")
	fs.BoolVar(&o.stats, "stats", false, "print token counts, speed and engine statistics on stderr")
	fs.IntVar(&o.gen.MaxTokens, "max-tokens", 256, "most tokens to generate per reply")
	var spec cli.SpecFlag
	spec.Register(fs, k3.SpeculateAuto)
	temperature := fs.Float64("temperature", defaultTemperature, "sampling temperature (0 = greedy)")
	fs.BoolVar(&o.json, "json", false, "print one JSON object (text, token counts, stop reason) instead of streaming; not for the interactive chat (to constrain the text to JSON, see --json-object and --json-schema)")
	o.cons.Register(fs)
	fs.IntVar(&o.gen.Sampling.TopK, "top-k", 0, "keep the K most likely tokens (0 = all)")
	topP := fs.Float64("top-p", 0, "nucleus sampling: keep the most likely tokens up to this probability (0 or 1 = off)")
	minP := fs.Float64("min-p", 0, "drop tokens less likely than this fraction of the best (0 = off)")
	repPen := fs.Float64("repetition-penalty", 0, "divide positive logits of tokens already seen by this (> 1 discourages repeats; 0 or 1 = off)")
	presPen := fs.Float64("presence-penalty", 0, "subtract this from the logits of tokens already seen")
	freqPen := fs.Float64("frequency-penalty", 0, "subtract this once per occurrence from the logits of tokens already seen")
	fs.Uint64Var(&o.gen.Sampling.Seed, "seed", 1, "sampling seed (same seed, same text)")
	fs.Func("stop", "stop when the text contains `STR` (repeatable)", func(s string) error {
		if s == "" {
			return errors.New("empty stop string")
		}
		o.gen.StopStrings = append(o.gen.StopStrings, s)
		return nil
	})
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	o.noThinking = !*thinking
	o.gen.Speculate = spec.N
	s := &o.gen.Sampling
	s.Temperature, s.TopP, s.MinP = float32(*temperature), float32(*topP), float32(*minP)
	s.RepetitionPenalty, s.PresencePenalty, s.FrequencyPenalty = float32(*repPen), float32(*presPen), float32(*freqPen)
	if err := o.check(fs); err != nil {
		return err
	}
	if _, err := o.options(true); err != nil {
		return err
	}
	if err := o.cons.Check(); err != nil {
		return err
	}
	for _, s := range o.cons.Ignored() {
		fmt.Fprintf(stderr, "k3 run: --schema-lenient: not enforced: %s\n", s)
	}

	promptGiven := o.prompt != "" || o.promptFile != ""
	prompt := o.prompt
	if o.promptFile != "" {
		b, err := os.ReadFile(o.promptFile)
		if err != nil {
			return err
		}
		prompt = string(b)
	}
	interactive := !promptGiven && (o.chat || isTerminal(stdin))
	if !promptGiven && !interactive {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return fmt.Errorf("reading the prompt from stdin: %w", err)
		}
		prompt = string(b)
	}
	if !interactive && prompt == "" {
		return cli.Usagef("empty prompt")
	}
	if interactive && o.json {
		return cli.Usagef("--json needs a prompt (--prompt, --prompt-file or stdin), not the interactive chat")
	}
	if !o.chat && !interactive {
		for _, f := range []string{"system", "thinking", "effort", "hide-reasoning"} {
			if synthFlagSet(fs, f) {
				return cli.Usagef("--%s needs a chat (--chat)", f)
			}
		}
	}

	// A long load can be interrupted; replies handle Ctrl-C themselves.
	ctx, cancel := cli.SignalContext()
	m, err := o.open(ctx, interactive, stderr)
	interrupted := ctx.Err() != nil
	cancel()
	if err != nil {
		if interrupted {
			return errInterrupted
		}
		return err
	}
	defer m.Close()
	o.show = newDisplay(m.Tokenizer())
	if err := o.constrain(m, o.chat || interactive); err != nil {
		return err
	}
	if o.watch, err = o.mf.Progress.Watch(m, stderr); err != nil {
		return err
	}
	defer o.watch.Close()
	ctx = context.Background()
	start := m.Stats()
	var n tokenCount
	switch {
	case interactive:
		err = o.chatLoop(ctx, m, stdin, stdout, stderr, &n)
	case o.chat:
		err = o.chatTurn(ctx, m, prompt, stdout, stderr, &n)
	default:
		err = o.complete(ctx, m, prompt, stdout, stderr, &n)
	}
	o.watch.Close()
	if err != nil {
		return err
	}
	if o.stats {
		n.print(stderr)
		fmt.Fprintln(stderr, cli.FormatStats(m.Stats().Sub(start)))
	}
	return nil
}

// check validates the flags before anything is loaded.
func (o *runOpts) check(fs *flag.FlagSet) error {
	switch {
	case o.prompt != "" && o.promptFile != "":
		return cli.Usagef("give --prompt or --prompt-file, not both")
	case synthFlagSet(fs, "prompt") && o.prompt == "":
		return cli.Usagef("empty --prompt")
	case o.chat && o.ignoreEOS:
		return cli.Usagef("--ignore-eos applies to a prompt's continuation, not to a chat")
	case o.effort != chat.EffortLow && o.effort != chat.EffortHigh && o.effort != chat.EffortMax:
		return cli.Usagef("--effort %q: want low, high or max", o.effort)
	case o.noThinking && synthFlagSet(fs, "effort"):
		return cli.Usagef("--effort needs thinking (not with --thinking=false)")
	}
	return cli.FirstError(
		cli.Positive("max-tokens", o.gen.MaxTokens),
		checkSampling(o.gen.Sampling),
	)
}

// checkSampling validates the sampling flags of k3 run and k3 generate,
// naming the flag and the value.
func checkSampling(s k3.SamplingOptions) error {
	finite := func(v float32) bool { return !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) }
	switch {
	case !finite(s.Temperature) || s.Temperature < 0:
		return cli.Usagef("--temperature %v: want a number >= 0 (0 = greedy)", s.Temperature)
	case s.TopK < 0:
		return cli.Usagef("--top-k %d: must not be negative (0 = all tokens)", s.TopK)
	case !(s.TopP >= 0 && s.TopP <= 1):
		return cli.Usagef("--top-p %v: want a number in [0, 1] (0 or 1 = off)", s.TopP)
	case !(s.MinP >= 0 && s.MinP <= 1):
		return cli.Usagef("--min-p %v: want a number in [0, 1] (0 = off)", s.MinP)
	case !finite(s.RepetitionPenalty) || s.RepetitionPenalty < 0:
		return cli.Usagef("--repetition-penalty %v: want a number >= 0 (0 or 1 = off)", s.RepetitionPenalty)
	case !finite(s.PresencePenalty):
		return cli.Usagef("--presence-penalty %v: want a finite number", s.PresencePenalty)
	case !finite(s.FrequencyPenalty):
		return cli.Usagef("--frequency-penalty %v: want a finite number", s.FrequencyPenalty)
	}
	return nil
}

// constrain sets what --json-schema, --json-object and --regex require of
// the output. A continuation's text is constrained whole. In a chat the
// reasoning stays free and the response channel is constrained: a schema
// or an object is the chat's response format (newChat sets it, and the
// conversation enforces it as the server does); a regular expression,
// which no response format expresses, is the response's content grammar.
func (o *runOpts) constrain(m *k3.Model, isChat bool) error {
	if !isChat {
		c, err := o.cons.Constraint(m)
		o.gen.Constraint = c
		return err
	}
	re, ok := o.cons.Regexp()
	if !ok {
		return nil
	}
	g, err := chat.AnswerGrammar(nil, o.chatOptions().WithDefaults(), chat.ConstrainOptions{Content: &re})
	if err != nil {
		return cli.Usagef("--regex %q: %v", o.cons.Regex, err)
	}
	o.gen.Constraint, err = cli.Bind(m, g)
	return err
}

// options are the library options of the flags: one session, or two for
// an interactive chat (its /load reads into a new conversation before it
// replaces the current one), checked as Open checks them.
func (o *runOpts) options(interactive bool) (k3.Options, error) {
	opts, err := o.mf.Options()
	if err != nil {
		return opts, err
	}
	opts.Speculate, opts.TokenizerDir, opts.Sessions = o.gen.Speculate, o.tokenizer, 1
	if interactive {
		opts.Sessions = 2
	}
	return opts, cli.ForFlags(opts.Validate(), o.mf.Flags())
}

// open loads the model: --model, or the quickstart checkpoint.
func (o *runOpts) open(ctx context.Context, interactive bool, stderr io.Writer) (*k3.Model, error) {
	dir := o.mf.Dir
	if dir != "" {
		// Before any weight is read: a checkpoint without a tokenizer can
		// only fail once loaded.
		if err := cli.CheckCheckpoint(dir); err != nil {
			return nil, err
		}
		if err := cli.CheckTokenizer(dir, o.tokenizer); err != nil {
			return nil, err
		}
	} else {
		d, err := testmodel.Cached(ctx, stderr)
		if err != nil {
			return nil, fmt.Errorf("preparing the quickstart checkpoint (give --model DIR instead): %w", err)
		}
		fmt.Fprintf(stderr, "k3 run: no --model: using the quickstart checkpoint, a tiny model with random weights (%s)\n", d)
		dir = d
	}
	opts, err := o.options(interactive)
	if err != nil {
		return nil, err
	}
	// Loading the real model takes seconds (7.5 s for medium): say so on a
	// terminal, and take the line back once it is done.
	loaded := func() {}
	if isTerminal(stderr) {
		fmt.Fprintf(stderr, "loading %s...", dir)
		loaded = func() { fmt.Fprint(stderr, "\r\x1b[K") }
	}
	// At the floor the budget may hold only one session: the chat's /load
	// then says the budget is too small.
	opts.RAMBudget = o.mf.Budget.AtLeastFloor(dir, opts)
	m, err := k3.OpenContext(ctx, dir, opts)
	if errors.Is(err, k3.ErrBudget) && opts.Sessions > 1 {
		opts.Sessions = 1
		m, err = k3.OpenContext(ctx, dir, opts)
	}
	loaded()
	if err != nil {
		return nil, cli.ForFlags(err, o.mf.Flags())
	}
	if m.Tokenizer() == nil {
		m.Close()
		return nil, errNoTokenizer(dir)
	}
	o.context = m.MaxContext()
	if o.mf.MaxContext == 0 && o.mf.Dir != "" {
		// The default context depends on the budget: say what it is.
		fmt.Fprintf(stderr, "k3 run: %s\n", cli.ContextNote(m, 0, opts.Sessions))
	}
	return m, nil
}

// tokenCount accumulates what --stats reports.
type tokenCount struct {
	prompt, generated int
	elapsed           time.Duration
}

func (n *tokenCount) print(w io.Writer) {
	rate := 0.0
	if n.elapsed > 0 {
		rate = float64(n.generated) / n.elapsed.Seconds()
	}
	fmt.Fprintf(w, "prompt %d tokens, generated %d tokens in %.2f s (%.2f tokens/s)\n", n.prompt, n.generated, n.elapsed.Seconds(), rate)
}

// complete continues a raw prompt.
func (o *runOpts) complete(ctx context.Context, m *k3.Model, prompt string, stdout, stderr io.Writer, n *tokenCount) error {
	ctx, cancel := signal.NotifyContext(ctx, os.Interrupt)
	defer cancel()
	tok := m.Tokenizer()
	ids := tok.AppendEncode(nil, prompt, tokenizer.EncodeOptions{NoAddedTokens: o.noSpecial})
	if len(ids) == 0 {
		return cli.Usagef("empty prompt")
	}
	opts := o.gen
	if eos, ok := tok.ID("[EOS]"); ok && !o.ignoreEOS {
		opts.StopTokens = []int{eos}
	}
	maxCtx := o.maxContext()
	clipped := false
	if len(ids)+opts.MaxTokens > maxCtx {
		if len(ids) >= maxCtx {
			return cli.Usagef("the prompt has %d tokens; a session holds %d (--max-context)", len(ids), maxCtx)
		}
		opts.MaxTokens, clipped = maxCtx-len(ids), true
	}
	n.prompt += len(ids)
	s := m.NewSession()
	t0 := time.Now()
	// The prompt goes in passes as wide as the budget affords; the watch
	// shows them, then the decoding, on stderr.
	o.watch.Start()
	gctx := o.watch.Prefill(ctx, len(ids))
	defer o.watch.Idle()
	w := bufio.NewWriter(o.watch.Text(stdout))
	defer w.Flush()
	// On a terminal the text is cleaned for reading; into a pipe or file it
	// stays exactly the model's bytes.
	var show *display
	if isTerminal(stdout) {
		show = newDisplay(tok)
	}
	var text strings.Builder
	gen := 0
	for t, err := range s.Generate(gctx, ids, opts) {
		if err != nil {
			o.watch.Idle()
			if !o.json {
				w.WriteString("\n")
				w.Flush()
			}
			if ctx.Err() != nil {
				return errInterrupted
			}
			return err
		}
		gen++
		o.watch.Token()
		if o.json {
			text.WriteString(t.Text)
			continue
		}
		w.WriteString(show.text(t.ID, t.Text))
		if err := w.Flush(); err != nil {
			return err
		}
	}
	n.generated += gen
	n.elapsed += time.Since(t0)
	o.watch.Idle()
	reason := stopReason(gen, opts.MaxTokens, clipped)
	if reason == "context_full" {
		fmt.Fprintf(stderr, "k3 run: stopped at the end of the context: %d positions (--max-context)\n", maxCtx)
	}
	if o.json {
		return writeRunJSON(stdout, runJSON{Text: text.String(), PromptTokens: n.prompt, GeneratedTokens: gen, StopReason: reason})
	}
	w.WriteString("\n")
	return w.Flush()
}

// stopReason says why a generation of gen tokens out of at most max
// ended; clipped says max was cut to what the context holds.
func stopReason(gen, max int, clipped bool) string {
	switch {
	case gen < max:
		return "stop"
	case clipped:
		return "context_full"
	}
	return "max_tokens"
}

// runJSON is what k3 run --json prints.
type runJSON struct {
	Text            string `json:"text"`
	Reasoning       string `json:"reasoning,omitempty"`
	PromptTokens    int    `json:"prompt_tokens"`
	GeneratedTokens int    `json:"generated_tokens"`
	StopReason      string `json:"stop_reason"`
}

func writeRunJSON(w io.Writer, r runJSON) error {
	return json.NewEncoder(w).Encode(r)
}

// display cleans generated text for a reader: the tokenizer's special
// added tokens ([BOS], [PAD], <|im_user|>, ...), which a chat's format does
// not consume, are dropped, and bytes that are not UTF-8 become U+FFFD
// instead of reaching the terminal raw. A nil display passes text through.
type display struct {
	special map[int]string
}

func newDisplay(tok *tokenizer.Tokenizer) *display {
	d := &display{special: map[int]string{}}
	for _, a := range tok.AddedTokens() {
		if a.Special {
			d.special[a.ID] = a.Content
		}
	}
	return d
}

// text is s, the text token id added, as it should be shown.
func (d *display) text(id int, s string) string {
	if d == nil || s == "" {
		return s
	}
	if c, ok := d.special[id]; ok {
		s = strings.Replace(s, c, "", 1)
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// maxContext is the capacity of a session (the model's, once open).
func (o *runOpts) maxContext() int { return o.context }

// errInterrupted ends a reply, a continuation or the chat at Ctrl-C: the
// command exits 130.
var errInterrupted = cli.ErrInterrupted

// isTerminal reports whether r is a terminal.
func isTerminal(r any) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
