package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/chat"
	"github.com/k3go/k3/internal/app/cli"
)

// chatOptions are the chat format's options of the chat flags: thinking,
// effort, and the response format of --json-schema or --json-object.
func (o *runOpts) chatOptions() chat.Options {
	co := chat.Options{NoThinking: o.noThinking, ResponseFormat: o.cons.ResponseFormat()}
	if !o.noThinking {
		co.ThinkingEffort = o.effort
	}
	return co
}

// newChat starts a conversation with the chat flags.
func (o *runOpts) newChat(m *k3.Model) (*k3.Conversation, error) {
	return m.NewChat(k3.ChatOptions{System: o.system, Options: o.chatOptions()})
}

// chatTurn sends one user message and prints the reply.
func (o *runOpts) chatTurn(ctx context.Context, m *k3.Model, user string, stdout, stderr io.Writer, n *tokenCount) error {
	c, err := o.newChat(m)
	if err != nil {
		return cli.Usagef("%v", err)
	}
	_, err = o.reply(ctx, c, user, stdout, stderr, n, nil)
	return err
}

// replyEnd says how a reply ended.
type replyEnd int

const (
	replyDone      replyEnd = iota // it ran to its end (or the input ended)
	replyStopped                   // a Ctrl-C stopped it at a token; the conversation goes on
	replyAbandoned                 // a second Ctrl-C cut its step: the conversation is unusable
)

// reply streams the reply to user: the answer to stdout, the reasoning to
// stderr (dimmed on a terminal, or not at all with --hide-reasoning). The
// first Ctrl-C stops it at the next token, keeping the conversation; a
// second abandons it, which leaves the conversation unusable. A close of
// quit (the end of a terminal's input) stops it like the first Ctrl-C.
// With --json nothing streams: one object is printed at the end. The
// Ctrl-Cs come on o.sig (the interactive chat's), or on a channel of its
// own.
func (o *runOpts) reply(ctx context.Context, c *k3.Conversation, user string, stdout, stderr io.Writer, n *tokenCount, quit <-chan struct{}) (end replyEnd, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stop, interrupted atomic.Bool
	sig := o.sig
	if sig == nil {
		own := make(chan os.Signal, 2)
		signal.Notify(own, os.Interrupt)
		defer signal.Stop(own)
		sig = own
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-sig:
				interrupted.Store(true)
				if stop.Swap(true) {
					cancel()
				}
			case <-quit:
				stop.Store(true)
				quit = nil
			case <-done:
				return
			}
		}
	}()
	before := c.Session().Len()
	// The turn's tokens (its message and the reply's header) go in passes
	// that the watch shows, then the decoding, on stderr, beside the text.
	o.watch.Start()
	ctx = o.watch.Prefill(ctx, 0)
	defer o.watch.Idle()
	w := bufio.NewWriter(o.watch.Text(stdout))
	defer w.Flush()
	r := &reasoningWriter{w: o.watch.Text(stderr), dim: isTerminal(stderr), hide: o.hideReasoning}
	defer r.end()
	show := o.show
	var text, reasoning strings.Builder
	t0 := time.Now()
	gen := 0
	msg := []chat.Message{{Role: chat.RoleUser, Content: user}}
	for d, err := range c.Stream(ctx, msg, o.gen) {
		if err != nil {
			o.watch.Idle()
			r.end()
			if !o.json {
				w.WriteString("\n")
				w.Flush()
			}
			if ctx.Err() != nil {
				return replyAbandoned, errInterrupted
			}
			if errors.Is(err, k3.ErrContextFull) {
				return replyDone, fmt.Errorf("the conversation fills the context (%d positions, --max-context); /reset starts a new one: %w", o.maxContext(), err)
			}
			return replyDone, err
		}
		if d.Token.Index >= 0 {
			gen++
			o.watch.Token()
		}
		if o.json {
			reasoning.WriteString(d.Reasoning)
			text.WriteString(d.Content)
			continue
		}
		r.write(show.text(d.Token.ID, d.Reasoning))
		if content := show.text(d.Token.ID, d.Content); content != "" {
			r.end()
			w.WriteString(content)
		}
		if d.ToolCall != nil {
			fmt.Fprintf(w, "\n[tool call %s %s]\n", d.ToolCall.Function.Name, d.ToolCall.Function.Arguments)
		}
		if err := w.Flush(); err != nil {
			return replyDone, err
		}
		if stop.Load() {
			break
		}
	}
	o.watch.Idle()
	if interrupted.Load() {
		end = replyStopped
	}
	r.end()
	n.elapsed += time.Since(t0)
	n.generated += gen
	prompt := c.Session().Len() - before - gen
	n.prompt += prompt
	if o.json {
		reason := "stop"
		if gen >= o.gen.MaxTokens {
			reason = "max_tokens"
		}
		return end, writeRunJSON(stdout, runJSON{Text: text.String(), Reasoning: reasoning.String(), PromptTokens: prompt, GeneratedTokens: gen, StopReason: reason})
	}
	w.WriteString("\n")
	return end, w.Flush()
}

