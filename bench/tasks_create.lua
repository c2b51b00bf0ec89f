-- wrk script for bench/hotpath.sh: POST tools/call creating one `wait` task of 0 seconds (it
-- completes at once) over MCP 2026-07-28, with the tasks extension: every request creates a task.
-- A response counts as good only if it is HTTP 200 with a task handle (`"resultType":"task"`) and
-- no JSON-RPC error (bench/wrk_common.lua).
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "wrk_common.lua")
wrk.headers["Mcp-Method"] = "tools/call"
wrk.headers["Mcp-Name"] = "wait"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"wait",' ..
  '"arguments":{"seconds":0},' ..
  '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",' ..
  '"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}}}'
-- The answer a good response holds.
expect = '"resultType":"task"'
