-- Topic sends to audiences that keep changing: over the batchadd topics, each send follows a change of its
-- topic's membership (one token removed or added back by a one-token batchRemove or batchAdd), so a send's
-- audience almost never equals the last one of its topic (64 connections may reorder a change and the send
-- after it) and its recipient digest is hashed from the tokens. Half the requests are sends, half changes.
package.path = debug.getinfo(1, "S").source:match("@(.*/)") .. "?.lua;" .. package.path
local common = require("common")
local tokens = common.tokens()
local counter = 0

request = function()
  local step = counter % 4
  local cycle = math.floor(counter / 4)
  counter = counter + 1
  local topic = "batch-" .. (cycle % 20)
  if step == 1 or step == 3 then
    return wrk.format("POST", "/v1/projects/demo-project/messages:send", common.admin,
      '{"message":{"topic":"' .. topic .. '","data":{"k":"v"}}}')
  end
  local verb = step == 0 and "batchRemove" or "batchAdd"
  local token = tokens[(cycle % #tokens) + 1]
  return wrk.format("POST", "/iid/v1:" .. verb, common.admin,
    '{"to":"/topics/' .. topic .. '","registration_tokens":["' .. token .. '"]}')
end
