//go:build linux

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/internal/testkit/testmodel"
)

// openPTY opens a pseudo-terminal: the master side the test types into
// and reads, the slave side the chat's standard streams are.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	fd := int(m.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return m, s
}

// terminalChat is k3 run's interactive chat in a child process whose
// terminal is a pseudo-terminal: what it writes, and a way to type.
type terminalChat struct {
	t      *testing.T
	cmd    *exec.Cmd
	master *os.File
	chunks chan string
	out    strings.Builder // everything read so far
	seen   int             // how far wait has looked
}

func startTerminalChat(t *testing.T, args ...string) *terminalChat {
	master, slave := openPTY(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), "K3_HELPER_ARGS="+strings.Join(append([]string{"run"}, args...), "\n"))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	// Its own session with the terminal as its controlling one: Ctrl-C
	// typed there is SIGINT to it, as in a shell.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	tc := &terminalChat{t: t, cmd: cmd, master: master, chunks: make(chan string, 64)}
	t.Cleanup(func() { cmd.Process.Kill(); master.Close() })
	go func() {
		defer close(tc.chunks)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			if n > 0 {
				tc.chunks <- string(buf[:n])
			}
			if err != nil { // EIO once the child has closed the terminal
				return
			}
		}
	}()
	return tc
}

// wait reads until the output after what an earlier wait matched holds
// want; the chat ending first fails the test. No clock is involved: the
// child either writes it or exits.
func (tc *terminalChat) wait(want string) {
	tc.t.Helper()
	for {
		if i := strings.Index(tc.out.String()[tc.seen:], want); i >= 0 {
			tc.seen += i + len(want)
			return
		}
		chunk, ok := <-tc.chunks
		if !ok {
			tc.t.Fatalf("the chat ended before it wrote %q; it wrote:\n%s", want, tc.out.String())
		}
		tc.out.WriteString(chunk)
	}
}

func (tc *terminalChat) typeIn(s string) {
	tc.t.Helper()
	if _, err := tc.master.WriteString(s); err != nil {
		tc.t.Fatal(err)
	}
}

// exitCode waits for the chat to end, reading what is left.
func (tc *terminalChat) exitCode() int {
	tc.t.Helper()
	for chunk := range tc.chunks {
		tc.out.WriteString(chunk)
	}
	err := tc.cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		tc.t.Fatal(err)
	}
	return 0
}

// TestChatCtrlC: in k3 run's chat on a terminal, the banner says that dim
// text is the model's reasoning and how Ctrl-C works; Ctrl-C twice at the
// prompt leaves with exit code 130, and so do a Ctrl-C during a reply and
// one more at the prompt after it. The Ctrl-Cs are typed into a
// pseudo-terminal, so they are real SIGINTs from the terminal.
func TestChatCtrlC(t *testing.T) {
	dir := testmodel.Dir(t)

	tc := startTerminalChat(t, "--model", dir)
	tc.wait("chat: type a message")
	tc.wait("reasoning is the \x1b[2mdim text\x1b[0m")
	tc.wait("Ctrl-C twice leaves (exit code 130)")
	tc.wait("> ")
	tc.typeIn("\x03")
	tc.wait("Ctrl-C again, /quit or Ctrl-D to leave")
	tc.typeIn("\x03")
	if code := tc.exitCode(); code != cli.ExitInterrupted || !strings.Contains(tc.out.String(), "k3 run: interrupted") {
		t.Errorf("Ctrl-C twice at the prompt: exit %d, want %d; the chat wrote:\n%s", code, cli.ExitInterrupted, tc.out.String())
	}

	tc = startTerminalChat(t, "--model", dir, "--max-tokens", "100000")
	tc.wait("> ")
	tc.typeIn("Hello there.\r")
	tc.wait("\x1b[2m") // the reply's reasoning has begun
	tc.typeIn("\x03")
	// The reply stops at its next token (or had ended: the Ctrl-C is then
	// the prompt's first); at the prompt one more leaves either way.
	tc.wait("Ctrl-C again, /quit or Ctrl-D to leave")
	tc.wait("> ")
	tc.typeIn("\x03")
	if code := tc.exitCode(); code != cli.ExitInterrupted {
		t.Errorf("Ctrl-C during a reply, then at the prompt: exit %d, want %d; the chat wrote:\n%s", code, cli.ExitInterrupted, tc.out.String())
	}
}
