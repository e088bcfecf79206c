#!/usr/bin/env bash
# released-e2e.sh: a new user's first commands on the released Kimi K3's
# layout, each of which must show an answer or its progress, never
# silence (issue 34).
#
# Writes the release's layout with `k3 synth --profile full --sparse
# --with-tokenizer` (96 shards of headers and holes that read back as
# zeros: 1.56 TB described, about 130 MB of disk, and a generated
# tokenizer), then runs the README's commands for the real model on it,
# with stdout and stderr in pipes, as a script or a CI log would:
#
#   1. k3 plan --model DIR: the table on stdout;
#   2. k3 run --model DIR --preset laptop --prompt ... --max-tokens N:
#      progress lines on stderr while it prefills and decodes (at 8 GB a
#      pass reads 133 GB), then text on stdout;
#   3. k3 serve --model DIR --preset laptop and the README's curl (its
#      body read from README.md): the server logs the generation's progress
#      while it runs, and the reply is a chat completion with visible
#      content (CHECK_CONTENT=0 accepts reasoning only).
#
# The weights are zeros, so the text is noise; what is checked is that
# every step says what it does. It needs about 8 GB of RAM and reads the
# holes at the disk's (the page cache's) speed: run it under the shared
# lock. At 8 GB one token is a pass over 132 GB of holes; the run and the
# curl take minutes, the README's 64 tokens half an hour on 2 cores
# (TOKENS, k3 run's --max-tokens, default 2, and CURL_TOKENS, the curl's
# max_tokens, default the README's, shorten them).
#
#   flock /work/.benchlock scripts/released-e2e.sh
#
# Environment: K3 (a k3 binary; default: built from this tree), PORT
# (default 18280), TOKENS, CURL_TOKENS, CHECK_CONTENT (default 1), KEEP=1
# keeps the work directory.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
port=${PORT:-18280}
tokens=${TOKENS:-2}
# The README's curl: its JSON body, as written there.
body=$(grep -o "curl -s localhost:8080/v1/chat/completions -d '[^']*'" "$root/README.md" | head -1 | sed "s/.* -d '//; s/'\$//")
[[ -n "$body" ]] || { echo "released-e2e.sh: no curl example in README.md" >&2; exit 1; }
if [[ -n "${CURL_TOKENS:-}" ]]; then
	body=$(jq -c --argjson n "$CURL_TOKENS" '.max_tokens = $n' <<<"$body")
fi
work=$(mktemp -d)
srv=
cleanup() {
	if [[ -n "$srv" ]]; then kill "$srv" 2>/dev/null || true; wait "$srv" 2>/dev/null || true; fi
	if [[ "${KEEP:-}" == 1 ]]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { printf '\n== %s\n' "$*"; }

k3=${K3:-}
if [[ -z "$k3" ]]; then
	(cd "$root" && go build -o "$work/k3" ./cmd/k3)
	k3=$work/k3
fi
full=$work/kimi-k3

step "k3 synth --profile full --sparse --with-tokenizer"
"$k3" synth --profile full --sparse --with-tokenizer --out "$full"

step "k3 plan --model $full"
start=$SECONDS
"$k3" plan --model "$full" >"$work/plan.out" 2>"$work/plan.err"
cat "$work/plan.out"
echo "(k3 plan took $((SECONDS - start)) s; stderr: $(wc -l <"$work/plan.err") lines)"
grep -q 's/tok@6GB/s' "$work/plan.out" || fail "k3 plan printed no table"
grep -q '^  *8.00 GB  *1 ' "$work/plan.out" || fail "k3 plan printed no 8 GB row"

step "k3 run --model $full --preset laptop --max-tokens $tokens (stdout and stderr in pipes)"
start=$SECONDS
"$k3" run --model "$full" --preset laptop --prompt "The capital of France is" --max-tokens "$tokens" \
	--progress lines >"$work/run.out" 2>"$work/run.err"
echo "stdout: $(cat "$work/run.out")"
echo "stderr:"
cat "$work/run.err"
echo "(k3 run took $((SECONDS - start)) s)"
[[ -s "$work/run.out" ]] || fail "k3 run wrote no text"
grep -q '^prefill [0-9,]*/[0-9,]* tokens · .* read' "$work/run.err" || fail "k3 run showed no prefill progress"
grep -q '^decode [0-9,]* token' "$work/run.err" || fail "k3 run showed no decode progress"

step "k3 serve --model $full --preset laptop, and the README's curl"
"$k3" serve --model "$full" --preset laptop --addr "127.0.0.1:$port" --progress lines \
	>"$work/serve.out" 2>"$work/serve.err" &
srv=$!
for _ in $(seq 1 600); do
	code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" || true)
	[[ "$code" == 200 ]] && break
	kill -0 "$srv" 2>/dev/null || { cat "$work/serve.err"; fail "k3 serve exited while loading"; }
	sleep 1
done
[[ "$code" == 200 ]] || fail "k3 serve did not become ready"
start=$SECONDS
echo "curl -s localhost:$port/v1/chat/completions -d '$body'"
reply=$(curl -s "localhost:$port/v1/chat/completions" -d "$body")
echo "reply: $reply"
echo "(the curl took $((SECONDS - start)) s)"
metrics=$(curl -s "localhost:$port/metrics")
kill "$srv"
wait "$srv" 2>/dev/null || true
srv=
echo "server log:"
cat "$work/serve.err"
jq -e '.object == "chat.completion" and (.choices | length) == 1' <<<"$reply" >/dev/null || fail "the curl's reply is not a chat completion"
grep -q 'msg="generation in progress".*phase=' "$work/serve.err" || fail "k3 serve logged no progress for a generation of minutes"
grep -q '^k3_inflight_generated_tokens ' <<<"$metrics" || fail "/metrics has no k3_inflight_generated_tokens"
if [[ "${CHECK_CONTENT:-1}" == 1 ]]; then
	jq -e '(.choices[0].message.content // "") != ""' <<<"$reply" >/dev/null || fail "the curl's reply has no visible content"
fi
echo
echo "PASS: k3 plan, k3 run and k3 serve with the README's curl each showed an answer or their progress"
