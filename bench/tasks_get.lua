-- wrk script for bench/run.sh and bench/hotpath.sh: POST tasks/get for one task (BENCH_TASK_ID)
-- over MCP 2026-07-28. A response counts as good only if it is HTTP 200 with a completed task and
-- no JSON-RPC error (bench/wrk_report.lua).
local task_id = os.getenv("BENCH_TASK_ID")
if task_id == nil or task_id == "" then
  error("BENCH_TASK_ID is not set")
end

wrk.method = "POST"
wrk.path = os.getenv("BENCH_PATH") or "/mcp"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["MCP-Protocol-Version"] = "2026-07-28"
wrk.headers["Mcp-Method"] = "tasks/get"
wrk.headers["Mcp-Name"] = task_id
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"' .. task_id ..
  '","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",' ..
  '"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}}}'

-- The answer a good response holds; the reporting is bench/wrk_report.lua's, next to this file.
expect = '"status":"completed"'
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "wrk_report.lua")
