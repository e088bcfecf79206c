package k3

// SamplingOptions choose the next token from the logits. The zero value is
// greedy decoding (argmax, first index on ties).
type SamplingOptions struct {
	// Temperature divides the logits; 0 (or less) means greedy argmax.
	Temperature float32
	// TopK keeps the K most likely tokens; 0 keeps all.
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probability
	// reaches P; 0 or 1 keeps all.
	TopP float32
	// MinP drops tokens less likely than MinP × the most likely one; 0
	// keeps all.
	MinP float32
	// RepetitionPenalty (> 1 discourages) divides positive logits and
	// multiplies negative ones of every token already in the sequence;
	// 0 or 1 disables it.
	RepetitionPenalty float32
	// PresencePenalty is subtracted once from the logit of every token
	// already in the sequence; FrequencyPenalty once per occurrence.
	PresencePenalty, FrequencyPenalty float32
	// Seed makes sampling reproducible: the same seed, prompt and options
	// give the same tokens.
	Seed uint64
}
