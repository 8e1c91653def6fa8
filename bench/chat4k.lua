-- wrk script: POST a ~4 KiB chat completion body; prints a JSON summary line at the end.
local filler = string.rep("The quick brown fox jumps over the lazy dog. ", 86)
wrk.method = "POST"
wrk.path = "/v1/chat/completions"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"bench-model","messages":[{"role":"system","content":"You are a helpful assistant."},' ..
           '{"role":"user","content":"' .. filler .. '"}],"max_tokens":16}'

done = function(summary, latency, requests)
  local secs = summary.duration / 1e6
  io.write(string.format('{"rps":%.1f,"p50_us":%d,"p90_us":%d,"p99_us":%d,"errors":%d,"requests":%d,"body_bytes":%d}\n',
    summary.requests / secs, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.status + summary.errors.timeout,
    summary.requests, #wrk.body))
end