// reasoningWriter streams a reply's reasoning to w, dimmed on a terminal;
// end closes it with a newline once some was written.
type reasoningWriter struct {
	w          io.Writer
	dim, hide  bool
	open, done bool
}

func (r *reasoningWriter) write(s string) {
	if s == "" || r.hide || r.done {
		return
	}
	if !r.open {
		r.open = true
		if r.dim {
			io.WriteString(r.w, "\x1b[2m")
		} else {
			io.WriteString(r.w, "thinking: ")
		}
	}
	io.WriteString(r.w, s)
}

func (r *reasoningWriter) end() {
	if !r.open || r.done {
		return
	}
	r.done = true
	if r.dim {
		io.WriteString(r.w, "\x1b[0m")
	}
	io.WriteString(r.w, "\n")
}

const chatHelp = `commands: /save FILE, /load FILE, /reset, /quit (or Ctrl-D); "//text" sends "/text"`

// chatBanner is what the interactive chat says first: how to talk, what
// the dim text is (the model's reasoning, shown before its answer), how
// Ctrl-C works, the commands.
func (o *runOpts) chatBanner(stderr io.Writer) string {
	var b strings.Builder
	b.WriteString("chat: type a message and press Enter.")
	switch {
	case o.noThinking || o.hideReasoning:
	case isTerminal(stderr):
		b.WriteString(" The model reasons first: its reasoning is the \x1b[2mdim text\x1b[0m, then comes its answer.")
	default:
		b.WriteString(` The model reasons first: its reasoning follows "thinking: " on stderr, then comes its answer.`)
	}
	b.WriteString(" Ctrl-C stops a reply; Ctrl-C twice leaves (exit code 130).\n" + chatHelp)
	return b.String()
}

