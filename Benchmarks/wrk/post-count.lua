-- POSTs the job in $JOB_BODY to /v1/jobs until $COUNT answers came back in all (each of the
-- $THREADS threads stops after its share), counting the statuses; used by delayed-bench.sh.
local body = os.getenv("JOB_BODY")
local count = tonumber(os.getenv("COUNT") or "1000")
local threads = tonumber(os.getenv("THREADS") or "2")
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = body

answered = 0
created = 0
local share = math.ceil(count / threads)
local all = {}

function setup(thread)
  table.insert(all, thread)
end

function response(status, headers, body)
  answered = answered + 1
  if status == 201 then created = created + 1 end
  if answered >= share then wrk.thread:stop() end
end

function done(summary, latency, requests)
  local total = 0
  for _, thread in ipairs(all) do total = total + thread:get("created") end
  io.write(string.format("created %d\n", total))
end
