#!/bin/sh
# A whole host lost in the middle of elastic training: distcomm-train-mlp --elastic on N
# namespace-hosts x 2 ranks (netns.sh, torchrun's variables, no backend named: the hierarchical
# shm+gloo job), the job's store on a host of its own (--store: distcomm-store) or in an etcd
# cluster of one member per host (--etcd), DISTCOMM_TIMEOUT=5. Once rank 0 has reported its 3rd
# epoch, host H's link goes down and its ranks (and etcd member) are killed. Passes when
#   - a rank says the job went on with the other ranks ("N*2-2 of N*2 ranks go on") and one says
#     its final line;
#   - the survivors' final parameters are bitwise equal, and the lost ranks wrote none;
#   - netns.sh says how long the survivors took from the loss to going on ("recovered in").
# With --replace the host then comes back and its ranks are started again as they were first (a
# replacement machine): they must join the running job, which finishes at its first size
# ("N*2 of N*2 ranks go on") with every rank's parameters equal; netns.sh says how long from
# their start until a rank said they joined ("joined in"). --replace-ranks 1: only the host's
# first rank comes back, so the hosts hold different numbers of ranks: the grown job must be
# flat, and say so, and finish with one rank fewer than at first.
# Skips (77) where netns.sh cannot make namespaces.
# usage: host_loss.sh --netns PATH --trainer PATH (--store PATH | --etcd PATH) --hosts N
#                     --lose-host H [--replace | --replace-ranks K]
set -u

usage() {
  echo "usage: host_loss.sh --netns PATH --trainer PATH (--store PATH | --etcd PATH) --hosts N --lose-host H" >&2
  exit 2
}
netns='' trainer='' store='' etcd='' hosts='' lose='' replace='' back=2
while [ $# -gt 0 ]; do
  if [ "$1" = --replace ]; then
    replace=1
    shift
    continue
  fi
  if [ "$1" = --replace-ranks ] && [ $# -ge 2 ]; then
    replace=1
    back=$2
    shift 2
    continue
  fi
  [ $# -ge 2 ] || usage
  case $1 in
    --netns) netns=$2 ;;
    --trainer) trainer=$2 ;;
    --store) store=$2 ;;
    --etcd) etcd=$2 ;;
    --hosts) hosts=$2 ;;
    --lose-host) lose=$2 ;;
    *) usage ;;
  esac
  shift 2
done
if [ -z "$netns" ] || [ -z "$trainer" ] || [ -z "$store$etcd" ] || [ -z "$hosts" ] || [ -z "$lose" ]; then
  usage
fi
if [ -n "$etcd" ]; then
  set -- --etcd "$etcd"
else
  set -- --store "$store"
fi
# An epoch after the loss takes a fraction of a second: with a replacement, enough of them that
# the job is still running when the host's ranks come back and ask to join (a few seconds).
epochs=8
[ -z "$replace" ] || {
  set -- "$@" --replace-ranks "$back" --joined-on 'ranks? joined' --env DISTCOMM_LOG=info
  epochs=40
}

work=$(mktemp -d "${TMPDIR:-/tmp}/distcomm-host-loss.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
world=$((hosts * 2))
left=$((world - 2))
bash "$netns" --hosts "$hosts" --ranks-per-host 2 --timeout 150 "$@" \
  --lose-host "$lose" --lose-on '^epoch   3/' --recovered-on 'ranks go on from step' \
  --env DISTCOMM_IFACE=eth0 --env DISTCOMM_TIMEOUT=5 -- \
  "$trainer" --elastic --epochs "$epochs" --samples 8192 --dump-params "$work/params.%r" >"$work/log" 2>&1
status=$?
cat "$work/log"
[ $status -ne 77 ] || exit 77
fail=0
say_fail() { echo "FAIL: $*"; fail=1; }
[ $status -eq 0 ] || say_fail "netns.sh exited with status $status"
grep -q "netns: lost host$lose" "$work/log" || say_fail "host $lose was never lost"
grep -q "$left of $world ranks go on" "$work/log" || say_fail "no rank said $left of $world ranks go on"
grep -q "final: test accuracy" "$work/log" || say_fail "no rank finished"
grep -q "netns: recovered in" "$work/log" || say_fail "the survivors did not go on after the loss"
first=''
if [ -n "$replace" ]; then
  grown=$((left + back))
  grep -q "netns: joined in" "$work/log" || say_fail "the host's ranks started again did not join"
  grep -q "$grown of $world ranks go on" "$work/log" ||
    say_fail "no rank said the job went on with $grown of $world ranks"
  if [ "$back" -lt 2 ]; then
    grep -q "ranks do not fill hosts of 2: the hosts hold different numbers of ranks, so the communicator is flat" "$work/log" ||
      say_fail "the grown job of uneven hosts did not say it is flat"
  fi
fi
r=0
while [ $r -lt $world ]; do
  if [ $((r / 2)) -eq "$lose" ] && { [ -z "$replace" ] || [ $((r % 2)) -ge "$back" ]; }; then
    [ ! -f "$work/params.$r" ] || say_fail "the lost rank $r wrote parameters"
  elif [ ! -f "$work/params.$r" ]; then
    say_fail "rank $r wrote no parameters"
  elif [ -z "$first" ]; then
    first=$r
  else
    cmp -s "$work/params.$first" "$work/params.$r" ||
      say_fail "rank $r's parameters differ from rank $first's"
  fi
  r=$((r + 1))
done
[ $fail -eq 0 ] && echo PASS
exit $fail
