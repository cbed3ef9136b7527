#!/usr/bin/env bash
# Does the simulator predict real runs? For each program: its trace is
# replayed on a capped profile (`ahead sim replay --device`), and the
# program is run for real on the same cap (a cgroup io.max, as `ahead
# bench --device` sets it), cold, plain and under `ahead run`, alternated.
# A whole process also computes and starts up, which the trace does not
# time: the prediction adds the program's warm run (every byte cached).
#
#   predict.sh DIR [RUNS]     (DIR as made by record.sh; root; AHEAD=…)
#
# Prints, per program: the predicted and the median measured seconds of
# the plain run and of `ahead run`, and measured ÷ predicted.
set -euo pipefail
dir=${1:?usage: predict.sh DIR [RUNS]}
runs=${2:-3}
ahead=${AHEAD:-ahead}
bps=$((400 << 20))
iops=20000
profile=$bps,$iops
cd "$dir"

dev=$(lsblk -no MAJ:MIN "$(findmnt -no SOURCE --target "$dir")" | head -n1 | tr -d ' ')
if [ -d /sys/fs/cgroup/blkio ]; then
    cg=/sys/fs/cgroup/blkio/ahead-predict
    mkdir -p "$cg"
    echo "$dev $bps" > "$cg/blkio.throttle.read_bps_device"
    echo "$dev $iops" > "$cg/blkio.throttle.read_iops_device"
else
    cg=/sys/fs/cgroup/ahead-predict
    mkdir -p "$cg"
    echo "$dev rbps=$bps riops=$iops" > "$cg/io.max"
fi

now() { date +%s.%N; }
# run FILE cold|warm CMD...: seconds of one run in the capped cgroup.
run() {
    local file=$1 how=$2
    shift 2
    if [ "$how" = cold ]; then "$ahead" evict "$file" >/dev/null; else cat "$file" >/dev/null; fi
    local s e
    s=$(now)
    sh -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' sh "$cg" "$@" >/dev/null
    e=$(now)
    echo "$e - $s" | bc
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
sim() { # sim TRACE POLICY: simulated seconds
    "$ahead" sim replay "$1" --device "$profile" --policy "$2" --json |
        python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["seconds"])'
}

predict() {
    local name=$1 file=$2
    shift 2
    "$ahead" trace -o "/tmp/predict-$name.trace" -- "$@" >/dev/null
    dd if="$file" of=/dev/null bs=4M iflag=direct status=none
    local p=() a=() w=()
    for _ in $(seq "$runs"); do
        p+=("$(run "$file" cold "$@")")
        a+=("$(run "$file" cold "$ahead" run -- "$@")")
        w+=("$(run "$file" warm "$@")")
    done
    local pm am wm so sa
    pm=$(printf '%s\n' "${p[@]}" | median)
    am=$(printf '%s\n' "${a[@]}" | median)
    wm=$(printf '%s\n' "${w[@]}" | median)
    so=$(sim "/tmp/predict-$name.trace" ondemand)
    sa=$(sim "/tmp/predict-$name.trace" run)
    python3 -c "
pm, am, wm, so, sa = $pm, $am, $wm, $so, $sa
po, pa = so + wm, sa + wm
print(f'{\"$name\":<14} plain: predicted {po:.3f} s, measured {pm:.3f} s ({pm/po:.2f}x)   '
      f'ahead run: predicted {pa:.3f} s, measured {am:.3f} s ({am/pa:.2f}x)   warm {wm:.3f} s')"
}

echo "profile $profile, $runs runs each, medians"
predict in-list in.db sqlite3 in.db ".read inlist.sql"
predict index-fetch in.db sqlite3 in.db ".read range.sql"
echo "select sum(length(b)) from (select b from t order by id desc);" > back.sql
predict scan-back in.db sqlite3 in.db ".read back.sql"
predict tac lines.txt tac lines.txt
predict tail lines.txt tail -n 200000 lines.txt