// chatLoop reads user messages from stdin, one per line. On a terminal,
// errors are reported and the chat goes on; from a pipe they end it.
func (o *runOpts) chatLoop(ctx context.Context, m *k3.Model, stdin io.Reader, stdout, stderr io.Writer, n *tokenCount) error {
	c, err := o.newChat(m)
	if err != nil {
		return cli.Usagef("%v", err)
	}
	tty := isTerminal(stdin)
	if tty {
		fmt.Fprintln(stderr, o.chatBanner(stderr))
	}
	// One channel for the chat's Ctrl-Cs, at the prompt and during
	// replies: between the two no Ctrl-C falls to the default handling.
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, os.Interrupt)
	defer signal.Stop(sig)
	o.sig = sig
	defer func() { o.sig = nil }()
	interrupted := false // the last reply ended at a Ctrl-C: one more leaves
	fail := func(err error) error {
		if !tty {
			return err
		}
		fmt.Fprintf(stderr, "error: %s\n", cli.Text(err))
		return nil
	}
	in := readLines(stdin)
	defer in.stop()
	// The end of a terminal's input (Ctrl-D) also stops a reply; the end
	// of a pipe only ends the chat once the replies to its lines are out.
	var quit <-chan struct{}
	if tty {
		quit = in.eof
	}
	for {
		if tty {
			fmt.Fprint(stderr, "> ")
		}
		line, ok, err := in.next(sig, stderr, interrupted)
		interrupted = false
		if err != nil || !ok {
			if tty {
				fmt.Fprintln(stderr)
			}
			return err
		}
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		if strings.HasPrefix(line, "/") && !strings.HasPrefix(line, "//") {
			cmd, arg, _ := strings.Cut(strings.TrimSpace(line), " ")
			arg = strings.TrimSpace(arg)
			switch cmd {
			case "/quit", "/exit":
				return nil
			case "/help":
				fmt.Fprintln(stderr, chatHelp)
			case "/reset":
				c.Close()
				if c, err = o.newChat(m); err != nil {
					return err
				}
				fmt.Fprintln(stderr, "conversation reset")
			case "/save", "/load":
				if arg == "" {
					if err := fail(cli.Usagef("%s needs a file name", cmd)); err != nil {
						return err
					}
					continue
				}
				var err error
				if cmd == "/save" {
					err = c.SaveFile(arg)
				} else {
					// Into a new conversation, so that a failed load
					// leaves the current one as it was.
					var nc *k3.Conversation
					if nc, err = o.newChat(m); err == nil {
						if err = nc.LoadFile(arg); err == nil {
							c.Close()
							c = nc
						} else {
							nc.Close()
						}
					}
				}
				if err != nil {
					if err := fail(fileCommandError(cmd, arg, err)); err != nil {
						return err
					}
					continue
				}
				verb := map[string]string{"/save": "saved", "/load": "loaded"}[cmd]
				fmt.Fprintf(stderr, "%s %d tokens (%s)\n", verb, c.Session().Len(), arg)
			default:
				if err := fail(cli.Usagef("unknown command %s (%s)", cmd, chatHelp)); err != nil {
					return err
				}
			}
			continue
		}
		if strings.HasPrefix(line, "//") {
			line = line[1:]
		}
		end, err := o.reply(ctx, c, line, stdout, stderr, n, quit)
		if quit != nil && in.ended() {
			fmt.Fprintln(stderr, "end of input: the chat ends")
			return nil
		}
		interrupted = end != replyDone
		if end == replyStopped && tty {
			fmt.Fprintln(stderr, "(reply stopped; Ctrl-C again, /quit or Ctrl-D to leave)")
		}
		if err != nil {
			if end == replyAbandoned {
				fmt.Fprintln(stderr, "reply abandoned; the conversation restarts")
				c.Close()
				if c, err = o.newChat(m); err != nil {
					return err
				}
				continue
			}
			if err := fail(err); err != nil {
				return err
			}
		}
	}
}

// fileCommandError is a failed /save or /load FILE as the chat says it:
// the command and the file, then why ("the file does not exist", the
// system's reason, or the library's without the name of its function).
func fileCommandError(cmd, file string, err error) error {
	var pe *fs.PathError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return cli.Tagged(err, "%s %s: the file does not exist", cmd, file)
	case errors.As(err, &pe):
		return cli.Tagged(err, "%s %s: %v", cmd, file, pe.Err)
	}
	return cli.Tagged(err, "%s %s: %s", cmd, file, cli.Text(err))
}

// lineReader reads the chat's input lines in a goroutine, so that the chat
// can wait for a line and a Ctrl-C at once, and see the end of a
// terminal's input while a reply streams.
type lineReader struct {
	lines chan string
	eof   chan struct{} // closed once input has ended; err is then set
	done  chan struct{} // closed by stop: the reader goroutine returns
	err   error
}

func readLines(r io.Reader) *lineReader {
	lr := &lineReader{lines: make(chan string), eof: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(lr.eof)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 64<<20)
		for sc.Scan() {
			select {
			case lr.lines <- sc.Text():
			case <-lr.done:
				return
			}
		}
		lr.err = sc.Err()
	}()
	return lr
}

func (lr *lineReader) stop() { close(lr.done) }

// ended reports whether the input has ended.
func (lr *lineReader) ended() bool {
	select {
	case <-lr.eof:
		return true
	default:
		return false
	}
}

// next waits for a line; ok is false at the end of input. A Ctrl-C (on
// sig) while it waits says how to leave, and a second one in a row leaves
// with errInterrupted; interrupted says the first came already (it
// stopped the reply before).
func (lr *lineReader) next(sig <-chan os.Signal, stderr io.Writer, interrupted bool) (line string, ok bool, err error) {
	for {
		select {
		case line := <-lr.lines:
			return line, true, nil
		case <-lr.eof:
			// A line sent just before the end is still there.
			select {
			case line := <-lr.lines:
				return line, true, nil
			default:
			}
			return "", false, lr.err
		case <-sig:
			if interrupted {
				fmt.Fprintln(stderr)
				return "", false, errInterrupted // main says "k3 run: interrupted"

			}
			interrupted = true
			fmt.Fprint(stderr, "\n(Ctrl-C again, /quit or Ctrl-D to leave)\n> ")
		}
	}
}
