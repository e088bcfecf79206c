#!/usr/bin/env bash
# scaling-e2e.sh: docs/nginx/k3.conf routes each conversation to one k3 serve
# replica, end to end (docs/SCALING.md, "Route by conversation").
#
# Builds k3, writes a tiny synthetic checkpoint, starts four `k3 serve`
# replicas on it and nginx in front of three of them with
# docs/nginx/k3.conf (only its upstream servers, listen port and access_log
# path changed; `nginx -t` checks it first), and a second nginx in front of
# all four. Then it plays conversations of three turns in the
# shapes the agents send them (Codex CLI: /v1/responses with a session-id
# header; Claude Code: /v1/messages with X-Claude-Code-Session-Id; any
# client: /v1/chat/completions with X-K3-Cache-Key) and checks:
#   - every turn of a conversation reaches the same replica (nginx's
#     X-K3-Upstream header, and the cache_key in each replica's own access
#     log), and conversations spread over all three replicas;
#   - turns 2 and 3 restore their prefix from that replica's prefix cache
#     (usage's cached_tokens > 0);
#   - requests without a key spread over more than one replica;
#   - with a fourth replica added to the upstream (a second nginx), only
#     the conversations the new replica takes move, all to it;
#   - after one replica is killed (SIGKILL), every conversation still gets
#     answers, those of the other replicas stay where they were, and a
#     moved conversation prefills cold once and then hits again.
#
# It installs nothing: nginx must be on PATH (CI installs it with apt; see
# .ci/run). Run it from anywhere:
#
#   scripts/scaling-e2e.sh
#
# Which replica a key hashes to depends only on the key and the replicas'
# addresses, so with the default PORT the run is the same every time (the
# spread checks, which a few of all port choices would fail, pass there).
#
# Environment: PORT (default 18180: nginx on PORT and PORT+10, replicas on
# PORT+1..4),
# NGINX (default: nginx on PATH), KEEP=1 keeps the work directory.
set -euo pipefail

PORT=${PORT:-18180}
NGINX=${NGINX:-$(PATH="$PATH:/usr/sbin" command -v nginx || true)}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/k3-scaling-e2e.XXXXXX")
PIDS=()
NGINX_PIDS=()

cleanup() {
	for p in "${NGINX_PIDS[@]}" "${PIDS[@]}"; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	if [[ ${KEEP:-0} == 1 ]]; then
		echo "kept $WORK"
	else
		rm -rf "$WORK"
	fi
}
trap cleanup EXIT

step() { printf '== %s\n' "$*"; }
fail() {
	echo "FAIL: $*" >&2
	exit 1
}

[[ -n $NGINX && -x $NGINX ]] || fail "nginx is not installed (apt-get install nginx), or set NGINX"
command -v python3 >/dev/null || fail "python3 is needed"
command -v curl >/dev/null || fail "curl is needed"

step "building k3; writing a synthetic checkpoint (quickstart profile, 3.8 MiB)"
(cd "$ROOT" && go build -o "$WORK/k3" ./cmd/k3)
"$WORK/k3" synth --out "$WORK/ckpt" --profile quickstart >/dev/null

step "starting four k3 serve replicas on 127.0.0.1:$((PORT + 1))-$((PORT + 4))"
for i in 1 2 3 4; do
	# Each replica has its own prefix cache (RAM, and a disk tier in the
	# work directory); 16-token blocks suit the short test prompts.
	"$WORK/k3" serve --model "$WORK/ckpt" --name k3 --addr "127.0.0.1:$((PORT + i))" --sessions 2 \
		--log-format json --prefix-cache-dir "$WORK/prefix-$i" --prefix-cache-block 16 \
		>"$WORK/replica-$i.out" 2>"$WORK/replica-$i.log" &
	PIDS+=($!)
done

