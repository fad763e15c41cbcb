#!/usr/bin/env bash
# Tries the README's commands on a fresh minimal Debian 12 (docs/architecture.md, pitfalls): debootstraps minbase
# bookworm into a directory, binds /proc, /sys and /dev into it, clones this repository's committed HEAD there
# and runs `bash scripts/run-tests.sh` (which installs everything else) under chroot. Run as root; it downloads
# about 1-2 GB of packages and needs ~10 GB of disk.
#
#   sudo bash scripts/fresh-debian-check.sh [DIR]      DIR defaults to /var/tmp/tpusim-fresh-debian
#
# Environment:
#   WORKTREE=1   test the working tree (uncommitted changes too, build*/ folders excepted), not the committed HEAD
#   MIRROR       default: the bookworm mirror in /etc/apt/sources.list.d/
#   KEEP=1       keep DIR after a success (it is always kept after a failure, for inspection)
#   CMD          what to run instead of the tests, e.g. CMD="bash scripts/run-demo.sh"
#   CMAKE_BUILD_PARALLEL_LEVEL, CTEST_ARGS are passed into the chroot.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$(pwd)
DIR=${1:-/var/tmp/tpusim-fresh-debian}
CMD=${CMD:-bash scripts/run-tests.sh}
say() { echo "fresh-debian-check: $*"; }

if [[ $(id -u) -ne 0 ]]; then
  echo "fresh-debian-check: must run as root (debootstrap, mount and chroot need it)" >&2
  exit 1
fi

# The mirror: the first bookworm (not -security, not -updates) source the host's apt uses.
find_mirror() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -e $f ]] || continue
    awk 'BEGIN { RS = ""; FS = "\n" }
         { uris = ""; ok = 0; enabled = 1
           for (i = 1; i <= NF; i++) {
             if ($i ~ /^URIs:/) { uris = $i; sub(/^URIs:[ \t]*/, "", uris); split(uris, u, /[ \t]+/); uris = u[1] }
             if ($i ~ /^Suites:/) { n = split($i, s, /[ \t]+/); for (j = 2; j <= n; j++) if (s[j] == "bookworm") ok = 1 }
             if ($i ~ /^Enabled:[ \t]*no/) enabled = 0
           }
           if (ok && enabled && uris != "") { print uris; exit } }' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -e $f ]] || continue
    sed -E 's/\[[^]]*\]//' "$f" | awk '$1 == "deb" && $3 == "bookworm" { print $2; exit }'
  done
}
MIRROR=${MIRROR:-$(find_mirror | head -n1)}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
say "mirror $MIRROR, directory $DIR, repository $REPO (HEAD $(git -C "$REPO" rev-parse --short HEAD))"

if ! command -v debootstrap >/dev/null; then
  say "installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends debootstrap
fi

mounted() { awk -v d="$1" '$2 == d || index($2, d "/") == 1 { found = 1 } END { exit !found }' /proc/mounts; }
unmount_all() {
  local m
  for m in dev/pts dev sys proc; do
    if mountpoint -q "$DIR/$m" 2>/dev/null; then umount "$DIR/$m" 2>/dev/null || umount -l "$DIR/$m" || true; fi
  done
}
remove_dir() {
  unmount_all
  if mounted "$DIR"; then
    echo "fresh-debian-check: something is still mounted under $DIR; not removing it" >&2
    return 1
  fi
  rm -rf --one-file-system "$DIR"
}

STATUS=1
cleanup() {
  unmount_all
  if [[ $STATUS -eq 0 && ${KEEP:-0} != 1 ]]; then
    say "removing $DIR"
    remove_dir || true
  else
    say "kept $DIR"
  fi
}

if [[ -e $DIR ]]; then
  say "removing the previous $DIR"
  remove_dir
fi
trap cleanup EXIT
trap 'exit 130' INT TERM

start=$(date +%s)
say "debootstrap --variant=minbase --include=ca-certificates,git bookworm $DIR $MIRROR"
debootstrap --variant=minbase --include=ca-certificates,git bookworm "$DIR" "$MIRROR"
cp /etc/resolv.conf "$DIR/etc/resolv.conf" 2>/dev/null || true

for m in proc sys dev dev/pts; do
  mkdir -p "$DIR/$m"
  mount --bind "/$m" "$DIR/$m"
done

say "cloning the committed HEAD into $DIR/root/tpusim"
git clone --quiet --no-hardlinks "$REPO" "$DIR/root/tpusim"
if [[ ${WORKTREE:-0} == 1 ]]; then
  # Also the work not yet committed: modified and untracked files git does not ignore, build folders excepted.
  say "WORKTREE=1: copying uncommitted changes over it"
  git -C "$REPO" ls-files -z --modified --others --exclude-standard |
    grep -zvE '^build[^/]*/' |
    (cd "$REPO" && xargs -0 -r cp --parents -d -t "$DIR/root/tpusim" 2>/dev/null || true)
  git -C "$REPO" ls-files -z --deleted | (cd "$DIR/root/tpusim" && xargs -0 -r rm -f)
fi

say "running under chroot: $CMD"
chroot_env=(HOME=/root LANG=C.UTF-8 TERM=dumb PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
for v in CMAKE_BUILD_PARALLEL_LEVEL CTEST_ARGS http_proxy https_proxy no_proxy; do
  if [[ -n ${!v:-} ]]; then chroot_env+=("$v=${!v}"); fi
done
set +e
chroot "$DIR" /usr/bin/env -i "${chroot_env[@]}" /bin/bash -c "cd /root/tpusim && $CMD"
rc=$?
set -e
elapsed=$(( $(date +%s) - start ))
if [[ $rc -eq 0 ]]; then
  STATUS=0
  say "PASSED in $((elapsed / 60)) min $((elapsed % 60)) s: '$CMD' works on a fresh Debian 12"
else
  say "FAILED (exit $rc) after $((elapsed / 60)) min $((elapsed % 60)) s: '$CMD' on a fresh Debian 12"
fi
exit $rc
