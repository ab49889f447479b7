-- POST a one-task job (~300 bytes) to /v1/jobs (or the bare server).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"name":"import-comments","input":{"post":123},"graph":{"type":"task","id":"fetch","action":"value","params":{"value":42}},"labels":{"team":"data","env":"bench"},"timeoutMs":600000}'
