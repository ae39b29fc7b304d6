-- FCM v1 per-token subscribe: POST …/registrations/{token}/topicSubscriptions?topicName=T, admin key. Every
-- request is a new (token, topic) pair, so every one appends an event (a repeated pair would be a 409).
package.path = debug.getinfo(1, "S").source:match("@(.*/)") .. "?.lua;" .. package.path
local common = require("common")
local tokens = common.tokens()
local counter = 0

request = function()
  local token = tokens[(counter % #tokens) + 1]
  local topic = "single-" .. math.floor(counter / #tokens)
  counter = counter + 1
  return wrk.format("POST", "/v1/projects/demo-project/registrations/" .. token ..
    "/topicSubscriptions?topicName=" .. topic, common.admin, "{}")
end
