-- POST a one-task job and hold the response until it ends (?waitMs): submit-and-wait latency.
wrk.method = "POST"
wrk.path = "/v1/jobs?waitMs=5000"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"name":"import-comments","input":{"post":123},"graph":{"type":"task","id":"fetch","action":"value","params":{"value":42}},"labels":{"team":"data","env":"bench"},"timeoutMs":600000}'
