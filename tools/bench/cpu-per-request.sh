#!/usr/bin/env bash
# The server's CPU time per request of two `ledger` binaries, alternately (old, new, old, new, …), each on a
# fresh ledger with 8,000 registered devices: /healthz and per-token subscribe at 64 connections, batchAdd of
# 1000 tokens at 8, then topic sends at 64 to the topics batchAdd filled, then the same sends each after a
# change of its topic's membership (wrk -t1, the Lua scripts of tools/bench/wrk). CPU per request (user +
# system of the server process, /proc/PID/stat, from the start of each wrk run until the server is idle
# again, so sends' queued audiences count) is steadier than req/s on a shared machine. "KB" is what reached the
# ledger's block device per request over the same span (its sectors written: the ledger's pages).
#   tools/bench/cpu-per-request.sh OLD_LEDGER NEW_LEDGER [ROUNDS] [SECONDS]
#   WORKLOADS="batchAdd send" tools/bench/cpu-per-request.sh …   # only these (send needs batchAdd before it)
set -euo pipefail
old="${1:?usage: tools/bench/cpu-per-request.sh OLD_LEDGER NEW_LEDGER [ROUNDS] [SECONDS]}"
new="${2:?usage: tools/bench/cpu-per-request.sh OLD_LEDGER NEW_LEDGER [ROUNDS] [SECONDS]}"
rounds="${3:-2}"
seconds="${4:-6}"
source "$(dirname "$0")/fresh-server.sh"

cpu() { awk '{print $14 + $15}' "/proc/$server/stat"; }
# Bytes written to the block device that holds the ledger (sectors of /sys/class/block/DEV/stat; the whole
# device, so run nothing else that writes). Not the server's write_bytes in /proc/PID/io: that counts the page
# cache it dirtied, whole folios at a time, and read 2.5–6× the device's figure for the same load.
device=$(basename "$(df --output=source "$work" | tail -1)")
[ -r "/sys/class/block/$device/stat" ] || { echo "error: $work is not on a block device (/sys/class/block/$device/stat)" >&2; exit 1; }
written() { awk '{print $7 * 512}' "/sys/class/block/$device/stat"; }
settled=0
settle() { # waits until the server is idle (under 2 ticks in 0.25 s, at most 30 s): queued work counts too;
    # sets $settled to the quarter-seconds it took
    local last now
    last=$(cpu)
    for settled in $(seq 0 119); do
        sleep 0.25
        now=$(cpu)
        [ $((now - last)) -lt 2 ] && return
        last=$now
    done
    settled=120
}
measure() { # label, wrk arguments…: prints "label rate/s cpu-µs/request KB-written/request"
    local before after out requests rate bytes_before bytes_after
    case " ${WORKLOADS:-healthz subscribe batchAdd send churn} " in *" $1 "*) ;; *) return 0 ;; esac
    before=$(cpu)
    bytes_before=$(written)
    out=$(wrk -t1 -d"${seconds}s" "${@:2}")
    settle
    after=$(cpu)
    bytes_after=$(written)
    if echo "$out" | grep -q "Non-2xx"; then echo "error: $1 had answers that were not 2xx" >&2; exit 1; fi
    requests=$(echo "$out" | awk '/requests in/ {print $1}')
    rate=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
    printf "%s %s/s %s µs %s KB" "$1" "$rate" \
        "$(python3 -c "import os; print(round(($after - $before) / os.sysconf('SC_CLK_TCK') * 1e6 / $requests))")" \
        "$(python3 -c "print(round(($bytes_after - $bytes_before) / 1000 / $requests, 1))")"
    # Work left queued when wrk stopped: how long the server took to go idle (capped at 30 s).
    if [ "$settled" -ge 2 ]; then printf " (idle %ss later%s)" "$((settled / 4))" "$([ "$settled" -ge 120 ] && echo ", capped")"; fi
    printf "  "
}

for round in $(seq "$rounds"); do
    for side in old new; do
        binary=$old; [ "$side" = new ] && binary=$new
        start "$binary"
        printf "%s  " "$side"
        measure healthz -c64 "http://127.0.0.1:$port/healthz"
        measure subscribe -c64 -s "$scripts/subscribe.lua" "http://127.0.0.1:$port"
        measure batchAdd -c8 -s "$scripts/batchadd.lua" "http://127.0.0.1:$port"
        # To the batch-* topics batchAdd just filled: each send's audience is recorded before `after` is read.
        measure send -c64 -s "$scripts/send.lua" "http://127.0.0.1:$port"
        # Half sends, half one-token changes of the sent-to topics: audiences almost never repeat (send-churn.lua).
        measure churn -c64 -s "$scripts/send-churn.lua" "http://127.0.0.1:$port"
        echo
    done
done
