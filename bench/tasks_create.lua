-- wrk script for bench/hotpath.sh: POST tools/call creating one `wait` task of 0 seconds (it
-- completes at once) over MCP 2026-07-28, with the tasks extension: every request creates a task.
-- A response counts as good only if it is HTTP 200 with a task handle (`"resultType":"task"`) and
-- no JSON-RPC error; done() prints one line "WRK_JSON {...}" as bench/tasks_get.lua does.
wrk.method = "POST"
wrk.path = os.getenv("BENCH_PATH") or "/mcp"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["MCP-Protocol-Version"] = "2026-07-28"
wrk.headers["Mcp-Method"] = "tools/call"
wrk.headers["Mcp-Name"] = "wait"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"wait",' ..
  '"arguments":{"seconds":0},' ..
  '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",' ..
  '"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}}}'

local threads = {}
function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  good = 0
  bad = 0
  bad_sample = ""
end

function response(status, headers, body)
  if status == 200 and body:find('"resultType":"task"', 1, true)
      and not body:find('"error":', 1, true) then
    good = good + 1
  else
    bad = bad + 1
    if bad_sample == "" then
      bad_sample = tostring(status) .. " " .. string.sub(body or "", 1, 200)
    end
  end
end

function done(summary, latency, requests)
  local good_total, bad_total, sample = 0, 0, ""
  for _, t in ipairs(threads) do
    good_total = good_total + t:get("good")
    bad_total = bad_total + t:get("bad")
    local s = t:get("bad_sample")
    if sample == "" and s ~= nil then sample = s end
  end
  sample = sample:gsub('[%c"\\]', ' ')
  local e = summary.errors
  local secs = summary.duration / 1e6
  io.write(string.format(
    'WRK_JSON {"requests":%d,"duration_s":%.3f,"rps":%.1f,"mean_ms":%.3f,"p50_ms":%.3f,' ..
    '"p90_ms":%.3f,"p99_ms":%.3f,"max_ms":%.3f,"good":%d,"bad":%d,"err_connect":%d,' ..
    '"err_read":%d,"err_write":%d,"err_status":%d,"err_timeout":%d,"bad_sample":"%s"}\n',
    summary.requests, secs, summary.requests / secs, latency.mean / 1000,
    latency:percentile(50) / 1000, latency:percentile(90) / 1000,
    latency:percentile(99) / 1000, latency.max / 1000, good_total, bad_total,
    e.connect, e.read, e.write, e.status, e.timeout, sample))
end
