-- POSTs the job in $JOB_BODY to /v1/jobs; each of the $THREADS threads stops after its share of
-- $COUNT answers (wrk itself runs until told to stop: delayed-bench.sh sends SIGINT).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = os.getenv("JOB_BODY")

local share = math.ceil(tonumber(os.getenv("COUNT") or "1000") / tonumber(os.getenv("THREADS") or "2"))
local answered = 0

function response(status, headers, body)
  answered = answered + 1
  if answered >= share then wrk.thread:stop() end
end