# site NAME LISTEN REPLICAS: writes $WORK/NAME.conf, docs/nginx/k3.conf with
# only what is local to this test changed, and checked to be just that:
# the three upstream server lines (pointed at replicas 1-3, and with
# REPLICAS=4 a fourth line added after them), the listen line and the
# access_log path; and $WORK/NAME-main.conf, a main nginx.conf that
# includes it.
site() {
	python3 - "$ROOT/docs/nginx/k3.conf" "$WORK/$1.conf" "$PORT" "$2" "$3" "$WORK/$1-access.log" <<'EOF' || fail "rewriting docs/nginx/k3.conf"
import re, sys
src, dst, port, listen, n, log = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
lines = open(src).read().split("\n")
servers, listens, logs = 0, 0, 0
out = []
for l in lines:
    m = re.match(r"^(\s*)server \S+:\d+ (.*;)$", l)
    if m:
        servers += 1
        out.append("%sserver 127.0.0.1:%d %s" % (m.group(1), port + servers, m.group(2)))
        if servers == 3 and n == 4:
            out.append("%sserver 127.0.0.1:%d %s" % (m.group(1), port + 4, m.group(2)))
        continue
    m = re.match(r"^(\s*)listen \d+;$", l)
    if m:
        listens += 1
        out.append("%slisten 127.0.0.1:%d;" % (m.group(1), listen))
        continue
    m = re.match(r"^(\s*)access_log \S+ (k3_route;)$", l)
    if m:
        logs += 1
        out.append("%saccess_log %s %s" % (m.group(1), log, m.group(2)))
        continue
    out.append(l)
if (servers, listens, logs) != (3, 1, 1):
    sys.exit("docs/nginx/k3.conf: want 3 upstream servers, 1 listen, 1 access_log line; found %d, %d, %d" % (servers, listens, logs))
open(dst, "w").write("\n".join(out))
EOF
	local user=
	[[ $(id -u) == 0 ]] && user="user root;"
	mkdir -p "$WORK/$1-tmp"
	cat >"$WORK/$1-main.conf" <<EOF
$user
worker_processes 1;
daemon off;
pid $WORK/$1.pid;
error_log $WORK/$1-error.log;
events {
    worker_connections 256;
}
http {
    client_body_temp_path $WORK/$1-tmp/body;
    proxy_temp_path $WORK/$1-tmp/proxy;
    fastcgi_temp_path $WORK/$1-tmp/fastcgi;
    uwsgi_temp_path $WORK/$1-tmp/uwsgi;
    scgi_temp_path $WORK/$1-tmp/scgi;
    include $WORK/$1.conf;
}
EOF
	"$NGINX" -t -p "$WORK" -e "$WORK/$1-error.log" -c "$WORK/$1-main.conf" 2>&1 || fail "nginx -t refused docs/nginx/k3.conf ($1)"
}

# ready URL PID WHAT: waits until URL answers 200, while PID runs.
ready() {
	for _ in $(seq 120); do
		curl -sf "$1" >/dev/null && return
		kill -0 "$2" 2>/dev/null || fail "$3 exited"
		sleep 0.5
	done
	curl -sf "$1" >/dev/null || fail "$3 is not ready"
}

step "nginx -t on docs/nginx/k3.conf: as it is routed (replicas 1-3), and scaled out (replicas 1-4)"
site nginx "$PORT" 3
site scaled "$((PORT + 10))" 4

for i in 1 2 3 4; do
	ready "http://127.0.0.1:$((PORT + i))/health" "${PIDS[i - 1]}" "replica $i (log: $WORK/replica-$i.log)"
done

step "starting nginx on 127.0.0.1:$PORT (replicas 1-3) and 127.0.0.1:$((PORT + 10)) (replicas 1-4)"
"$NGINX" -p "$WORK" -e "$WORK/nginx-error.log" -c "$WORK/nginx-main.conf" &
NGINX_PIDS+=($!)
"$NGINX" -p "$WORK" -e "$WORK/scaled-error.log" -c "$WORK/scaled-main.conf" &
NGINX_PIDS+=($!)
ready "http://127.0.0.1:$PORT/health" "${NGINX_PIDS[0]}" "nginx"
ready "http://127.0.0.1:$((PORT + 10))/health" "${NGINX_PIDS[1]}" "nginx (scaled out)"

step "conversations through nginx (replica 3 is SIGKILLed halfway: bash reports it as Killed)"
python3 - "$PORT" "$WORK" "${PIDS[2]}" <<'EOF' || { [[ ${KEEP:-0} == 1 ]] || tail -n 20 "$WORK/nginx-error.log"; fail "routing"; }
import json, os, signal, socket, sys, time, urllib.request

