#!/usr/bin/env bash
# released-figures.sh: every figure that README.md, docs/PERFORMANCE.md and
# docs/SCALING.md give for the released Kimi K3 (moonshotai/Kimi-K3), made
# again from today's planner in one command.
#
# Nobody here can read the 1.56 TB checkpoint, so these figures are
# projections: `k3 synth --profile full --sparse` writes the release's
# layout as shard headers and holes (96 shards, 497,220 tensors, about
# 130 MB of disk, seconds), and `k3 plan` and `k3 doctor` read only its
# headers. Bytes per pass come from the engine's own memory planner, the
# expert union from uniform routing (or, where said, the recorded expert
# trace), s/token from bytes over the disk's bandwidth: reads only, compute
# and overlap not modelled.
#
# It prints markdown: each table under the command that made it. Run it
# after a change to the planner and paste the tables over the old ones:
#
#   flock /work/.benchlock scripts/released-figures.sh > /tmp/figures.md
#
# Environment: K3 (a k3 binary; default: built from this tree), K3_FULL (a
# checkpoint directory in the released layout; default: written into a
# temporary directory), K3_FIXTURES (for expert_trace.bin; default
# ../shared/fixtures), KEEP=1 keeps the temporary directory. Needs jq.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
command -v jq >/dev/null || { echo "released-figures.sh: needs jq" >&2; exit 1; }
work=$(mktemp -d)
cleanup() { if [[ "${KEEP:-}" == 1 ]]; then echo "kept $work" >&2; else rm -rf "$work"; fi; }
trap cleanup EXIT

k3=${K3:-}
if [[ -z "$k3" ]]; then
	(cd "$root" && go build -o "$work/k3" ./cmd/k3)
	k3=$work/k3
fi
full=${K3_FULL:-}
if [[ -z "$full" ]]; then
	full=$work/full
	"$k3" synth --profile full --sparse --out "$full" >&2
fi
trace=${K3_FIXTURES:-$root/../shared/fixtures}/expert_trace.bin

# plan runs k3 plan on the released layout with the given flags and puts
# its JSON in $p; the command, with the checkpoint written as
# /models/kimi-k3, goes to $cmd for the table's caption.
plan() {
	cmd="k3 plan --model /models/kimi-k3 $*"
	"$k3" plan --model "$full" --progress off --json "$@" >"$work/plan.json"
	p=$(<"$work/plan.json")
}
caption() { printf '\n```sh\n%s\n```\n\n' "$cmd"; }

echo "# Figures for the released Kimi K3 ($(date -u +%Y-%m-%d), $(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo unknown))"
echo
echo "Projections from \`k3 plan\` and \`k3 doctor\` on the release's layout (\`k3 synth --profile full --sparse\`): reads only; compute and overlap not modelled."

# --- README: the floor, and s/token per budget and disk speed -----------
doc=$("$k3" doctor --model "$full" --dir "$work" --probe-size 64MiB --progress off --json || true)
echo
echo "## The floor and the presets (README, PERFORMANCE §10)"
cmd="k3 doctor --model /models/kimi-k3 --json"
caption
jq -r '"floor (the smallest --budget): \(.floor_bytes/1e9*100|round/100) GB; everything resident: \(.full_bytes/1e12*100|round/100) TB"' <<<"$doc"
echo
echo "| preset | budget | trunk parts pinned | ring | expert slots | trunk read per token | all reads per token | Go memory limit |"
echo "|---|---:|---:|---|---:|---:|---:|---:|"
jq -r '.plans[] | select(.fits) | "| \(.preset) | \(.budget_bytes/1e9) GB | \(.pinned_parts) of \(.parts) | \(.ring_slots) × \(.ring_slot_bytes/1e9*100|round/100) GB | \(.cache_slots) | \(.trunk_bytes_per_pass/1e9*100|round/100) GB | \(.bytes_per_token/1e9*100|round/100) GB | \(.go_memory_limit_bytes/1e9*100|round/100) GB |"' <<<"$doc"

echo
echo "## Expected speed, one sequence (README)"
plan --budget 8GB,32GB,128GB --batch 1 --gbps 3,7,14 --prompts 0
caption
echo "| budget | read per token | s/token at 3 GB/s | at 7 GB/s | at 14 GB/s |"
echo "|---:|---:|---:|---:|---:|"
jq -r '.rows[] | select(.fits) | "| \(.budget_bytes/1e9) GB | \(.bytes_per_token/1e9*10|round/10) GB | \(.s_per_token[0]*10|round/10) | \(.s_per_token[1]*10|round/10) | \(.s_per_token[2]*10|round/10) |"' <<<"$p"

