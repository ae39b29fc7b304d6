-- FCM v1 topic send to the batchadd topics (which have subscribers): each send also gets its audience
-- recorded.
package.path = debug.getinfo(1, "S").source:match("@(.*/)") .. "?.lua;" .. package.path
local common = require("common")
local counter = 0

request = function()
  local topic = "batch-" .. (counter % 20)
  counter = counter + 1
  return wrk.format("POST", "/v1/projects/demo-project/messages:send", common.admin,
    '{"message":{"topic":"' .. topic .. '","data":{"k":"v"}}}')
end
