package synth

// corpus is the text GenerateTokenizer learns its merges from: ordinary
// English and a little Go, Python and JSON, so that the generated
// vocabulary splits everyday prompts into plausible pieces. Changing it
// changes every generated tokenizer (and the golden hash of the
// quickstart checkpoint's tokenizer).
const corpus = `The quick brown fox jumps over the lazy dog. The dog was not amused, and the fox ran into the forest.
Once upon a time there was a small village at the edge of a great forest. The people of the village were farmers and
weavers, and every morning they walked to the fields while the sun rose over the hills. In the evening they came home,
shared their bread and told stories about the old days, when the river was wider and the winters were longer than now.

Hello, world! How are you today? I am fine, thank you. What would you like to talk about? We can talk about science,
history, music, programming, or anything else that you find interesting. Let me know what you think.

A language model reads a sequence of tokens and predicts the next one. The model is trained on a large amount of text,
and it learns which words tend to follow which. When you give it a prompt, it continues the text one token at a time.
Each token is a short piece of text: a word, part of a word, a number, a space or a punctuation mark. The tokenizer
turns the text into tokens and back again, so that nothing is lost on the way.

Computers store numbers in binary. A byte has eight bits and can hold one of 256 values. Memory is measured in bytes,
kilobytes, megabytes and gigabytes, and a modern machine has many gigabytes of memory and a fast disk. Reading from
the disk is slower than reading from memory, which is why programs keep the data they need most in a cache.

The weather today is sunny with a few clouds in the afternoon. Tomorrow there will be rain in the north and wind on the
coast. The temperature will be between 12 and 18 degrees. Please remember to take an umbrella if you are going out.

Questions and answers:
Q: What is the capital of France? A: The capital of France is Paris.
Q: How many days are there in a week? A: There are seven days in a week.
Q: Who wrote the book? A: It was written by a teacher who lived in the city for many years.
Q: Why is the sky blue? A: Because the air scatters blue light from the sun more than it scatters red light.

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Config holds the settings of the server.
type Config struct {
	Name    string
	Port    int
	Timeout int
}

func (c *Config) String() string {
	return fmt.Sprintf("%s:%d", c.Name, c.Port)
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("no arguments")
	}
	for i, arg := range args {
		if strings.HasPrefix(arg, "-") {
			continue
		}
		fmt.Printf("argument %d: %s\n", i, arg)
	}
	return nil
}

func main() {
	ctx := context.Background()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

def process(items, limit=10):
    """Return the first items that are not empty."""
    result = []
    for item in items:
        if item is None or item == "":
            continue
        result.append(item.strip())
        if len(result) >= limit:
            break
    return result

class Counter:
    def __init__(self):
        self.count = 0

    def add(self, value):
        self.count += value
        return self.count

{"name": "example", "version": "1.0.0", "items": [1, 2, 3], "enabled": true, "description": null}
{"id": 42, "type": "user", "attributes": {"email": "user@example.com", "active": false, "score": 3.5}}

The system should return an error when the input is not valid. If the file does not exist, the function returns
nil and an error that says which file was missing. Tests check that every error is reported with a clear message,
and that the program never panics on bad input. Documentation explains each option and gives an example.
`
