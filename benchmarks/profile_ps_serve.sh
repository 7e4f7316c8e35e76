#!/usr/bin/env bash
# Where the serving process's CPU goes per AdaComp push in the ingest setting (bench_ps's pinned run:
# the real ZmqServer on CPU 0, 8 client DEALERs on CPU 1, 4 s), sampled by perf at 4,999 Hz (software
# clock: this VM has no hardware counters), for the real PS and for raw (the same serve loop around a
# `process` that does no work). Per thread of the serving process, µs per message by library
# (samples / messages / 4,999 Hz), and its top symbols. The main thread (imports, then waiting for the
# clients) is left out. Needs perf (linux-tools) and root or
# perf_event_paranoid <= 2.
#     bash benchmarks/profile_ps_serve.sh > benchmarks/results/ps-serve-profile.txt
set -eu
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/ingest.py" <<'PY'
import os, sys
from benchmarks.bench_ps import _serve_ps
if __name__ == "__main__":
    print("server pid", os.getpid(), flush=True)
    rate, cpu, n = _serve_ps("adacomp", 4.0, 8, null=sys.argv[1] == "raw", pinned=True)
    print(f"messages {n} rate {rate:.0f}/s cpu_us_per_msg {cpu * 1e6:.1f}", flush=True)
PY
echo "# $(date -u '+%Y-%m-%d %H:%M') UTC, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for what in ps raw; do
    PYTHONPATH=. perf record -q -F 4999 -e cpu-clock -o "$tmp/$what.data" -- .venv/bin/python "$tmp/ingest.py" "$what" > "$tmp/$what.out" 2>/dev/null
    pid=$(awk '/server pid/ {print $3}' "$tmp/$what.out")
    n=$(awk '/^messages/ {print $2}' "$tmp/$what.out")
    echo
    echo "## $what: $(grep '^messages' "$tmp/$what.out") (perf's own cost included)"
    # threads of the serving process (its pid's tids), busiest first
    perf script -i "$tmp/$what.data" -F pid,tid 2>/dev/null | awk -v p="$pid" '{split($1, a, "/"); if (a[1] == p && a[2] != p) print a[2]}' \
        | sort | uniq -c | sort -rn | head -4 | while read -r samples tid; do
        name=$(perf script -i "$tmp/$what.data" --tid "$tid" -F comm 2>/dev/null | head -1 | xargs)
        printf '\nthread %s (%s): %.1f us per message\n' "$tid" "$name" "$(echo "$samples / $n / 4999 * 1000000" | bc -l)"
        perf script -i "$tmp/$what.data" --tid "$tid" -F ip,dso 2>/dev/null | awk '{print $NF}' | sed 's/.*\///; s/[()]//g' | sort | uniq -c | sort -rn \
            | head -6 | awk -v n="$n" '{printf "  %-60s %6.1f us\n", $2, $1 / n / 4999 * 1e6}'
        echo "  top symbols:"
        perf script -i "$tmp/$what.data" --tid "$tid" -F ip,sym 2>/dev/null | awk '{$1=""; print}' | sort | uniq -c | sort -rn | head -5 \
            | awk -v n="$n" '{s=$2; for (i=3;i<=NF;i++) s=s" "$i; printf "    %-56s %6.1f us\n", s, $1 / n / 4999 * 1e6}'
    done
done
