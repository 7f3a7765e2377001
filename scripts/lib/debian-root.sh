# Debian roots made with debootstrap, shared by scripts/setup and scripts/dist (sourced; needs `sudo_cmd` set and
# `prog` naming the caller for messages). A root is built in a temporary directory next to it and renamed into
# place only when complete, so an interrupted run never leaves a half-made root that looks whole.

# Mount points at or under $1, deepest first.
mounts_under() {
  awk -v d="$1" '$2 == d || index($2, d "/") == 1 { print $2 }' /proc/self/mounts | sort -r
}
# Unmounts what is mounted inside a root: debootstrap's /proc and /sys, the tests' /proc and bind mounts of the
# repo and the temp dir (a root is never deleted or moved through those).
unmount_under() {
  local m
  while read -r m; do "${sudo_cmd[@]}" umount "$m" 2>/dev/null || "${sudo_cmd[@]}" umount -l "$m"; done < <(mounts_under "$1")
  [ -z "$(mounts_under "$1")" ] ||
    { echo "$prog: $1 still has file systems mounted inside: unmount them (see /proc/self/mounts), then run $prog again" >&2; exit 1; }
}
remove_root() {
  unmount_under "$1"
  "${sudo_cmd[@]}" rm -rf --one-file-system "$1"
}

# debian_root ROOT SUITE PACKAGES WHAT CHECK: makes ROOT (a debootstrap --variant=minbase of Debian SUITE with the
# comma-separated PACKAGES) unless the command CHECK (given the root's path) says it is complete. WHAT says what it
# is for, in the messages.
debian_root() {
  local root=$1 suite=$2 packages=$3 what=$4 check=$5 new log old=""
  case "$root" in
    /?*) ;;
    *) echo "$prog: the root for $what must be an absolute path other than / (it is \"$root\")" >&2; exit 1 ;;
  esac
  "$check" "$root" && return 0
  # One maker at a time (scripts/setup and scripts/dist may run at once on a fresh machine); the lock is held until
  # the caller exits. Made again meanwhile by the other: done.
  "${sudo_cmd[@]}" mkdir -p "$(dirname "$root")"
  "${sudo_cmd[@]}" touch "$root.lock"
  exec {lock_fd}<"$root.lock"
  flock "$lock_fd"
  "$check" "$root" && return 0
  if ! command -v debootstrap >/dev/null; then
    echo "$prog: installing debootstrap"
    "${sudo_cmd[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq debootstrap >/dev/null
  fi
  echo "$prog: creating the Debian $suite root $root ($what, about a minute)"
  "${sudo_cmd[@]}" mkdir -p "$(dirname "$root")"
  for old in "$root".new.* "$root".old.*; do  # left by interrupted runs
    if [ -d "$old" ]; then remove_root "$old"; fi
  done
  old=""
  new="$("${sudo_cmd[@]}" mktemp -d "$root.new.XXXXXX")"
  log="$root.debootstrap.log"
  # shellcheck disable=SC2064
  trap "remove_root '$new'" EXIT
  "${sudo_cmd[@]}" chmod 755 "$new"
  if ! "${sudo_cmd[@]}" debootstrap --variant=minbase --include="$packages" "$suite" "$new" \
    http://deb.debian.org/debian 2>&1 | "${sudo_cmd[@]}" tee "$log" >/dev/null; then
    echo "$prog: debootstrap of Debian $suite failed (log: $log): check that deb.debian.org is reachable, then run $prog again" >&2
    exit 1
  fi
  "$check" "$new" ||
    { echo "$prog: debootstrap of Debian $suite did not install what $what needs (log: $log): run $prog again" >&2; exit 1; }
  unmount_under "$new"
  if [ -e "$root" ]; then
    unmount_under "$root"
    old="$root.old.$$"
    "${sudo_cmd[@]}" mv "$root" "$old"
  fi
  "${sudo_cmd[@]}" mv "$new" "$root"
  trap - EXIT
  "${sudo_cmd[@]}" rm -f "$log"
  [ -z "$old" ] || remove_root "$old"
}

# The Debian 11 roots of scripts/dist: one that builds (the oldest glibc the binary claims, 2.31, with gcc, clang
# and the static libelf and zlib) and one with nothing of that, where tests/dist.rs runs and installs what was built
# (Debian 11's python3.9, man, bash completion).
dist_build_root="${PYPERF_DIST_BUILD_ROOT:-/srv/pyperf-bullseye-build}"
dist_build_root="${dist_build_root%/}"
dist_build_packages=gcc,libc6-dev,libelf-dev,zlib1g-dev,pkg-config,clang,make
dist_build_complete() {
  [ -x "$1/usr/bin/clang" ] && [ -x "$1/usr/bin/gcc" ] && [ -f "$1/usr/lib/x86_64-linux-gnu/libelf.a" ] &&
    [ -f "$1/usr/lib/x86_64-linux-gnu/libz.a" ]
}
dist_run_root="${PYPERF_DIST_RUN_ROOT:-/srv/pyperf-bullseye-run}"
dist_run_root="${dist_run_root%/}"
dist_run_packages=python3,man-db,bash-completion
dist_run_complete() {
  [ -x "$1/usr/bin/python3.9" ] && [ -x "$1/usr/bin/man" ] && [ -f "$1/usr/share/bash-completion/bash_completion" ]
}
