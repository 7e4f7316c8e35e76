#!/usr/bin/env bash
# Usage: RUNS=30 [STOP_AT_LEAK=1] bash benchmarks/docker_teardown_probe.sh  (as root, docker up; results: benchmarks/results/docker_teardown_load.txt)
# 30 runs of the docker teardown scale test beside two busy loops; one line a run with the failure's
# report (errors, phantom, force_disconnected) when it leaks.
cd "$(dirname "$0")/.."
python3 -c "while True: pass" & B1=$!
python3 -c "while True: pass" & B2=$!
trap "kill $B1 $B2" EXIT
for i in $(seq 1 ${RUNS:-30}); do
  out=$(EDGEBED_REQUIRE_CAPS=1 timeout 300 .venv/bin/python -m pytest -q -s -p no:randomly -p no:cacheprovider tests/system/test_docker_teardown_scale.py 2>&1)
  line=$(echo "$out" | grep -E "teardown of|passed|failed" | tr '\n' ' ')
  echo "$(date +%H:%M:%S) run $i: $line"
  if echo "$out" | grep -q failed; then echo "$out" | grep -E "AssertionError|assert left|force_disconnected|phantom" | head -5 | cut -c1-600; [ -n "$STOP_AT_LEAK" ] && break; fi
done
echo "networks left:"; docker network ls --filter label=edgebed.run --format '{{.Name}}'
