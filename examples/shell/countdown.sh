#!/bin/sh
# A declared tool's target run as a command (docs/step-protocol.md): one process per step, the
# request on stdin, the answer on stdout. Counts down from `from`; with `confirm`, asks first.
# Needs jq.
set -eu
req=$(cat)
get() { printf '%s' "$req" | jq -c "$1"; }
from=$(get '.arguments.from')
left=$(get ".checkpoint.left // $from")
if [ "$(get '.arguments.confirm // false')" = true ]; then
  case $(get '.input.go.action // "none"') in
    '"none"')
      jq -nc --argjson left "$left" '{input: {checkpoint: {left: $left}, requests: {go: {
        method: "elicitation/create", params: {mode: "form", message: "Start the countdown?",
        requestedSchema: {type: "object", properties: {}}}}}}}'
      exit 0 ;;
    '"accept"') ;;
    *) jq -nc '{done: {content: [{type: "text", text: "Countdown not started."}]}}'; exit 0 ;;
  esac
fi
sleep "$(get '(.arguments.pace_ms // 0) / 1000')"
left=$((left - 1))
if [ "$left" -le 0 ]; then
  jq -nc --argjson n "$from" '{done: {content: [{type: "text", text: "Lift-off after \($n) steps"}]}}'
else
  jq -nc --argjson left "$left" --argjson n "$from" '{continue: {checkpoint: {left: $left},
    progress: {progress: ($n - $left), total: $n, message: "\($left) to go"}}}'
fi
