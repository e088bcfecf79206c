// Command gentables writes tokenizer/tables.go, the Unicode 15.1.0 class
// table of the pre-tokenizer. Run it through go generate in tokenizer/.
package main

import (
	"flag"
	"log"
	"os"

	"github.com/k3go/k3/tokenizer/internal/ucd"
)

func main() {
	out := flag.String("o", "tables.go", "output file")
	flag.Parse()
	src, err := ucd.Generate()
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, src, 0o644); err != nil {
		log.Fatal(err)
	}
}
