#!/bin/sh
# Equivalence checks of distcomm-train-mlp, by comparing the parameters it dumps (--dump-params)
# with distcomm-params-diff. One check per call:
#
#   bitwise   --np N [--backend gloo]   DISTCOMM_DETERMINISTIC=1: N ranks x batch 16 end with the
#             same bits as 1 rank x batch 16N with --shard-size 16, for several strategies and
#             fusion thresholds (the 1-rank run sums shard means in rank order, as the
#             deterministic allreduce does: examples/train_mlp/README.md).
#   tolerance --np N --strategy S [--backend gloo]   without deterministic mode: equal within
#             $tolerance (derived below), and the bits are reported.
#   control   --np N                    negative control: the reference (1 rank x batch 16N)
#             against 1 rank x batch 16, which is how a rank that skipped the averaging would
#             train, must differ by more than $tolerance: the tolerance tells a wrong average
#             from reassociation.
#   resume    --np N                    40 steps straight == 20 steps, checkpoint, resume, 20 steps,
#             bit for bit; the halves cross epoch ends (16 steps per epoch) and the resume starts
#             mid-epoch, so the shuffle generator and the position must be restored too.
#   bad-checkpoint --np N               truncated, corrupted, foreign and mismatched checkpoints are
#             refused with a message saying what is wrong, and no parameters are written.
#
# usage: equivalence.sh --trainer PATH --diff PATH [--run PATH] CHECK --np N [--backend B]
#                       [--strategy S]
#
# Tolerance, for the non-deterministic runs. Each step's gradient element is
# g = (m_0 + ... + m_{N-1}) / N over the ranks' float shard means m_r. The 1-rank run adds them left
# to right; a non-deterministic allreduce (ring, tree, gloo's own) in another association. Any
# order of summing N floats is within gamma_{N-1} * sum |m_r| of the exact sum (gamma_k = k u /
# (1 - k u), u = 2^-24; Higham, Accuracy and Stability of Numerical Algorithms, 4.2), so two orders
# differ by at most 2 (N-1) u sum|m_r| (to first order), and after the division by N, correctly
# rounded in both runs, by delta <= (2N - 1) u G, where G bounds |m_r| (1.57 measured over these 40
# steps; take 2). With momentum mu the velocity then differs by at most delta / (1 - mu), and after
# k steps of learning rate lr the parameters by lr k delta / (1 - mu); once they differ, each update
# p -= lr v also rounds differently, another u max|p| per step (max|p| = 1.02 measured; take 1.1).
# For N = 4, k = 40, lr = 0.02, mu = 0.9:
#   0.02 * 40 * 7 * 5.96e-8 * 2 / 0.1 + 40 * 5.96e-8 * 1.1 = 6.7e-6 + 2.6e-6 ~= 1e-5.
# This first-order bound leaves out that differing parameters give differing gradients (a factor
# (1 + lr L)^k for a gradient Lipschitz constant L); the tolerance allows 5x for it. Measured:
# 1.2e-7 (two ulps), while the negative control differs by 0.15.
set -u

tolerance=5e-5
per_rank=16
steps=40
common="--samples 1024 --epochs 1000 --lr 0.02 --momentum 0.9"
seed=7
guard=60  # seconds any one run may take; a hung run is killed and the check fails

usage() {
  echo "usage: equivalence.sh --trainer PATH --diff PATH [--run PATH]" \
       "bitwise|tolerance|control|resume|bad-checkpoint --np N [--backend B] [--strategy S]" >&2
  exit 2
}
trainer='' diff='' run='' check='' np='' backend=local strategy=auto
while [ $# -gt 0 ]; do
  case $1 in
    bitwise | tolerance | control | resume | bad-checkpoint) check=$1; shift; continue ;;
    --trainer | --diff | --run | --np | --backend | --strategy) [ $# -ge 2 ] || usage ;;
    *) usage ;;
  esac
  case $1 in
    --trainer) trainer=$2 ;;
    --diff) diff=$2 ;;
    --run) run=$2 ;;
    --np) np=$2 ;;
    --backend) backend=$2 ;;
    --strategy) strategy=$2 ;;
  esac
  shift 2
done
if [ -z "$trainer" ] || [ -z "$diff" ] || [ -z "$check" ] || [ -z "$np" ]; then
  usage
fi
[ "$backend" = local ] || [ -n "$run" ] || usage

