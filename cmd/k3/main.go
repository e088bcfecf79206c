// Command k3 runs Kimi K3 checkpoints on the CPU: generate tokens, print
// logits, and more. Run "k3 help" for the list of commands.
//
// Exit codes: 0 success; 1 runtime failure; 2 usage error; 3 bad
// checkpoint or config; 4 an expert failed to load (output invalid);
// 5 the RAM budget cannot hold the model; 6 I/O error; 7 internal error
// (a bug: a panic, reported with its stack); 130 interrupted (Ctrl-C).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/bench"
	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/internal/app/plan"
	"github.com/k3go/k3/internal/platform/crash"
)

// version is the command's version; set with -ldflags "-X main.version=...".
var version = k3.Version

type command struct {
	name    string
	summary string
	run     func(args []string, stdin io.Reader, stdout, stderr io.Writer) error
}

var commands []command

func init() {
	commands = []command{
		{"run", "generate text from a prompt, or chat (default model: the quickstart checkpoint)", runRun},
		{"generate", "generate token ids from a prompt of ids, or from many at once (--batch-file)", runGenerate},
		{"batch", "run a file of OpenAI Batch API requests (chat and completions) together; resumable, shardable", runBatch},
		{"logits", "print the logits of a teacher-forced forward pass", runLogits},
		{"pack", "rewrite the dense weights into one aligned file for streaming", runPack},
		{"slice", "copy the share of a checkpoint one rank of a cluster reads, as sparse files", runSlice},
		{"tokenize", "print the token ids of a text", runTokenize},
		{"detokenize", "print the text of token ids", runDetokenize},
		{"template", "render a conversation in K3's chat format, or parse a model's answer", runTemplate},
		{"synth", "write a synthetic checkpoint (" + synthProfiles(", ", " or ") + ")", runSynth},
		{"bench", "measure prefill and decode speed against the roofline, or batches of sessions (--batch)", bench.Run},
		{"plan", "project bytes and s/token per budget and batch size, the prefill of long prompts cold and cached, and with --ranks a cluster's bytes per rank and gathers, from the memory planner (reads no weights)", plan.Run},
		{"serve", "serve the model over HTTP: the OpenAI, Anthropic Messages and Ollama APIs, /health, /metrics, /tokenize", runServe},
		{"bench-serve", "measure the server end to end: aggregate tokens/s of concurrent streaming clients on loopback", bench.RunServe},
		{"worker", "run one rank of a cluster: hold and read this machine's rows of every weight, for a rank 0 started with --peers", runWorker},
		{"doctor", "check this machine: CPU, kernels, RAM, disk bandwidth, advice for a checkpoint", runDoctor},
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run runs the command line args with the given standard streams and
// returns the exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printHelp(stderr)
		return cli.ExitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			return run([]string{args[1], "--help"}, stdin, stdout, stderr)
		}
		printHelp(stdout)
		return cli.ExitOK
	case "version", "-version", "--version":
		fmt.Fprintf(stdout, "k3 %s\n", version)
		return cli.ExitOK
	}
	for _, c := range commands {
		if c.name == args[0] {
			err := runCommand(c, args[1:], stdin, stdout, stderr)
			if err == nil {
				return cli.ExitOK
			}
			// Help goes to stdout, as what was asked for: k3 help run | less.
			var he *cli.HelpError
			if errors.As(err, &he) {
				io.WriteString(stdout, he.Usage)
				return cli.ExitOK
			}
			if errors.Is(err, cli.ErrHelp) {
				return cli.ExitOK
			}
			err = explain(c, err)
			fmt.Fprintf(stderr, "k3 %s: %s\n", c.name, errorText(c.name, err))
			return cli.ExitCode(err)
		}
	}
	fmt.Fprintf(stderr, "k3: unknown command %q\n", args[0])
	printHelp(stderr)
	return cli.ExitUsage
}

// runCommand runs c, recovering a panic on the command's goroutine as an
// *internalError (exit code 7, the stack in the message). A panic on one
// of the engine's goroutines comes back from the library as an error
// wrapping crash.ErrInternal, which exits 7 too.
func runCommand(c command, args []string, stdin io.Reader, stdout, stderr io.Writer) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &internalError{panic: p, stack: debug.Stack()}
		}
	}()
	return c.run(args, stdin, stdout, stderr)
}

// internalError is a recovered panic: a bug in k3, not the user's input.
type internalError struct {
	panic any
	stack []byte
}

func (e *internalError) Error() string {
	return fmt.Sprintf("internal error: %v\nThis is a bug in k3; please report it with this stack:\n%s", e.panic, e.stack)
}

// Unwrap makes errors.Is(err, crash.ErrInternal) hold, as for a panic on
// an engine goroutine, so that cli.ExitCode gives both exit code 7.
func (e *internalError) Unwrap() error { return crash.ErrInternal }

// explain tells an option the library refused (a *k3.OptionError, which
// names a k3.Options field) with the flag of c that sets it: "--max-context
// 100000000: ...", not "Options.MaxContext".
func explain(c command, err error) error {
	var oe *k3.OptionError
	if !errors.As(err, &oe) {
		return err
	}
	return cli.ForFlags(err, flagsOf(c))
}

// flagsOf returns c's flag set, as "k3 c --help" defines it (nil if c has
// none).
func flagsOf(c command) *flag.FlagSet {
	var he *cli.HelpError
	if errors.As(c.run([]string{"--help"}, strings.NewReader(""), io.Discard, io.Discard), &he) {
		return he.Flags
	}
	return nil
}

// errorText is err's message without the prefixes that repeat what the
// command line already says: the library marks its errors "k3: " (and some
// "k3: <command>: "), which after "k3 <command>: " would read twice.
func errorText(name string, err error) string {
	msg := cli.Text(err)
	msg = strings.TrimPrefix(msg, "k3: ")
	msg = strings.TrimPrefix(msg, name+": ")
	return msg
}

func printHelp(w io.Writer) {
	fmt.Fprintf(w, "k3 runs Kimi K3 on the CPU.\n\nUsage:\n\n\tk3 <command> [flags]\n\nCommands:\n\n")
	for _, c := range commands {
		fmt.Fprintf(w, "\t%-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\t%-10s %s\n\t%-10s %s\n", "help", "show help for a command: k3 help <command>", "version", "print the version")
	fmt.Fprintf(w, "\nExit codes: 0 ok, 1 failure, 2 usage, 3 bad checkpoint or config, 4 expert load failure, 5 RAM budget too small, 6 I/O error, 7 internal error (a bug), 130 interrupted (Ctrl-C).\n")
}
