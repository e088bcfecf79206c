// Package grammar constrains what a language model generates to a
// grammar, one token at a time: a JSON Schema, any JSON object, a regular
// expression, or a grammar built from its expressions (which is how
// package chat constrains whole answers in K3's chat format). It turns a
// grammar into a mask over the model's vocabulary: before each token,
// the tokens that keep the output completable; the sampler picks among
// those only. It is pure Go, without cgo, depends on the standard library
// alone, and knows no tokenizer and no model.
//
// # Use
//
// Once per tokenizer, build a [Vocab] from the tokens' bytes and the
// special tokens' ids (package chat's GrammarVocab does it for a
// *tokenizer.Tokenizer). Once per request, compile a [Grammar]
// ([CompileJSONSchema], [JSONObject], [CompileRegexp], or [Compile] of an
// [Expr]) and bind it to the vocabulary with [Grammar.Constraint]. For
// each sequence, take a [Matcher] from the constraint, and per token:
//
//	m.FillMask(mask)            // mask: make([]uint64, v.MaskWords())
//	grammar.MaskLogits(logits, mask)
//	id := sample(logits)        // temperature, top-k, top-p after the mask
//	m.Accept(id)
//
// A Vocab and a Constraint are immutable (their caches fill under
// synchronization) and safe to share between goroutines; a Matcher
// belongs to one sequence, so in a batch every sequence has its own,
// taken from the request's constraint. [Constraint] and [Matcher] are
// interfaces: a program may pass its own grammar engine where this
// package's is expected.
//
// # Exactness
//
// A token is in the mask exactly when the grammar can still be completed
// after it: no dead ends. Completion means the value can be finished
// within the bounds the grammar sets (a maximum length of a string, of an
// array, a range of an integer, the nesting allowed by
// [Options.MaxDepth]); a bounded grammar therefore always finishes.
// Sampling from masked logits, greedy decoding picks the best allowed
// token, and an unconstrained request (no Matcher) is untouched.
//
// # End of generation
//
// [Matcher.CanEnd] reports that the output is complete as it stands
// (the sampler may then let its stop tokens through); [Matcher.Done]
// that it must stop: nothing may follow. In K3's chat format the grammar
// itself ends with <|end_of_msg|>, the stop token. If a sequence runs
// out of tokens (max_tokens) before the grammar is complete, the output
// is what was generated, incomplete, and its finish reason is "length":
// that is the engine's contract, and nothing here "repairs" it.
//
// # Speculative decoding
//
// A drafted token is allowed when [Matcher.Allowed] says so (or its bit
// is in the mask). To verify k drafted tokens exactly as non-speculative
// constrained sampling would, accept them one by one, filling the mask
// at each position (the target's distribution at position i is masked by
// the grammar's state after the first i drafts), then go back with
// [Matcher.Rollback] to the last accepted position. Rollback truncates
// the matcher's state: it costs next to nothing, however far it goes.
//
// # JSON
//
// [Schema] lists the JSON Schema keywords that are enforced and the
// subset of valid values that is generated. Strict schemas (the default)
// with a keyword that cannot be enforced are refused with a
// [*SchemaError] naming the keyword and its JSON pointer; lenient ones
// ([Options.Lenient], strict: false) are enforced as far as possible, and
// [Schema.Ignored] lists the rest.
//
// Insignificant whitespace is bounded by the [Style]: none in the zero
// Style (compact JSON), at most Style.Whitespace bytes at each place JSON
// allows it, or exactly Python's json.dumps layout (", " and ": "). A
// model cannot stall in whitespace, nor in digits (see [Schema] for the
// lengths of numbers). Strings
// are UTF-8; escapes are generated only as JSON allows them (\u escapes
// never for surrogates, and not in strings with a pattern or format).
//
// # Regular expressions
//
// Regular expressions are Go's regexp/syntax with Perl flags (what
// package regexp accepts), matched as UTF-8: character classes and .
// match code points. A [Regexp] expression (and [CompileRegexp]) matches
// text the expression matches as a whole; a JSON Schema pattern matches
// a string that contains a match anywhere, unless anchored with ^ and $.
// Multi-line anchors and word boundaries are not supported; an
// expression whose automaton would be too large is refused.
//
// # Cost
//
// Masks walk a trie of the vocabulary, so a prefix shared by many tokens
// is followed once, and stop at the first byte the grammar refuses.
// Inside strings, where most of the vocabulary is allowed, the walk is
// replaced by token classes: per lexer state, which tokens stay inside
// (with how many characters) and which close the string (with what
// follows the quote, which alone is walked). The classes of plain strings
// are computed with the Vocab; those of formats once per process; those
// of a pattern as the request first needs them. Over K3's vocabulary
// (163,840 tokens) a mask takes tens of microseconds at the median and a
// few hundred at the 99th percentile (see docs/PERFORMANCE.md).
package grammar
