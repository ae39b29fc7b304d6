-- Device registration: POST …/registrations with the client key of IntegrationTests/cluster's project `shop`. Every request
-- appends one event (a new registration), so every answer is a durable append.
request = function()
  return wrk.format("POST", "/v1/projects/shop/registrations",
    { ["x-goog-api-key"] = "cluster-client-secret", ["Content-Type"] = "application/json" }, "{}")
end

done = function(summary, latency, requests)
  io.write(string.format("BENCH %d %d %d %d %d\n", summary.requests, summary.duration,
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write
      + summary.errors.timeout,
    latency:percentile(50), latency:percentile(99)))
end
