-- wrk script for bench/run.sh and bench/hotpath.sh: POST tasks/get for one task (BENCH_TASK_ID)
-- over MCP 2026-07-28. A response counts as good only if it is HTTP 200 with a completed task and
-- no JSON-RPC error (bench/wrk_common.lua).
local task_id = os.getenv("BENCH_TASK_ID")
if task_id == nil or task_id == "" then
  error("BENCH_TASK_ID is not set")
end

dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "wrk_common.lua")
wrk.headers["Mcp-Method"] = "tasks/get"
wrk.headers["Mcp-Name"] = task_id
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"' .. task_id ..
  '","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",' ..
  '"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}}}'
-- The answer a good response holds.
expect = '"status":"completed"'
