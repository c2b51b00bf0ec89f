-- What bench/tasks_get.lua and bench/tasks_create.lua share (each loads it with dofile, then
-- sets its own Mcp-Method, Mcp-Name, body and `expect`): a 2026-07-28 POST to BENCH_PATH
-- (/mcp), and the reporting — a response counts as good only if it is HTTP 200, holds the
-- script's `expect` string and no JSON-RPC error; done() prints one line "WRK_JSON {...}" with
-- throughput, latency percentiles and error counts.
wrk.method = "POST"
wrk.path = os.getenv("BENCH_PATH") or "/mcp"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["MCP-Protocol-Version"] = "2026-07-28"

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
  if status == 200 and body:find(expect, 1, true)
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
