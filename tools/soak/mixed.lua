-- wrk script for the soak: per-token subscribe and unsubscribe (admin, v1) and topic sends, in turn.
local tokens = {}
for line in io.lines(os.getenv("SOAK_TOKENS")) do tokens[#tokens + 1] = line end
local counter = 0

request = function()
    counter = counter + 1
    -- The token moves with counter // 10 and the topic also with each pass over the tokens, so every
    -- (token, topic) pair gets subscribes and unsubscribes over time. (Taking both from counter alone gave
    -- each pair one fixed operation: all but its first subscribe answered 409, no unsubscribe changed anything.)
    local step = math.floor(counter / 10)
    local token = tokens[(step % #tokens) + 1]
    local topic = "churn-" .. ((counter % 10 + 3 * math.floor(step / #tokens)) % 50)
    local headers = { ["Authorization"] = "Bearer owner", ["Content-Type"] = "application/json" }
    local kind = counter % 10
    if kind < 4 then
        return wrk.format("POST", "/v1/projects/demo-project/registrations/" .. token ..
            "/topicSubscriptions?topicName=" .. topic, headers, "{}")
    elseif kind < 8 then
        return wrk.format("DELETE", "/v1/projects/demo-project/registrations/" .. token ..
            "/topicSubscriptions/" .. topic .. "?allowMissing=true", headers, nil)
    else
        return wrk.format("POST", "/v1/projects/demo-project/messages:send", headers,
            '{"message":{"topic":"soak","data":{"n":"' .. counter .. '"}}}')
    end
end