work=$(mktemp -d "${TMPDIR:-/tmp}/distcomm-equivalence.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
fail=0
say_fail() { echo "FAIL: $*"; fail=1; }

# train NAME NP [TRAINER ARGS...]: one run, output in $work/NAME.log. NP ranks as threads for the
# local backend, as processes under distcomm-run otherwise; NP 1 is always one thread.
train() {
  name=$1 ranks=$2
  shift 2
  if [ "$backend" = local ] || [ "$ranks" = 1 ]; then
    echo "--- $name: $ranks rank(s) as threads: $*"
    # shellcheck disable=SC2086
    timeout -s KILL $guard "$trainer" --np "$ranks" $common --seed $seed "$@" \
      >"$work/$name.log" 2>&1
  else
    echo "--- $name: $ranks $backend processes: $*"
    # shellcheck disable=SC2086
    timeout -s KILL $guard "$run" -np "$ranks" --timeout $guard "$trainer" --backend "$backend" \
      $common --seed $seed "$@" >"$work/$name.log" 2>&1
  fi
  status=$?
  sed 's/^/    /' "$work/$name.log"
  return $status
}

# reference NAME [ARGS]: 1 rank, batch N x 16, shards of 16: the run every N-rank run is compared to.
reference() {
  name=$1
  shift
  train "$name" 1 --batch-size $((np * per_rank)) --shard-size $per_rank --steps $steps \
    --dump-params "$work/$name.params" "$@" || say_fail "the 1-rank reference run failed"
  grep -q "after $steps steps" "$work/$name.log" || say_fail "$name did not run $steps steps"
}

# compare A B [DIFF ARGS]: distcomm-params-diff on two runs' dumps.
compare() {
  a=$1 b=$2
  shift 2
  "$diff" "$work/$a.params" "$work/$b.params" "$@" >"$work/diff.out" 2>&1
  status=$?
  sed 's/^/    /' "$work/diff.out"
  [ $status = 0 ] || say_fail "$a vs $b $*"
}

# distributed NAME [ARGS]: N ranks, batch 16 each, dumping their parameters.
distributed() {
  name=$1
  shift
  train "$name" "$np" --batch-size $per_rank --steps $steps --dump-params "$work/$name.params" \
    "$@" || say_fail "$name failed"
}

case $check in
  bitwise)
    export DISTCOMM_DETERMINISTIC=1
    reference ref
    if [ "$backend" = local ]; then
      variants="auto:64M ring:4K tree:0 ps:64M native:0"
    else
      variants="auto:64M ring:4K"
    fi
    for v in $variants; do
      s=${v%%:*} f=${v#*:}
      distributed "n$np-$s-$f" --strategy "$s" --fusion-threshold "$f"
      compare ref "n$np-$s-$f"
    done
    ;;
  tolerance)
    export DISTCOMM_DETERMINISTIC=0
    reference ref
    distributed "n$np-$strategy" --strategy "$strategy"
    compare ref "n$np-$strategy" --tolerance $tolerance
    ;;
  control)
    reference ref
    train small 1 --batch-size $per_rank --steps $steps --dump-params "$work/small.params" ||
      say_fail "the 1-rank run with batch $per_rank failed"
    compare ref small --expect-differ $tolerance
    ;;
  resume)
    batch=$((1024 / 16 / np))  # 16 steps per epoch whatever np is
    train straight "$np" --batch-size $batch --steps 40 --dump-params "$work/straight.params" ||
      say_fail "the straight run failed"
    train first "$np" --batch-size $batch --steps 20 --checkpoint "$work/ckpt" ||
      say_fail "the first half failed"
    train second "$np" --batch-size $batch --steps 20 --resume "$work/ckpt" \
      --dump-params "$work/second.params" || say_fail "the resumed half failed"
    grep -q "resumed from .*: epoch 2, step 4 (20 steps so far)" "$work/second.log" ||
      say_fail "the resumed run did not start at epoch 2, step 4"
    grep -q "after 40 steps (20 in this run)" "$work/second.log" ||
      say_fail "the resumed run did not end at step 40"
    compare straight second
    for leftover in "$work"/.ckpt.tmp.*; do
      [ ! -e "$leftover" ] || say_fail "a temporary checkpoint file was left behind: $leftover"
    done
    ;;
  bad-checkpoint)
    train good "$np" --batch-size 16 --steps 5 --checkpoint "$work/good" ||
      say_fail "the run writing a checkpoint failed"
    size=$(wc -c <"$work/good")
    head -c $((size - 100)) "$work/good" >"$work/truncated"
    head -c 100 "$work/good" >"$work/header"
    cp "$work/good" "$work/corrupt"
    # one byte in the middle of the parameters
    printf 'X' | dd of="$work/corrupt" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
    train params "$np" --batch-size 16 --steps 1 --dump-params "$work/foreign" ||
      say_fail "the run writing a parameter file failed"
    # expect NAME PATTERN FILE [ARGS]: resuming from FILE fails, says PATTERN, writes nothing.
    expect() {
      name=$1 pattern=$2 file=$3
      shift 3
      if train "$name" "$np" --resume "$work/$file" --steps 5 \
        --dump-params "$work/$name.params" "$@"; then
        say_fail "$name: resuming from $file succeeded"
      fi
      grep -q "distcomm-train-mlp: checkpoint .*$file: .*$pattern" "$work/$name.log" ||
        say_fail "$name: no message matching 'checkpoint $file: ... $pattern'"
      [ ! -e "$work/$name.params" ] || say_fail "$name: parameters were written anyway"
    }
    expect truncated "truncated: $((size - 100)) bytes, expected $size" truncated --batch-size 16
    expect header "truncated: 100 bytes, shorter than the 136-byte header" header --batch-size 16
    expect corrupt "corrupt: the hash of its contents does not match" corrupt --batch-size 16
    expect foreign "not a distcomm-train-mlp checkpoint" foreign --batch-size 16
    seed=8
    expect seed "written with --seed 7, this run has 8" good --batch-size 16
    seed=7
    expect batch "global batch .* of $((np * 16)), this run has $((np * 8))" good --batch-size 8
    train resumes "$np" --batch-size 16 --steps 1 --resume "$work/good" ||
      say_fail "the intact checkpoint was refused"
    ;;
esac

[ $fail = 0 ] && echo "PASS: $check" || echo "FAILED: $check"
exit $fail
