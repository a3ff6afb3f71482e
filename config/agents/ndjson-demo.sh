#!/bin/sh
# Example NDJSON agent: every stdout line is one OutputEvent (SPEC §7.1, §8.5).
prompt=$(cat)
printf '{"type":"progress","stage":"start","note":"received %s bytes"}\n' "$(printf '%s' "$prompt" | wc -c | tr -d ' ')"
printf '{"type":"partial","chunk":{"kind":"inline","value":"working"}}\n'
printf '{"type":"final","content":{"kind":"inline","value":"done"},"ok":true}\n'