# --- PERFORMANCE §7, SCALING: batches of different requests -------------
echo
echo "## Batches of different requests (PERFORMANCE §7, SCALING)"
plan --budget 8GB,32GB,128GB --batch 1,4,16,64 --gbps 6,14 --prompts 0
caption
echo "| budget | batch | experts per layer | GB per pass | GB per token | s/token @ 6 GB/s | s/token @ 14 GB/s | aggregate tok/s @ 14 GB/s |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
jq -r '.rows[] | if .fits then "| \(.budget_bytes/1e9) GB | \(.batch) | \(.expert_union_per_layer*10|round/10) | \(.bytes_per_pass/1e9*10|round/10) | \(.bytes_per_token/1e9*10|round/10) | \(.s_per_token[0]*100|round/100) | \(.s_per_token[1]*100|round/100) | \(.aggregate_tokens_per_s[1]*100|round/100) |" else "| \(.budget_bytes/1e9) GB | \(.batch) | – | – | – | – | – | does not fit: \(.batch) sessions'"'"' state |" end' <<<"$p"
best=$(jq -r '[.rows[] | select(.fits)] | max_by(.aggregate_tokens_per_s[1]) | "\(.budget_bytes/1e9) GB, batch \(.batch): \(.aggregate_tokens_per_s[1]*100|round/100) tok/s at 14 GB/s; 5 M tokens (10,000 requests × 500) in \(5e6/.aggregate_tokens_per_s[1]/86400*10|round/10) days on one machine, \(5e6/.aggregate_tokens_per_s[1]/86400/16*10|round/10) days on 16"' <<<"$p")
echo
echo "Most aggregate throughput in this table: $best."

if [[ -f "$trace" ]]; then
	echo
	echo "## One sequence's consecutive tokens (the expert trace; PERFORMANCE §7)"
	plan --budget 8GB,32GB,128GB --batch 1,4,16,64 --gbps 6,14 --prompts 0 --trace "$trace"
	cmd="${cmd/$trace/../shared/fixtures/expert_trace.bin}"
	caption
	echo "| budget | rows | experts per layer | GB per pass | GB per row |"
	echo "|---:|---:|---:|---:|---:|"
	jq -r '.rows[] | select(.fits) | "| \(.budget_bytes/1e9) GB | \(.batch) | \(.expert_union_per_layer*10|round/10) | \(.bytes_per_pass/1e9*10|round/10) | \(.bytes_per_token/1e9*10|round/10) |"' <<<"$p"
fi

# --- PERFORMANCE §11: the compressed trunk --------------------------------
echo
echo "## Trunk and experts per token (PERFORMANCE §11)"
plan --budget 8GB,32GB --batch 1 --gbps 6 --prompts 0
caption
echo "| budget | trunk / token | experts / token | total now | trunk × 0.662 (synthetic) | trunk × 0.70 (published) | total ratio |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
jq -r '.rows[] | select(.fits) | (.trunk_bytes_per_pass/1e9) as $t | (.bytes_per_token/1e9) as $a | ($a-$t) as $e |
	"| \(.budget_bytes/1e9) GB | \($t*10|round/10) GB | \($e*10|round/10) GB | \($a*10|round/10) GB | \($t*0.662*10|round/10) GB → \(($t*0.662+$e)*10|round/10) GB | \($t*0.70*10|round/10) GB → \(($t*0.70+$e)*10|round/10) GB | \(($t*0.662+$e)/$a*100|round/100)–\(($t*0.70+$e)/$a*100|round/100)× |"' <<<"$p"

# --- PERFORMANCE §13, SCALING: prefill, cold and cached -----------------
echo
echo "## Prefill, cold and with a cached prefix (PERFORMANCE §13, SCALING)"
plan --budget 8GB,32GB --batch 1 --gbps 6,14 --prompts 1000,10000,100000
caption
echo "| budget | prompt | rows/pass | passes | GB read / prompt token | vs chunk 64 | cold s @6 GB/s | cached s @6 GB/s | cold s @14 GB/s | cached s @14 GB/s |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
jq -r '.prefill[] | if .fits then "| \(.budget_bytes/1e9) GB | \(.prompt_tokens) | \(.rows_per_pass) | \(.passes) | \(.bytes_per_prompt_token/1e9*1000|round/1000) | \(.cold_bytes/.chunk64_bytes*1000|round/1000)× | \(.cold_seconds[0]|round) | \(.cached_seconds[0]|round) | \(.cold_seconds[1]|round) | \(.cached_seconds[1]|round) |" else "| \(.budget_bytes/1e9) GB | \(.prompt_tokens) | — | — | does not fit: the prompt'"'"'s MLA cache and state | | | | | |" end' <<<"$p"
