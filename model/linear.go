package model

import "github.com/k3go/k3/expert"

// Linear is a weight matrix in one of the stored forms (dense F32/BF16 or
// packed MXFP4); see expert.Matrix.
type Linear = expert.Matrix
