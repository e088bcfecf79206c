package model

import "github.com/k3go/k3/quant"

// Linear is a weight matrix in one of the stored forms (dense F32/BF16 or
// packed MXFP4), the type of every matrix field of the layer structs. It
// is quant.Linear, which the expert index binds too.
type Linear = quant.Linear