port, work, victim_pid = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
base = "http://127.0.0.1:%d" % port
replicas = ["127.0.0.1:%d" % (port + i) for i in (1, 2, 3)]
HEADER = "You are a careful coding agent. Follow the repository's conventions and explain each change. " * 4

def answered(resp):
    """The replica that answered: the last of $upstream_addr, which lists
    every replica nginx tried ("A, B" when A refused the connection)."""
    return resp.headers.get("X-K3-Upstream", "").split(",")[-1].strip()

def send(path, body, headers):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                 headers=dict(headers, **{"Content-Type": "application/json"}))
    with urllib.request.urlopen(req, timeout=120) as resp:
        out = json.loads(resp.read())
        upstream = answered(resp)
    u = out["usage"]
    if path == "/v1/chat/completions":
        return upstream, u["prompt_tokens_details"]["cached_tokens"], u["prompt_tokens"]
    if path == "/v1/responses":
        return upstream, u["input_tokens_details"]["cached_tokens"], u["input_tokens"]
    return upstream, u["cache_read_input_tokens"], u["input_tokens"] + u["cache_read_input_tokens"]

def turn(kind, key, n):
    """Turn n (1-based) of conversation key, as the client kind sends it."""
    said = ["Step %d of the task for %s: fix the failing test." % (i, key) for i in range(1, n + 1)]
    if kind == "codex":
        items = [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": HEADER}]}]
        for i, s in enumerate(said):
            items.append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": s}]})
            if i < n - 1:
                items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]})
        body = {"model": "k3", "input": items, "store": False, "max_output_tokens": 1,
                "reasoning": {"effort": "none"}, "prompt_cache_key": key}
        return send("/v1/responses", body, {"session-id": key})
    msgs = []
    for i, s in enumerate(said):
        msgs.append({"role": "user", "content": s})
        if i < n - 1:
            msgs.append({"role": "assistant", "content": "Done."})
    if kind == "claude":
        body = {"model": "k3", "max_tokens": 1, "system": HEADER, "messages": msgs}
        return send("/v1/messages", body, {"X-Claude-Code-Session-Id": key, "anthropic-version": "2023-06-01"})
    body = {"model": "k3", "max_tokens": 1, "thinking": {"type": "disabled"}, "prompt_cache_key": key,
            "messages": [{"role": "system", "content": HEADER}] + msgs}
    return send("/v1/chat/completions", body, {"X-K3-Cache-Key": key})

kinds = ["codex", "claude", "chat"]
convs = [(kinds[i % 3], "conv-%02d" % i) for i in range(18)]
home, errors, prompt3, last = {}, [], {}, {}
for n in (1, 2, 3):
    for kind, key in convs:
        up, cached, prompt = turn(kind, key, n)
        if up not in replicas:
            errors.append("%s turn %d: X-K3-Upstream %r" % (key, n, up))
        if home.setdefault(key, up) != up:
            errors.append("%s turn %d went to %s, turn 1 to %s" % (key, n, up, home[key]))
        if n == 3:
            prompt3[key] = prompt
        # The turn before was on this replica: its whole prompt is restored.
        if n > 1 and cached < last[key]:
            errors.append("%s (%s) turn %d: %d tokens restored, fewer than turn %d's prompt of %d" % (key, kind, n, cached, n - 1, last[key]))
        last[key] = prompt
per = {r: sorted(k for k in home if home[k] == r) for r in replicas}
for r in replicas:
    print("  %s: %d conversations %s" % (r, len(per[r]), " ".join(per[r])))
if any(not v for v in per.values()):
    errors.append("a replica got no conversation: %s" % per)

# Each replica's own access log: the keys it served are the ones nginx
# says it sent it, three turns each.
for i, r in enumerate(replicas, 1):
    seen = {}
    for line in open(os.path.join(work, "replica-%d.log" % i)):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("msg") == "request" and e.get("cache_key"):
            seen[e["cache_key"]] = seen.get(e["cache_key"], 0) + 1
    if seen != {k: 3 for k in per[r]}:
        errors.append("replica %d's access log has keys %s, want %s three times each" % (i, seen, per[r]))

