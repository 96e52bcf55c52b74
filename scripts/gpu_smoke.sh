#!/usr/bin/env bash
# The GPU path end to end, in minutes, as a user runs it (docs/gpu.md): the training worker daemon on
# ART's LocalBackend trains a small model a few GRPO steps, then, while it runs, `rlide eval` scores
# the run through the server it published and `rlide policy serve` answers an OpenAI request and
# records it; the worker is stopped with SIGTERM (it finishes its step). Prints one JSON object.
#
#   scripts/gpu_smoke.sh                                   # on a GPU box with .venv-gpu (rlide[gpu])
#   RLIDE=.venv/bin/rlide BACKEND=art-cpu BASE_MODEL=tiny-qwen2 SCENARIOS=toy scripts/gpu_smoke.sh
#                                                          # the same path on CPU (ART's protocol, stand-in)
#
# Settings (environment): RLIDE (the rlide command), BACKEND (local), BASE_MODEL
# (Qwen/Qwen2.5-0.5B-Instruct), SCENARIOS (humaneval), STEPS (3), EVAL_TASKS (10), EVAL_MAX_TOKENS (256), PORT (8797),
# TIMEOUT_S (540: the whole run), RLIDE_HOME (a fresh folder, kept for its logs).
set -euo pipefail

RLIDE=${RLIDE:-.venv-gpu/bin/rlide}
BACKEND=${BACKEND:-local}
BASE_MODEL=${BASE_MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
SCENARIOS=${SCENARIOS:-humaneval}
STEPS=${STEPS:-3}
EVAL_TASKS=${EVAL_TASKS:-10}
EVAL_MAX_TOKENS=${EVAL_MAX_TOKENS:-256}
PORT=${PORT:-8797}
TIMEOUT_S=${TIMEOUT_S:-540}
export RLIDE_HOME=${RLIDE_HOME:-$(mktemp -d -t rlide-gpu-smoke-XXXXXX)}
export RLIDE_TRAINING_BACKEND=$BACKEND
RUN=smoke-$(date +%s)
started=$(date +%s)
worker=""
server=""

say() { echo "gpu_smoke: $*" >&2; }
elapsed() { echo $(($(date +%s) - started)); }
stop() {
  [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null || true
  [ -n "$worker" ] && kill -TERM "$worker" 2>/dev/null && wait "$worker" 2>/dev/null || true
}
trap stop EXIT

# What `local` lacks here, said by the check `rlide train` itself runs, before anything starts.
"$RLIDE" doctor --json > "$RLIDE_HOME/doctor.json" || true
python3 - "$RLIDE_HOME/doctor.json" "$BACKEND" <<'EOF'
import json, sys
checks = json.load(open(sys.argv[1]))["checks"]
[line] = [c for c in checks if c["area"] == "training" and c["name"] == sys.argv[2]]
if not line["ok"]:
    print(json.dumps({"ok": False, "backend": sys.argv[2], "missing": line["detail"]}))
    sys.exit(3)
EOF

say "run $RUN: $BACKEND, $BASE_MODEL, $SCENARIOS; logs in $RLIDE_HOME"
"$RLIDE" train --daemon --run "$RUN" --base-model "$BASE_MODEL" --scenarios "$SCENARIOS" \
  --groups-per-step 2 --group-size 4 > "$RLIDE_HOME/worker.json" 2> "$RLIDE_HOME/worker.log" &
worker=$!

step=0
while [ "$step" -lt "$STEPS" ]; do
  if ! kill -0 "$worker" 2>/dev/null; then
    say "the worker stopped at step $step: $(tail -c 2000 "$RLIDE_HOME/worker.log")"
    worker=""
    exit 4
  fi
  if [ "$(elapsed)" -gt "$TIMEOUT_S" ]; then
    say "no step $STEPS within ${TIMEOUT_S}s (at step $step)"
    exit 5
  fi
  sleep 2
  step=$("$RLIDE" train status --run "$RUN" --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["step"])' 2>/dev/null || echo 0)
done
trained_s=$(elapsed)

"$RLIDE" eval --run "$RUN" --limit "$EVAL_TASKS" --max-tokens "$EVAL_MAX_TOKENS" > "$RLIDE_HOME/eval.json"

"$RLIDE" policy serve --run "$RUN" --port "$PORT" 2> "$RLIDE_HOME/serve.log" &
server=$!
for _ in $(seq 120); do
  curl -sf "http://127.0.0.1:$PORT/v1/models" > "$RLIDE_HOME/models.json" 2>/dev/null && break
  sleep 1
done
episode=$(curl -sf -X POST "http://127.0.0.1:$PORT/episodes" -H 'content-type: application/json' \
  -d '{"task": "Write a Python function that adds two numbers.", "client": "gpu_smoke"}')
base=$(echo "$episode" | python3 -c 'import json,sys; print(json.load(sys.stdin)["base_url"])')
curl -sf "$base/chat/completions" -H 'content-type: application/json' -d '{"model": "student",
  "messages": [{"role": "user", "content": "Write a Python function that adds two numbers."}],
  "max_tokens": 64, "logprobs": true}' > "$RLIDE_HOME/answer.json"
"$RLIDE" episodes show "$(echo "$episode" | python3 -c 'import json,sys; print(json.load(sys.stdin)["episode_id"])')" \
  --json > "$RLIDE_HOME/episode.json"
stop
worker=""
server=""
"$RLIDE" train status --run "$RUN" --json > "$RLIDE_HOME/status.json"

python3 - "$RLIDE_HOME" "$RUN" "$BACKEND" "$BASE_MODEL" "$trained_s" "$(elapsed)" <<'EOF'
import json, sys
from pathlib import Path

home, run, backend, base_model, trained_s, total_s = sys.argv[1:]
read = lambda name: json.loads((Path(home) / name).read_text())
status, evaluated, answer, episode = read("status.json"), read("eval.json"), read("answer.json"), read("episode.json")
[turn] = episode["policy_turns"]
print(json.dumps({
    "ok": True,
    "backend": backend,
    "base_model": base_model,
    "run": run,
    "steps": status["step"],
    "rewards": [point["reward_mean"] for point in status["recent"]],
    "seconds_to_steps": int(trained_s),
    "seconds": int(total_s),
    "eval": {k: evaluated[k] for k in ("tasks", "n", "passed", "pass_at_1", "checkpoint_step")},
    "endpoint": {"models": [m["id"] for m in read("models.json")["data"]], "answer_model": answer["model"],
                 "recorded_turn_model": turn["model"], "recorded_prompt_tokens": turn["prompt_tokens"],
                 "completion_tokens": answer["usage"]["completion_tokens"]},
    "home": home,
}))
EOF
