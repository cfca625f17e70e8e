#!/bin/sh
# submit.sh - ingests a corpus into a sharded store on a Slurm cluster: a job array of N tasks,
# task I running `lazyingest --shard I/N` (tools/slurm/ingest_task.sh; with --gpu on a GPU of
# its own) and writing shard I of STORE on shared storage, then one job that runs after every
# task has ended and checks the whole set (tools/slurm/check_task.sh: lazyingest --check).
# The tasks are requeueable (sbatch --requeue: preemption or a node failure runs them again) and
# a task run again resumes where its shard stopped, so `scontrol requeue JOB_I`, or submitting
# the same shards again with --tasks, is always safe. The first task to start writes the set's
# manifest (STORE/shards.manifest, atomically); the others read it.
#
# usage: tools/slurm/submit.sh -n N -s STORE [options] CORPUS
#   -n, --shards N        shards (array tasks), 1..4096
#   -s, --store DIR       the sharded store's folder, on storage every node sees
#   -m, --model PATH      the model (default: lazyingest's, $LAZY_MODEL or models/default.gguf)
#       --gpu             encode on a GPU: sbatch --gres=gpu:1, lazyingest --gpu (a CUDA build)
#       --bin DIR         the folder of lazyingest (default build/cuda with --gpu, else build/bin)
#       --tasks LIST      only these tasks (sbatch --array LIST, e.g. 3,7 or 0-15%4); default 0-(N-1)
#       --logs DIR        the tasks' logs (default STORE.logs): ingest-JOB_TASK.out, check-JOB.out
#       --no-check        no final check job
#       --ingest-args S   more lazyingest options, split at spaces (e.g. "--prune --max-doc-tokens 512")
#       --sbatch S        more sbatch options for every job, split at spaces (e.g. "-p gpu -t 4:00:00");
#                         sbatch's own SBATCH_PARTITION, SBATCH_ACCOUNT, ... are honoured too
#       --dry-run         print the sbatch commands instead of running them
# Prints the array's job id and the check's ("array JOB check JOB"). Exit: 0 submitted, 2 bad usage,
# 1 sbatch failed.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
n="" store="" model="" gpu=0 bin="" tasks="" logs="" check=1 ingest_args="" sbatch_args="" dry=0
usage() { sed -n '11,26p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
need() { [ $# -ge 2 ] || { echo "submit.sh: $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
    case "$1" in
    -n|--shards) need "$@"; n=$2; shift 2 ;;
    -s|--store) need "$@"; store=$2; shift 2 ;;
    -m|--model) need "$@"; model=$2; shift 2 ;;
    --gpu) gpu=1; shift ;;
    --bin) need "$@"; bin=$2; shift 2 ;;
    --tasks) need "$@"; tasks=$2; shift 2 ;;
    --logs) need "$@"; logs=$2; shift 2 ;;
    --no-check) check=0; shift ;;
    --ingest-args) need "$@"; ingest_args=$2; shift 2 ;;
    --sbatch) need "$@"; sbatch_args=$2; shift 2 ;;
    --dry-run) dry=1; shift ;;
    -h|--help) usage ;;
    --) shift; break ;;
    -*) echo "submit.sh: unknown option $1 (--help lists them)" >&2; exit 2 ;;
    *) break ;;
    esac
done
[ $# -eq 1 ] || { echo "submit.sh: one corpus expected (--help)" >&2; exit 2; }
corpus=$1
case "$n" in ''|*[!0-9]*) echo "submit.sh: --shards N is required (a number)" >&2; exit 2 ;; esac
[ "$n" -ge 1 ] && [ "$n" -le 4096 ] || { echo "submit.sh: --shards $n outside 1..4096" >&2; exit 2; }
[ -n "$store" ] || { echo "submit.sh: --store DIR is required" >&2; exit 2; }
[ -r "$corpus" ] || { echo "submit.sh: cannot read corpus $corpus" >&2; exit 2; }
# absolute paths: the tasks run elsewhere, in other folders
abs() { case "$1" in /*) echo "$1" ;; *) echo "$(pwd)/$1" ;; esac; }
corpus=$(abs "$corpus")
store=$(abs "$store")
[ -n "$model" ] && model=$(abs "$model")
[ -n "$bin" ] || { [ "$gpu" = 1 ] && bin="$root/build/cuda" || bin="$root/build/bin"; }
bin=$(abs "$bin")
[ -x "$bin/lazyingest" ] || { echo "submit.sh: no lazyingest in $bin (make, or make cuda for --gpu; or give --bin)" >&2; exit 2; }
[ -n "$logs" ] || logs="$store.logs"
logs=$(abs "$logs")
[ -n "$tasks" ] || tasks="0-$((n - 1))"
[ "$dry" = 1 ] || mkdir -p "$logs"
gres=""
[ "$gpu" = 1 ] && gres="--gres=gpu:1"

run() { if [ "$dry" = 1 ]; then echo "$*" >&2; echo 0; else "$@"; fi; }
# shellcheck disable=SC2086  # the extra options are split at spaces on purpose
array=$(run sbatch --parsable --job-name=lazyingest --array="$tasks" --requeue --open-mode=append $gres \
        --output="$logs/ingest-%A_%a.out" $sbatch_args \
        "$here/ingest_task.sh" "$bin" "$store" "$n" "$corpus" "$model" "$gpu" $ingest_args) || {
    echo "submit.sh: sbatch of the array failed" >&2; exit 1; }
array=${array%%;*}
check_id=none
if [ "$check" = 1 ]; then
    # shellcheck disable=SC2086
    check_id=$(run sbatch --parsable --job-name=lazyingest-check --dependency="afterany:$array" \
               --kill-on-invalid-dep=yes --output="$logs/check-%j.out" $sbatch_args \
               "$here/check_task.sh" "$bin" "$store") || { echo "submit.sh: sbatch of the check failed" >&2; exit 1; }
    check_id=${check_id%%;*}
fi
echo "array $array check $check_id"
