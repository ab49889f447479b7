-- POST a one-task job (like post-job.lua) whose task holds a concurrency key (issue #42):
-- KEYS=distinct: one of 10,000 keys, max 1 (keys nearly never contended);
-- KEYS=hot: one key for every job, max KEY_MAX (default 8): every job lines up for it.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local mode = os.getenv("KEYS") or "distinct"
local hotMax = tonumber(os.getenv("KEY_MAX") or "8")
local template = '{"name":"import-comments","input":{"post":123},"graph":{"type":"task","id":"fetch",'
    .. '"action":"value","params":{"value":42},"concurrency":{"key":"%s","max":%d}},'
    .. '"labels":{"team":"data","env":"bench"},"timeoutMs":600000}'

request = function()
    local key, max = "hot", hotMax
    if mode ~= "hot" then key, max = "customer-" .. math.random(0, 9999), 1 end
    return wrk.format(nil, nil, nil, string.format(template, key, max))
end
