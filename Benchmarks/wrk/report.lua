-- Shared by the runs: print requests/s and latency percentiles in a form the script greps.
done = function(summary, latency, requests)
    io.write(string.format("RESULT rps=%.0f p50=%.3f p99=%.3f errors=%d\n",
        summary.requests / (summary.duration / 1e6),
        latency:percentile(50) / 1000, latency:percentile(99) / 1000,
        summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.status + summary.errors.timeout))
end
