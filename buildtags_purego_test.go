//go:build purego

package k3_test

func init() { k3BuildTags = "purego" }
