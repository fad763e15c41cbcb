#!/usr/bin/env bash
# Puts `tpusim` on the PATH: a symbolic link TPUSIM_BIN_DIR/tpusim (default /usr/local/bin/tpusim) to this
# checkout's build/tools/tpusim, so that a rebuild needs no new link. Called by run-demo.sh and run-tests.sh.
# A `tpusim` there that is not a link is left alone; without write access to the folder (not root) it prints the
# command that would do it. TPUSIM_BIN_DIR= (empty) makes no link.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
say() { echo "link-tpusim.sh: $*"; }

bin=${TPUSIM_BIN_DIR-/usr/local/bin}
program=$PWD/build/tools/tpusim
if [[ -z $bin ]]; then
  say "TPUSIM_BIN_DIR is empty: no link made; the program is $program"
  exit 0
fi
link=$bin/tpusim
if [[ -e $link && ! -L $link ]]; then
  say "$link exists and is not a link: left alone; the program is $program"
  exit 0
fi
if ! mkdir -p "$bin" 2>/dev/null || [[ ! -w $bin ]]; then
  say "cannot write to $bin; to put tpusim on the PATH: sudo ln -sfn $program $link"
  exit 0
fi
ln -sfn "$program" "$link"
say "tpusim is on the PATH: $link -> $program"
case ":$PATH:" in
  *":$bin:"*) ;;
  *) say "but $bin is not on this shell's PATH: export PATH=\"$bin:\$PATH\"" ;;
esac
