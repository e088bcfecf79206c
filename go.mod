module github.com/k3go/k3

go 1.26.0

require golang.org/x/sys v0.50.0

// arm64 CPU features (ASIMD, ASIMDDP, BF16, SVE) for the NEON kernel
// dispatch in internal/platform/cpu; imported on arm64 builds only.
require github.com/klauspost/cpuid/v2 v2.4.2

// huff0 codes the exponent bytes of the compressed packed trunk (k3 pack
// --compress): fuzzed, with an amd64 asm 4-stream decoder.
require github.com/klauspost/compress v1.20.4

// imported by internal/app/server only (k3 serve's /metrics), so the library
// stays lean.
require github.com/prometheus/client_golang v1.25.0

// test-only: the official client proves that internal/app/server speaks the
// OpenAI API (tools, tool calls, streamed deltas) as real clients do.
require github.com/openai/openai-go/v3 v3.98.0

// test-only: an independent JSON Schema validator (draft 2020-12, formats
// asserted) proves that package grammar's constrained outputs validate;
// imported by grammar's and chat's tests and internal/testkit/grammartest.
require github.com/santhosh-tekuri/jsonschema/v6 v6.0.3

// test-only: the official Anthropic client proves that internal/app/server
// speaks the Messages API (/v1/messages: tools, thinking, streamed events
// through the client's own accumulator) as real clients do.
require github.com/anthropics/anthropic-sdk-go/v2 v2.16.0

require (
	github.com/BurntSushi/toml v1.4.1-0.20240526193622-a339e1f7089c // indirect
	github.com/bahlo/generic-list-go v0.2.0 // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/buger/jsonparser v1.1.2 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/coder/websocket v1.8.15 // indirect
	github.com/fxamacker/cbor/v2 v2.9.1 // indirect
	github.com/go-logr/logr v1.4.3 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/invopop/jsonschema v0.14.0 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.3-0.20250322232337-35a7c28c31ee // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/pb33f/ordered-map/v2 v2.3.1 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/standard-webhooks/standard-webhooks/libraries v0.0.1 // indirect
	github.com/tidwall/gjson v1.20.0 // indirect
	github.com/tidwall/match v1.1.1 // indirect
	github.com/tidwall/pretty v1.2.1 // indirect
	github.com/tidwall/sjson v1.2.5 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	go.opentelemetry.io/auto/sdk v1.1.0 // indirect
	go.opentelemetry.io/otel v1.33.0 // indirect
	go.opentelemetry.io/otel/metric v1.33.0 // indirect
	go.opentelemetry.io/otel/trace v1.33.0 // indirect
	go.yaml.in/yaml/v2 v2.4.4 // indirect
	go.yaml.in/yaml/v4 v4.0.0-rc.2 // indirect
	golang.org/x/exp/typeparams v0.0.0-20231108232855-2478ac86f678 // indirect
	golang.org/x/mod v0.41.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	golang.org/x/tools v0.51.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
	gopkg.in/inf.v0 v0.9.1 // indirect
	honnef.co/go/tools v0.8.2 // indirect
	k8s.io/klog/v2 v2.140.0 // indirect
	k8s.io/kube-openapi v0.0.0-20260721132016-d427ff9ee9ad // indirect
	k8s.io/utils v0.0.0-20260626114624-be93311217bd // indirect
	sigs.k8s.io/randfill v1.0.0 // indirect
	sigs.k8s.io/structured-merge-diff/v6 v6.4.2 // indirect
)

// test-only: cmd/k3's TestK8sManifests decodes the Kubernetes manifests in
// docs/k8s strictly into the API's own Go types, offline (an unknown or
// miscapitalised field, a duplicate key, a wrong type or a bad quantity is
// an error), and checks a cluster's invariants on the typed objects.
require (
	k8s.io/api v0.37.2
	k8s.io/apimachinery v0.37.2
	sigs.k8s.io/json v0.0.0-20260909141634-11ed52e25bc5
	sigs.k8s.io/yaml v1.6.0
)

require github.com/dlclark/regexp2/v2 v2.13.0 // test-only: cross-checks the hand-written pre-tokenizer

tool honnef.co/go/tools/cmd/staticcheck
