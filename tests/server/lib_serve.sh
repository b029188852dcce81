# lib_serve.sh - starting and stopping `moestream serve` for the server tests
# (sourced after tests/lib.sh). Every wait is bounded.
#   start_server NAME ARGS...   starts BIN serve ARGS --port 0, sets PORT_NAME
#                               and PID_NAME; stops the test if it never listens
#   stop_server NAME            SIGTERM, waits (bounded), checks exit status 0
#   url NAME                    http://127.0.0.1:PORT
#   wait_busy 0|1               waits (bounded, 120 s) until $U/health's busy flag is that
#   wait_metric NAME N          waits (bounded, 120 s) until metric NAME of $U/metrics is >= N
#   need_jsonschema             stops the test unless curl, jq and python3-jsonschema are installed
declare -A SRV_PID SRV_PORT
# Stops the test unless curl, jq and Python's jsonschema (which validates
# replies independently of the server) are installed.
need_jsonschema() {
    command -v curl >/dev/null && command -v jq >/dev/null && python3 -c 'import jsonschema' 2>/dev/null ||
        { echo "FAIL: curl, jq and python3-jsonschema are needed (scripts/install-deps.sh)"; exit 1; }
}
start_server() {
    local name=$1; shift
    rm -f "$TMP/$name.port"
    "$BIN" serve --port 0 --port-file "$TMP/$name.port" -t 2 "$@" >"$TMP/$name.log" 2>&1 &
    SRV_PID[$name]=$!
    for _ in $(seq 1 1200); do
        [ -s "$TMP/$name.port" ] && break
        kill -0 "${SRV_PID[$name]}" 2>/dev/null || break
        sleep 0.1
    done
    if [ ! -s "$TMP/$name.port" ]; then
        echo "FAIL: server $name did not start:"; cat "$TMP/$name.log"; exit 1
    fi
    SRV_PORT[$name]=$(cat "$TMP/$name.port")
}
url() { echo "http://127.0.0.1:${SRV_PORT[$1]}"; }
wait_busy() {
    for _ in $(seq 1 2400); do
        [ "$(curl -s -m 5 "$U/health" | jq -r .busy)" = "$1" ] && return 0
        sleep 0.05
    done
    return 1
}
wait_metric() {
    for _ in $(seq 1 1200); do
        [ "$(curl -s -m 5 "$U/metrics" | awk -v k="$1" '$1 == k {print $2}')" -ge "$2" ] 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}
stop_server() {
    local name=$1 pid=${SRV_PID[$1]} rc
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
        fail "server $name did not exit within 60 s of SIGTERM"; kill -KILL "$pid"; wait "$pid" 2>/dev/null
        return
    fi
    wait "$pid"; rc=$?
    [ $rc -eq 0 ] || { fail "server $name exited with $rc after SIGTERM"; tail -5 "$TMP/$name.log"; }
}
# Kills the servers still running when the script ends.
cleanup_servers() { for p in "${SRV_PID[@]}"; do kill -KILL "$p" 2>/dev/null; done; }
trap cleanup_servers EXIT
