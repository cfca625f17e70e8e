#!/bin/sh
# ingest_task.sh - one task of the job array tools/slurm/submit.sh submits: lazyingest --shard I/N
# for I = $SLURM_ARRAY_TASK_ID, writing shard I of the sharded store on shared storage. A task
# killed, preempted or requeued (--requeue: Slurm runs it again) resumes where its shard
# stopped: lazyingest's run is crash-safe and incremental (what was committed is kept, the
# rest encoded), so running a task again is always safe. Not meant to be run by hand.
# Arguments: BIN STORE N CORPUS MODEL GPU [lazyingest options...]   (MODEL "" = the default, GPU 0|1)
#SBATCH --requeue
#SBATCH --open-mode=append
set -u
[ $# -ge 6 ] || { echo "ingest_task.sh: expected BIN STORE N CORPUS MODEL GPU [options]" >&2; exit 2; }
bin=$1 store=$2 n=$3 corpus=$4 model=$5 gpu=$6
shift 6
i=${SLURM_ARRAY_TASK_ID:?ingest_task.sh runs as a task of a Slurm job array (tools/slurm/submit.sh)}
echo "lazyingest task: shard $i/$n of $store on $(hostname), run ${SLURM_RESTART_COUNT:-0} of job ${SLURM_ARRAY_JOB_ID:-?}, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
[ -n "$model" ] && set -- --model "$model" "$@"
[ "$gpu" = 1 ] && set -- --gpu "$@"
# exec: Slurm's signals (preemption, scancel, requeue) reach lazyingest itself
exec "$bin/lazyingest" --shard "$i/$n" --store "$store" "$@" "$corpus"
