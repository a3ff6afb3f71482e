#!/bin/sh
# Example NDJSON agent: every stdout line is one OutputEvent (docs/protocol.md, Output events).
prompt=$(cat)
printf '{"type":"progress","stage":"start","note":"received %s bytes"}\n' "$(printf '%s' "$prompt" | wc -c | tr -d ' ')"
printf '{"type":"partial","chunk":{"kind":"inline","value":"working"}}\n'
printf '{"type":"final","content":{"kind":"inline","value":"done"},"ok":true}\n'
