// Package expert locates, reads and binds the routed experts of a Kimi K3
// checkpoint. Each expert is three matrices (w1 gate, w2 down, w3 up),
// stored as MXFP4 (a packed U8 tensor and an E8M0 scale tensor each: six
// tensors) in the released checkpoint or as dense F32/BF16 in test
// checkpoints. In the released layout an expert's six tensors form one
// contiguous run, so an expert is read with one request; an Index checks
// that for every expert and falls back to several requests where a
// checkpoint is laid out otherwise. Experts are bound in place, packed: a
// quant.Linear is a view over the bytes read, never a dequantised copy.
package expert
