-- Instance ID batchAdd, 1000 tokens per request: the tokens in groups of 1000, each request a group and a
-- new topic, so every request subscribes 1000 tokens (one event each) in both directions.
package.path = debug.getinfo(1, "S").source:match("@(.*/)") .. "?.lua;" .. package.path
local common = require("common")
local tokens = common.tokens()
local groups = {}
for start = 1, #tokens - 999, 1000 do
  local quoted = {}
  for index = start, start + 999 do quoted[#quoted + 1] = '"' .. tokens[index] .. '"' end
  groups[#groups + 1] = table.concat(quoted, ",")
end
assert(#groups > 0, "batchadd.lua needs at least 1000 tokens")
local counter = 0

request = function()
  local group = (counter % #groups) + 1
  local topic = "batch-" .. math.floor(counter / #groups)
  counter = counter + 1
  return wrk.format("POST", "/iid/v1:batchAdd", common.admin,
    '{"to":"/topics/' .. topic .. '","registration_tokens":[' .. groups[group] .. ']}')
end
