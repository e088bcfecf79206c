package iox

import (
	"os"
	"path/filepath"
	"testing"
)

// TestFingerprint checks that the fingerprint follows the checkpoint's
// content: the same bytes in another directory give the same value, and a
// changed byte in a sampled data window, a renamed tensor or another shard
// name each give a different one.
func TestFingerprint(t *testing.T) {
	data := make([]byte, 64<<10)
	for i := range data {
		data[i] = byte(i*7 + i>>8)
	}
	js := `{"w":{"dtype":"U8","shape":[65536],"data_offsets":[0,65536]}}`
	fingerprint := func(name, js string, data []byte) string {
		t.Helper()
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, name), header(js, data), 0o644); err != nil {
			t.Fatal(err)
		}
		ck, err := OpenCheckpoint(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer ck.Close()
		fp, err := ck.Fingerprint()
		if err != nil {
			t.Fatal(err)
		}
		again, _ := ck.Fingerprint()
		if again != fp {
			t.Fatalf("second call: %s, first %s", again, fp)
		}
		return fp
	}
	base := fingerprint("model-00001.safetensors", js, data)
	if got := fingerprint("model-00001.safetensors", js, data); got != base {
		t.Errorf("same content elsewhere: %s, want %s", got, base)
	}
	changed := append([]byte(nil), data...)
	changed[len(data)/fingerprintSamples*3] ^= 1 // the start of the fourth sampled window
	renamed := `{"v":{"dtype":"U8","shape":[65536],"data_offsets":[0,65536]}}`
	for what, fp := range map[string]string{
		"a sampled byte": fingerprint("model-00001.safetensors", js, changed),
		"a tensor name":  fingerprint("model-00001.safetensors", renamed, data),
		"the shard name": fingerprint("model-00002.safetensors", js, data),
	} {
		if fp == base {
			t.Errorf("changing %s left the fingerprint at %s", what, fp)
		}
	}
}