# Requests without a key spread.
spread = set()
for j in range(12):
    req = urllib.request.Request(base + "/v1/chat/completions", method="POST", headers={"Content-Type": "application/json"},
                                 data=json.dumps({"model": "k3", "max_tokens": 1, "messages": [{"role": "user", "content": "one-off %d" % j}]}).encode())
    with urllib.request.urlopen(req, timeout=120) as resp:
        spread.add(answered(resp))
print("  12 requests without a key went to %d replicas" % len(spread))
if len(spread) < 2:
    errors.append("requests without a key all went to %s" % spread)

# Scale out: the same keys through the nginx whose upstream lists a fourth
# replica. Consistent hashing moves only the keys the new replica takes
# (about a quarter); hashing modulo the number of replicas would move
# about three quarters, to every replica.
fourth = "127.0.0.1:%d" % (port + 4)
taken = []
for kind, key in convs:
    req = urllib.request.Request("http://127.0.0.1:%d/v1/chat/completions" % (port + 10), method="POST",
                                 headers={"Content-Type": "application/json", "X-K3-Cache-Key": key},
                                 data=json.dumps({"model": "k3", "max_tokens": 1, "messages": [{"role": "user", "content": "probe"}]}).encode())
    with urllib.request.urlopen(req, timeout=120) as resp:
        up = answered(resp)
    if up == fourth:
        taken.append(key)
    elif up != home[key]:
        errors.append("scaled out: %s went to %s, not to its replica %s nor the new one" % (key, up, home[key]))
print("  a fourth replica added: it took %d of %d conversations (%s); the others stayed" % (len(taken), len(convs), " ".join(taken)))
if not taken or len(taken) > len(convs) // 2:
    errors.append("scaled out: the new replica took %d of %d conversations" % (len(taken), len(convs)))

# Lose replica 3: SIGKILL, and wait until its port refuses connections.
lost = replicas[2]
os.kill(victim_pid, signal.SIGKILL)
for _ in range(600):
    try:
        socket.create_connection(("127.0.0.1", port + 3), timeout=1).close()
    except OSError:
        break
    time.sleep(0.05)
else:
    errors.append("replica 3 still accepts connections after SIGKILL")
moved, stayed, t4 = [], [], {}
for n in (4, 5):
    for kind, key in convs:
        up, cached, prompt = turn(kind, key, n)
        if up == lost or up not in replicas:
            errors.append("%s turn %d after the loss: X-K3-Upstream %r" % (key, n, up))
            continue
        if home[key] != lost:
            if up != home[key]:
                errors.append("%s moved from %s to %s, though its replica is up" % (key, home[key], up))
            if n == 4:
                stayed.append(key)
                if cached < prompt3[key]:
                    errors.append("%s turn 4: %d tokens restored on its own replica, fewer than turn 3's prompt of %d" % (key, cached, prompt3[key]))
        elif n == 4:
            moved.append(key)
            t4[key] = (up, cached, prompt)
            # Cold on its new replica but for what it shares with the
            # conversations that replica served (the system header).
            if cached >= prompt3[key]:
                errors.append("%s turn 4 on %s restored %d tokens, as much as its turn 3 prompt (%d): it was never there" % (key, up, cached, prompt3[key]))
        elif up != t4[key][0]:
            errors.append("%s turn 5 went to %s, turn 4 to %s" % (key, up, t4[key][0]))
        elif cached < t4[key][2]:
            errors.append("%s turn 5 on its new replica restored %d tokens, fewer than turn 4's prompt of %d" % (key, cached, t4[key][2]))
print("  replica %s killed: %d conversations moved (all of its own), %d stayed where they were" % (lost, len(moved), len(stayed)))
for key in moved:
    print("    %s: turn 4 on %s restored %d of %d prompt tokens (the shared header), turn 5 all of turn 4's" % (key, t4[key][0], t4[key][1], t4[key][2]))
if sorted(moved) != per[lost] or len(moved) + len(stayed) != len(convs):
    errors.append("moved %s, stayed %s; want moved %s" % (moved, stayed, per[lost]))
if errors:
    print("\n".join("  " + e for e in errors), file=sys.stderr)
    sys.exit(1)
EOF

step "passed: docs/nginx/k3.conf keeps each conversation on one replica"
