#!/bin/sh
# Example process agent: reads the prompt on stdin and prints one JSON value,
# which becomes the task's result (docs/tasks.md, Process agents: plain mode).
prompt=$(cat)
# Escape backslashes and double quotes, and fold newlines, so the prompt fits in a JSON string.
escaped=$(printf '%s' "$prompt" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' | tr '\n\t\r' '   ')
printf '{"echo": "%s", "task": "%s"}\n' "$escaped" "${SWARM_TASK_ID:-}"
