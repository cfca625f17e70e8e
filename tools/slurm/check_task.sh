#!/bin/sh
# check_task.sh - the job tools/slurm/submit.sh runs after every task of its array has ended
# (finished, failed or cancelled: afterany): lazyingest --check over the whole sharded store.
# It exits 0 when every shard is there, of the set's model, complete (its last ingest run
# finished), with every document in its own shard once and every payload readable with a valid
# checksum; 4 with each problem named (a shard whose task failed: resubmit it with
# submit.sh --tasks I), 1 when the set cannot be opened (a shard missing, of another set).
# Arguments: BIN STORE
set -u
[ $# -eq 2 ] || { echo "check_task.sh: expected BIN STORE" >&2; exit 2; }
echo "lazyingest check of $2 on $(hostname), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
exec "$1/lazyingest" --check --store "$2"
