package tokenizer

//go:generate go run ./internal/ucd/gentables -o tables.go
