package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/internal/app/synth"
	"github.com/k3go/k3/internal/testkit/testmodel"
)

func TestMain(m *testing.M) { testmodel.Main(m) }

// tiny writes the tiny synthetic checkpoint (k3 synth --profile tiny) into
// a temporary directory.
func tiny(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny")
	if _, err := synth.Write(context.Background(), dir, synth.Tiny(), synth.WriteOptions{}); err != nil {
		t.Fatalf("writing the tiny checkpoint: %v", err)
	}
	return dir
}

// runCmd runs "k3 bench" or "k3 bench-serve" (args[0]) with the rest of
// args, as the command does: it returns the exit code, stdout, and stderr
// with the error's line after what the subcommand printed.
func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := map[string]func([]string, io.Reader, io.Writer, io.Writer) error{"bench": Run, "bench-serve": RunServe}[args[0]]
	if cmd == nil {
		t.Fatalf("no subcommand %q", args[0])
	}
	var out, errb bytes.Buffer
	err := cmd(args[1:], strings.NewReader(""), &out, &errb)
	if err != nil && !errors.Is(err, cli.ErrHelp) {
		fmt.Fprintf(&errb, "k3 %s: %v\n", args[0], err)
	}
	return cli.ExitCode(err), out.String(), errb.String()
}
