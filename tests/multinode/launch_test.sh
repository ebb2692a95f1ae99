#!/usr/bin/env bash
# The multi-node concurrency test on a real Slurm cluster.
#
#   export TIRASTORE_TEST_DIR=/lustre/scratch/$USER/tirastore_test   # required
#   export SLURM_PARTITION=batch                                      # optional
#   bash tests/multinode/launch_test.sh NWORKERS NRECORDS NCONTESTED
#
# Starts NWORKERS workers (tests/multinode/worker.py), each with its own
# `srun --nodes=1 --ntasks=1` in the background so that each lands on a node
# of its own, all on ONE database in a fresh run directory under
# TIRASTORE_TEST_DIR (which must be on the shared file system). Waits for
# them, then runs tests/multinode/verify_results.py with --distinct-hosts.
# Exit status: 0 only if every worker succeeded and the verification passed.
#
# Placement: inside an allocation of at least NWORKERS nodes (salloc -N),
# step w is pinned to node w of the allocation (srun --relative=w); without
# an allocation each srun is its own job with --exclusive, so concurrently
# running workers get distinct nodes. (A partition with OverSubscribe=FORCE
# overrides --exclusive: there workers share nodes, as on the one-node test
# cluster of tests/slurm/cluster.py; run it with REQUIRE_DISTINCT_HOSTS=0.)
#
# Optional environment:
#   DRY_RUN=1                 print the commands instead of running them
#   PYTHON                    interpreter on the nodes (default: python3)
#   SRUN                      the srun command (default: srun)
#   EXTRA_SRUN_ARGS           more srun arguments (e.g. "--time=00:20:00 --account=x")
#   STALE_LOCK_TIMEOUT        the workers' stale_lock_timeout (default 600)
#   LOCK_TIMEOUT              the workers' lock_timeout (default 1800)
#   REQUIRE_DISTINCT_HOSTS=0  do not require one host per worker
#   SEED                      seed of the workers' random choices (default 0)
set -euo pipefail

usage() {
    cat >&2 <<EOF
usage: [DRY_RUN=1] TIRASTORE_TEST_DIR=DIR [SLURM_PARTITION=P] $0 NWORKERS NRECORDS NCONTESTED

  NWORKERS    number of workers, one srun each (>= 1)
  NRECORDS    unique records per worker (>= 1)
  NCONTESTED  records every worker writes (>= 1; worker 0 overwrites one)

TIRASTORE_TEST_DIR (required) is a directory on the shared (Lustre) file
system; SLURM_PARTITION (optional) is passed to srun --partition.
example: TIRASTORE_TEST_DIR=/lustre/scratch/\$USER/tirastore_test $0 8 50 20
EOF
    exit 2
}

die() { echo "launch_test.sh: $*" >&2; exit 2; }

[ $# -eq 3 ] || usage
NWORKERS=$1 NRECORDS=$2 NCONTESTED=$3
for pair in "NWORKERS:$NWORKERS" "NRECORDS:$NRECORDS" "NCONTESTED:$NCONTESTED"; do
    name=${pair%%:*} value=${pair#*:}
    [[ $value =~ ^[0-9]+$ ]] || die "$name must be a positive integer, got '$value'"
    [ "$((10#$value))" -ge 1 ] || die "$name must be at least 1, got '$value'"
done
NWORKERS=$((10#$NWORKERS)) NRECORDS=$((10#$NRECORDS)) NCONTESTED=$((10#$NCONTESTED))

[ -n "${TIRASTORE_TEST_DIR:-}" ] ||
    die "TIRASTORE_TEST_DIR is not set: set it to a directory on the shared (Lustre) file system"

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=${PYTHON:-python3}
SRUN=${SRUN:-srun}
STALE_LOCK_TIMEOUT=${STALE_LOCK_TIMEOUT:-600}
LOCK_TIMEOUT=${LOCK_TIMEOUT:-1800}
SEED=${SEED:-0}
RUN_DIR="$TIRASTORE_TEST_DIR/run_$(date -u +%Y%m%dT%H%M%SZ)_$$"
DB="$RUN_DIR/db/cache.db"
LOG="$RUN_DIR/logs"

read -r -a extra <<< "${EXTRA_SRUN_ARGS:-}"
placement=()
alloc_nodes=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-0}}
if [ -n "${SLURM_JOB_ID:-}" ] && [ "$alloc_nodes" -ge "$NWORKERS" ]; then
    in_allocation=1
else
    in_allocation=0
fi

# show CMD...: print a command, shell-quoted, as it would run.
show() { printf '%q ' "$@" | sed 's/ $//'; printf '\n'; }

worker_cmd() {
    local w=$1
    cmd=("$SRUN" --nodes=1 --ntasks=1)
    [ -n "${SLURM_PARTITION:-}" ] && cmd+=("--partition=$SLURM_PARTITION")
    if [ "$in_allocation" = 1 ]; then
        cmd+=("--relative=$w")
    else
        cmd+=(--exclusive)
    fi
    cmd+=("--job-name=tirastore-mn-$w" "--output=$LOG/worker-$w.out")
    [ ${#extra[@]} -gt 0 ] && cmd+=("${extra[@]}")
    cmd+=("$PYTHON" "$HERE/worker.py" --db "$DB" --worker-id "$w" --nworkers "$NWORKERS"
          --nrecords "$NRECORDS" --ncontested "$NCONTESTED" --log "$LOG" --seed "$SEED"
          --stale-lock-timeout "$STALE_LOCK_TIMEOUT" --lock-timeout "$LOCK_TIMEOUT")
}

verify=("$PYTHON" "$HERE/verify_results.py" --db "$DB" --log "$LOG" --nworkers "$NWORKERS"
        --nrecords "$NRECORDS" --ncontested "$NCONTESTED")
[ "${REQUIRE_DISTINCT_HOSTS:-1}" = 0 ] || verify+=(--distinct-hosts)

if [ "${DRY_RUN:-0}" = 1 ]; then
    echo "# dry run: $NWORKERS workers x $NRECORDS unique + $NCONTESTED contested records in $RUN_DIR"
    show mkdir -p "$RUN_DIR/db" "$LOG"
    for ((w = 0; w < NWORKERS; w++)); do
        worker_cmd "$w"
        printf '%s &\n' "$(show "${cmd[@]}")"
    done
    echo "wait"
    show "${verify[@]}"
    exit 0
fi

command -v "$SRUN" >/dev/null 2>&1 || die "$SRUN not found: run this on a Slurm login node (or DRY_RUN=1)"
mkdir -p "$RUN_DIR/db" "$LOG" || die "cannot create $RUN_DIR"
echo "launch_test.sh: $NWORKERS workers x $NRECORDS unique + $NCONTESTED contested records"
echo "launch_test.sh: database $DB, logs $LOG"
start=$(date +%s)
pids=()
for ((w = 0; w < NWORKERS; w++)); do
    worker_cmd "$w"
    "${cmd[@]}" &
    pids+=($!)
done
failed=0
for w in "${!pids[@]}"; do
    if ! wait "${pids[$w]}"; then
        echo "launch_test.sh: worker $w failed (see $LOG/worker-$w.out)" >&2
        failed=$((failed + 1))
    fi
done
echo "launch_test.sh: workers finished in $(( $(date +%s) - start )) s, $failed failed"
status=0
"${verify[@]}" || status=1
[ "$failed" -eq 0 ] || status=1
exit "$status"
