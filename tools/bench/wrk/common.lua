-- Shared by the wrk scripts of tools/bench (HTTPWorkload): the registered tokens, one per line, from the file
-- named by the environment variable LEDGER_BENCH_TOKENS; and a check that every answer is a 200 (wrk counts
-- non-2xx answers itself; this also fails the run on a 2xx other than 200).
local common = {}

function common.tokens()
  local path = os.getenv("LEDGER_BENCH_TOKENS")
  assert(path, "set LEDGER_BENCH_TOKENS to the file of registered tokens")
  local tokens = {}
  for line in io.lines(path) do
    if #line > 0 then tokens[#tokens + 1] = line end
  end
  assert(#tokens > 0, "no tokens in " .. path)
  return tokens
end

common.admin = { ["Authorization"] = "Bearer owner", ["Content-Type"] = "application/json" }

return common
