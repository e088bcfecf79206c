package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/tokenizer"
)

const tokenizeUsage = `--tokenizer DIR [--file F | --text TEXT] [--json] [--no-special]

Prints the token ids of a text: from --file, --text, or else stdin, taken
verbatim (a final newline is part of the text). Added tokens such as
<|im_end|> are recognised unless --no-special. The output is one line of
ids separated by spaces, or {"ids":[...]} with --json. --tokenizer defaults
to --model.`

const detokenizeUsage = `--tokenizer DIR [--ids 1,2,3 | --file F] [--json]

Prints the text of token ids given by --ids, or read from --file or stdin:
ids separated by commas or white space, a JSON array, or the {"ids":[...]}
object that k3 tokenize --json prints. The text is written exactly, with no
newline added, so that detokenize(tokenize(x)) == x; with --json it is
{"text":"..."} (bytes that are not UTF-8 become U+FFFD there, and
"valid_utf8" is false). --tokenizer defaults to --model.`

// tokenizerFlags are --tokenizer and --model.
type tokenizerFlags struct{ dir, model string }

func (t *tokenizerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.dir, "tokenizer", "", "`directory` with tiktoken.model and tokenizer_config.json")
	fs.StringVar(&t.model, "model", "", "checkpoint `directory` whose tokenizer to use when --tokenizer is not given")
	cli.InputDirs(fs, "tokenizer", "model")
}

func (t *tokenizerFlags) load() (*tokenizer.Tokenizer, error) {
	dir := t.dir
	if dir == "" {
		dir = t.model
	}
	if dir == "" {
		return nil, cli.Usagef("--tokenizer (or --model) is required")
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, errNoTokenizer(dir)
		}
		var fe *tokenizer.FormatError
		if errors.As(err, &fe) {
			return nil, badTokenizer{err}
		}
		return nil, err
	}
	return tok, nil
}

// errNoTokenizer is the usage error for a directory without tokenizer
// files: the fix is a flag, so it says which.
func errNoTokenizer(dir string) error {
	return cli.Usagef("%s has no tokenizer (%s and %s); give --tokenizer DIR", dir, tokenizer.ModelFile, tokenizer.ConfigFile)
}

// badTokenizer marks malformed tokenizer files for the exit code (3, bad
// checkpoint), keeping the message.
type badTokenizer struct{ err error }

func (e badTokenizer) Error() string   { return e.err.Error() }
func (e badTokenizer) Unwrap() []error { return []error{e.err, k3.ErrBadCheckpoint} }

// readInput returns the contents of file, or of stdin if file is empty.
func readInput(file string, stdin io.Reader) ([]byte, error) {
	if file != "" {
		return os.ReadFile(file)
	}
	b, err := io.ReadAll(stdin)
	if err != nil {
		return nil, fmt.Errorf("reading stdin: %w", err)
	}
	return b, nil
}

func runTokenize(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("tokenize", tokenizeUsage, stderr)
	var tf tokenizerFlags
	tf.register(fs)
	file := fs.String("file", "", "read the text from `F` (default: stdin)")
	text := fs.String("text", "", "the `text` to tokenize")
	asJSON := fs.Bool("json", false, `print {"ids":[...]}`)
	noSpecial := fs.Bool("no-special", false, "treat added-token strings such as <|im_end|> as plain text")
	cli.InputFiles(fs, "file")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	textSet := synthFlagSet(fs, "text")
	if textSet && *file != "" {
		return cli.Usagef("give --file or --text, not both")
	}
	tok, err := tf.load()
	if err != nil {
		return err
	}
	in := *text
	if !textSet {
		b, err := readInput(*file, stdin)
		if err != nil {
			return err
		}
		in = string(b)
	}
	ids := tok.AppendEncode(make([]int, 0, len(in)/3+1), in, tokenizer.EncodeOptions{NoAddedTokens: *noSpecial})
	if *asJSON {
		return json.NewEncoder(stdout).Encode(struct {
			IDs []int `json:"ids"`
		}{ids})
	}
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Itoa(id))
	}
	b.WriteByte('\n')
	_, err = io.WriteString(stdout, b.String())
	return err
}

func runDetokenize(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("detokenize", detokenizeUsage, stderr)
	var tf tokenizerFlags
	tf.register(fs)
	idsFlag := fs.String("ids", "", "token `ids`, comma separated")
	file := fs.String("file", "", "read the ids from `F` (default: stdin)")
	asJSON := fs.Bool("json", false, `print {"text":"..."}`)
	cli.InputFiles(fs, "file")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	idsSet := synthFlagSet(fs, "ids")
	if idsSet && *file != "" {
		return cli.Usagef("give --ids or --file, not both")
	}
	var ids []int
	var err error
	if idsSet {
		if ids, err = parseIDList([]byte(*idsFlag)); err != nil {
			return cli.Usagef("--ids %q: %v", *idsFlag, err)
		}
	}
	tok, err := tf.load()
	if err != nil {
		return err
	}
	if !idsSet {
		in, err := readInput(*file, stdin)
		if err != nil {
			return err
		}
		if ids, err = parseIDList(in); err != nil {
			return err
		}
	}
	text, err := tok.Decode(ids)
	if err != nil {
		if errors.Is(err, tokenizer.ErrUnknownID) {
			return cli.Usagef("%s", strings.TrimPrefix(err.Error(), "tokenizer: "))
		}
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(struct {
			Text      string `json:"text"`
			ValidUTF8 bool   `json:"valid_utf8"`
		}{text, utf8.ValidString(text)})
	}
	_, err = io.WriteString(stdout, text)
	return err
}

// parseIDList reads token ids: {"ids":[...]}, a JSON array, or numbers
// separated by commas or white space. No ids is an empty list.
func parseIDList(b []byte) ([]int, error) {
	t := bytes.TrimSpace(b)
	if len(t) == 0 {
		return []int{}, nil
	}
	var ids []int
	switch t[0] {
	case '{':
		var v struct {
			IDs *[]int `json:"ids"`
		}
		if err := json.Unmarshal(t, &v); err != nil || v.IDs == nil {
			return nil, cli.Usagef("input is not a JSON object with \"ids\": a list of token ids")
		}
		ids = *v.IDs
	case '[':
		if err := json.Unmarshal(t, &ids); err != nil {
			return nil, cli.Usagef("input is not a JSON array of token ids")
		}
	default:
		return parseIDs(string(t))
	}
	for _, id := range ids {
		if id < 0 {
			return nil, cli.Usagef("bad token id %d", id)
		}
	}
	return ids, nil
}
