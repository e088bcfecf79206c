#!/usr/bin/env bash
# agents-e2e.sh: the real coding agents against k3 serve, end to end.
#
# Installs Codex CLI and Claude Code from npm into a temporary directory,
# builds k3, writes a small synthetic checkpoint with the released Kimi K3
# tokenizer, starts `k3 serve` on it and runs one non-interactive prompt
# through each agent, set up as docs/AGENTS.md says: `codex exec` over the
# Responses API (/v1/responses), `claude -p` over the Messages API
# (/v1/messages). Both must exit 0, and
# every request they make to /v1/ must be answered below 400. The replies
# are noise: the weights are random (--stop-bias makes them end after a
# few tokens, as a real model's would).
#
# Run it by hand from the repository (it is not part of CI: it needs npm
# and a few minutes):
#
#   scripts/agents-e2e.sh
#
# Environment: CODEX_VERSION, CLAUDE_VERSION (the versions to install),
# K3_RELEASE_TOKENIZER (default: ../shared/fixtures/tokenizer-k3-release,
# or $K3_FIXTURES/tokenizer-k3-release), PORT (default 18080), KEEP=1 keeps
# the work directory (the server's log has every request body).
set -euo pipefail

CODEX_VERSION=${CODEX_VERSION:-0.169.0}
CLAUDE_VERSION=${CLAUDE_VERSION:-2.1.328}
PORT=${PORT:-18080}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
FIXTURES=${K3_FIXTURES:-$ROOT/../shared/fixtures}
TOKENIZER=${K3_RELEASE_TOKENIZER:-$FIXTURES/tokenizer-k3-release}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/k3-agents-e2e.XXXXXX")
KEY=k3-e2e-key
SERVER=

cleanup() {
	if [[ -n $SERVER ]]; then
		kill "$SERVER" 2>/dev/null || true
		wait "$SERVER" 2>/dev/null || true
	fi
	if [[ ${KEEP:-0} == 1 ]]; then
		echo "kept $WORK"
	else
		rm -rf "$WORK"
	fi
}
trap cleanup EXIT

step() { printf '\n== %s\n' "$*"; }
fail() {
	echo "FAIL: $*" >&2
	exit 1
}

[[ -f $TOKENIZER/tiktoken.model ]] || fail "no released tokenizer at $TOKENIZER (set K3_RELEASE_TOKENIZER)"
command -v npm >/dev/null || fail "npm is needed to install the agents"

step "installing @openai/codex@$CODEX_VERSION and @anthropic-ai/claude-code@$CLAUDE_VERSION"
npm install --silent --no-fund --no-audit --prefix "$WORK/npm" \
	"@openai/codex@$CODEX_VERSION" "@anthropic-ai/claude-code@$CLAUDE_VERSION" >"$WORK/npm.log" 2>&1 ||
	{ cat "$WORK/npm.log"; fail "npm install"; }
CODEX=$WORK/npm/node_modules/.bin/codex
CLAUDE=$WORK/npm/node_modules/.bin/claude
echo "codex: $("$CODEX" --version)"
echo "claude: $("$CLAUDE" --version)"

step "building k3"
(cd "$ROOT" && go build -o "$WORK/k3" ./cmd/k3)

# The agents' first prompts are 7,895 tokens (Codex's 39 KB) and 11,103
# (Claude Code's 48 KB, its tools deferred), in the release's vocabulary.
# Two layers (one MLA, one KDA) keep the prefill to a minute or two on a
# small machine; the 13-layer tiny profile's attention made a 20k-token
# prefill take over 10 minutes on a loaded 2-core machine.
step "writing a synthetic checkpoint (tiny widths, 2 layers, the released tokenizer)"
"$WORK/k3" synth --out "$WORK/ckpt" --profile custom --base tiny --layers 2 --vocab 163840 \
	--tokenizer "$TOKENIZER" --stop-bias 8

step "starting k3 serve on 127.0.0.1:$PORT"
"$WORK/k3" serve --model "$WORK/ckpt" --name k3 --addr "127.0.0.1:$PORT" --max-context 32768 --sessions 2 \
	--api-key "$KEY" --log-bodies --log-format json >"$WORK/serve.out" 2>"$WORK/serve.log" &
SERVER=$!
for _ in $(seq 120); do
	curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
	kill -0 "$SERVER" 2>/dev/null || { cat "$WORK/serve.log"; fail "k3 serve exited"; }
	sleep 0.5
done
curl -sf "http://127.0.0.1:$PORT/health" >/dev/null || fail "k3 serve is not ready"

# check_log NAME: every request to /v1/ since the mark was answered below
# 400, and there was at least one to PATH.
check_log() {
	local name=$1 path=$2 from=$3
	tail -n +"$from" "$WORK/serve.log" | python3 -c '
import json, sys
path = sys.argv[1]
seen, bad = 0, []
for line in sys.stdin:
    try:
        e = json.loads(line)
    except ValueError:
        continue
    if e.get("msg") != "request" or not e.get("path", "").startswith("/v1/"):
        continue
    print("  %s %s %s %.1fs" % (e["method"], e["path"], e["status"], e["duration"] / 1e9))
    seen += e["path"] == path
    if e["status"] >= 400:
        bad.append(e)
if not seen:
    sys.exit("no request to " + path)
if bad:
    sys.exit("refused: %s" % bad)
' "$path" || fail "$name: the server log shows a problem"
}

step "Codex CLI: codex exec, wire_api = \"responses\""
mkdir -p "$WORK/codex-home" "$WORK/project"
cat >"$WORK/codex-home/config.toml" <<EOF
model = "k3"
model_provider = "k3"

[model_providers.k3]
name = "k3 serve"
base_url = "http://127.0.0.1:$PORT/v1"
wire_api = "responses"
env_key = "K3_API_KEY"
EOF
mark=$(($(wc -l <"$WORK/serve.log") + 1))
start=$(date +%s)
(cd "$WORK/project" && CODEX_HOME="$WORK/codex-home" K3_API_KEY=$KEY timeout 900 \
	"$CODEX" exec --skip-git-repo-check "Say hi" </dev/null >"$WORK/codex.out" 2>&1) ||
	{ cat "$WORK/codex.out"; fail "codex exec exited $?"; }
echo "codex exec exited 0 in $(($(date +%s) - start)) s"
check_log codex /v1/responses "$mark"

step "Claude Code: claude -p, ANTHROPIC_BASE_URL"
mkdir -p "$WORK/claude-home"
mark=$(($(wc -l <"$WORK/serve.log") + 1))
start=$(date +%s)
# The environment of docs/AGENTS.md, in a fresh HOME.
(cd "$WORK/project" && HOME="$WORK/claude-home" ANTHROPIC_BASE_URL="http://127.0.0.1:$PORT" ANTHROPIC_API_KEY=$KEY \
	ANTHROPIC_MODEL=k3 ANTHROPIC_DEFAULT_HAIKU_MODEL=k3 CLAUDE_CODE_MAX_CONTEXT_TOKENS=32768 \
	CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 timeout 900 \
	"$CLAUDE" -p "Say hi" </dev/null >"$WORK/claude.out" 2>&1) ||
	{ cat "$WORK/claude.out"; fail "claude -p exited $?"; }
echo "claude -p exited 0 in $(($(date +%s) - start)) s"
check_log claude /v1/messages "$mark"

step "passed: Codex CLI $CODEX_VERSION and Claude Code $CLAUDE_VERSION against k3 serve"
