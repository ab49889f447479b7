-- POST a start of the stored definition "bench" (the job of post-job.lua, its graph and timeout
-- in the definition) to /v1/jobs: Benchmarks/definition-bench.sh.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"definition":"bench","name":"import-comments","input":{"post":123},"labels":{"team":"data","env":"bench"}}'
