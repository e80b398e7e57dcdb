#!/bin/sh
# The Debian package and `cmake --install` of a build tree (run by ctest as
# package_test; the build's installed targets must be built):
#   1. `cpack -G DEB` makes exlr8d_<version>_<arch>.deb; `dpkg-deb -c` lists
#      the commands, libexlr8client (.so.0 and .a), its headers, .pc file and
#      CMake package, the units and the sysusers file; `dpkg-deb -I` shows
#      Depends computed by dpkg-shlibdeps (where it is) and the maintainer
#      scripts, which are valid sh and idempotent (run twice against stubs).
#   2. The package extracted into a scratch root (with the host's own units
#      beside it, for the targets they name): `systemd-analyze verify
#      --root` passes on every unit without a word of warning, and fails
#      once /usr/bin/exlr8d is taken out of the root (so it does look there);
#      `systemd-sysusers --root` makes the user exlr8d there from the
#      package's sysusers file.
#   3. `cmake --install --prefix P`: the units' commands are P/bin/..., and
#      each installed unit is the in-tree one with only that path changed.
# usage: package_test.sh BUILD SOURCE WORK
set -eu
build=$1 src=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
fail() { echo "package_test: FAIL: $*" >&2; exit 1; }

for tool in cpack dpkg-deb; do
  command -v "$tool" >/dev/null 2>&1 || { echo "package_test: no $tool: skipped"; exit 77; }
done

# ---- 1. the package ----
cpack -G DEB --config "$build/CPackConfig.cmake" -B "$work/cpack" >"$work/cpack.log" 2>&1 ||
  { cat "$work/cpack.log" >&2; fail "cpack -G DEB"; }
version=$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' "$build/CPackConfig.cmake")
arch=$(dpkg --print-architecture)
deb="$work/cpack/exlr8d_${version}_${arch}.deb"
[ -f "$deb" ] || fail "no $deb (made: $(ls "$work/cpack"))"

dpkg-deb -c "$deb" | awk '{ p = $6; if ($7 == "->") p = p " -> " $8; print p }' >"$work/contents"
has() { grep -Eq "^\./usr/$1\$" "$work/contents" || fail "the package has no /usr/$1"; }
has 'bin/exlr8d'
has 'bin/exlr8'
has 'lib/([a-z0-9_]+-linux-gnu[a-z0-9_]*/)?libexlr8client\.so\.0 -> libexlr8client\.so\.[0-9.]+'
has 'lib/([a-z0-9_]+-linux-gnu[a-z0-9_]*/)?libexlr8client\.so -> libexlr8client\.so\.0'
has 'lib/([a-z0-9_]+-linux-gnu[a-z0-9_]*/)?libexlr8client\.so\.[0-9]+\.[0-9]+\.[0-9]+'
has 'lib/([a-z0-9_]+-linux-gnu[a-z0-9_]*/)?libexlr8client\.a'
has 'include/exlr8/exlr8client\.h'
has 'include/exlr8/exlr8client\.hpp'
has 'lib/([a-z0-9_]+-linux-gnu[a-z0-9_]*/)?pkgconfig/exlr8client\.pc'
has 'lib/([a-z0-9_]+-linux-gnu[a-z0-9_]*/)?cmake/exlr8client/exlr8clientConfig\.cmake'
has 'lib/([a-z0-9_]+-linux-gnu[a-z0-9_]*/)?cmake/exlr8client/exlr8clientConfigVersion\.cmake'
has 'lib/([a-z0-9_]+-linux-gnu[a-z0-9_]*/)?cmake/exlr8client/exlr8clientTargets\.cmake'
has 'lib/sysusers\.d/exlr8d\.conf'
units="exlr8d-serve.service exlr8d-pull@.service exlr8d-gc.service exlr8d-gc.timer exlr8d-verify.service exlr8d-verify.timer"
if grep -q '^\./usr/bin/exlr8d-stage$' "$work/contents"; then units="$units exlr8d-stage@.service"; fi
for u in $units; do has "lib/systemd/system/$u"; done
# Nothing outside /usr (an absolute install destination would land there).
if grep -v '^\./usr/' "$work/contents" | grep -qv '^\./$'; then
  fail "files outside /usr: $(grep -v '^\./usr/' "$work/contents" | tr '\n' ' ')"
fi

dpkg-deb -I "$deb" >"$work/info"
grep -q '^ Package: exlr8d$' "$work/info" || fail "Package is not exlr8d"
grep -q "^ Version: $version\$" "$work/info" || fail "Version is not $version"
for s in postinst prerm postrm; do
  grep -Eq "^ +[0-9]+ bytes, +[0-9]+ lines +\* +$s " "$work/info" || fail "no executable $s in the control archive"
done
if command -v dpkg-shlibdeps >/dev/null 2>&1; then
  depends=$(sed -n 's/^ Depends: //p' "$work/info")
  echo "package_test: Depends: $depends"
  # What the ELF files need: the C library, and exlr8d's own libraries.
  for lib in libc6 libsqlite3 libcurl libssl libxxhash; do
    echo "$depends" | grep -Eq "(^|, )$lib[a-z0-9.-]* \(>= [0-9]" || fail "Depends has no versioned $lib: $depends"
  done
  # The shlibs file names libexlr8client.so.0 for packages linking it.
  dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./shlibs | grep -q '^libexlr8client 0 exlr8d' ||
    fail "no shlibs line for libexlr8client 0"
else
  echo "package_test: no dpkg-shlibdeps: Depends not checked"
fi

# The maintainer scripts: valid sh, and run twice (configure, then remove)
# with stubs for systemd's tools, as dpkg would on a reinstall.
mkdir -p "$work/control" "$work/stubs"
dpkg-deb -e "$deb" "$work/control"
for s in postinst prerm postrm; do sh -n "$work/control/$s" || fail "$s is not valid sh"; done
for t in systemd-sysusers systemctl useradd; do
  printf '#!/bin/sh\necho "%s $*" >>"%s/calls"\n' "$t" "$work" >"$work/stubs/$t"
  chmod +x "$work/stubs/$t"
done
for i in 1 2; do
  PATH="$work/stubs:$PATH" sh "$work/control/postinst" configure || fail "postinst configure (run $i)"
done
PATH="$work/stubs:$PATH" sh "$work/control/prerm" remove || fail "prerm remove"
PATH="$work/stubs:$PATH" sh "$work/control/postrm" remove || fail "postrm remove"
PATH="$work/stubs:$PATH" sh "$work/control/postrm" purge || fail "postrm purge"
[ "$(grep -c '^systemd-sysusers ' "$work/calls")" = 2 ] || fail "postinst did not run systemd-sysusers each time: $(cat "$work/calls")"
sysusers_arg=$(sed -n 's/^systemd-sysusers //p' "$work/calls" | head -n 1)
grep -q "^\.$sysusers_arg\$" "$work/contents" || fail "postinst gives systemd-sysusers $sysusers_arg, not in the package"

# ---- 2. systemd-analyze verify --root on the extracted package ----
if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "package_test: no systemd-analyze: units not verified"
elif [ ! -f /usr/lib/systemd/system/sysinit.target ] && [ ! -f /lib/systemd/system/sysinit.target ]; then
  echo "package_test: this machine has no systemd units (sysinit.target): units not verified"
else
  root="$work/root"
  dpkg-deb -x "$deb" "$root"
  unitdir="$root/usr/lib/systemd/system"
  # systemd's own units (sysinit.target, network-online.target, ...), which
  # ours order themselves against; never over ours.
  hostunits=/usr/lib/systemd/system
  [ -f "$hostunits/sysinit.target" ] || hostunits=/lib/systemd/system
  cp -an "$hostunits/." "$unitdir/"
  verify() {  # unit names, looked up in the root's unit path
    (cd "$unitdir" && systemd-analyze verify --root="$root" "$@") >"$work/verify.log" 2>&1
  }
  for u in $units; do
    case $u in *@.service) name=${u%@.service}@test.service ;; *) name=$u ;; esac
    if ! verify "$name" || [ -s "$work/verify.log" ]; then
      cat "$work/verify.log" >&2
      fail "systemd-analyze verify --root of $name"
    fi
  done
  # The check is honest: a command missing from the root fails it.
  mv "$root/usr/bin/exlr8d" "$work/exlr8d.aside"
  if verify exlr8d-serve.service; then fail "verify passed without /usr/bin/exlr8d in the root"; fi
  grep -q '/usr/bin/exlr8d' "$work/verify.log" || { cat "$work/verify.log" >&2; fail "verify failed for another reason"; }
  mv "$work/exlr8d.aside" "$root/usr/bin/exlr8d"
  echo "package_test: systemd-analyze verify --root: $units"
fi

# The sysusers file, applied twice to the extracted root's own /etc (as
# postinst does on every configure): one user exlr8d, home the cache.
if command -v systemd-sysusers >/dev/null 2>&1; then
  root="$work/root"
  [ -d "$root/usr" ] || dpkg-deb -x "$deb" "$root"
  mkdir -p "$root/etc"
  for i in 1 2; do
    systemd-sysusers --root="$root" "$root$sysusers_arg" >"$work/sysusers.log" 2>&1 ||
      { cat "$work/sysusers.log" >&2; fail "systemd-sysusers --root (run $i)"; }
  done
  [ "$(grep -c '^exlr8d:x:[0-9]*:[0-9]*:[^:]*:/var/cache/exlr8:' "$root/etc/passwd")" = 1 ] ||
    fail "systemd-sysusers made no single user exlr8d with home /var/cache/exlr8: $(cat "$root/etc/passwd")"
  grep -q '^exlr8d:' "$root/etc/group" || fail "systemd-sysusers made no group exlr8d"
fi

# ---- 3. cmake --install into a prefix ----
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 || { cat "$work/install.log" >&2; fail "cmake --install"; }
[ -f "$prefix/lib/sysusers.d/exlr8d.conf" ] || fail "no $prefix/lib/sysusers.d/exlr8d.conf"
for u in $units; do
  f="$prefix/lib/systemd/system/$u"
  [ -f "$f" ] || fail "no $f"
  # Every command line (ExecStart=, ExecStartPost=) runs a command of the prefix.
  grep '^Exec' "$f" | while IFS= read -r line; do
    cmd=${line#*=}
    cmd=${cmd%% *}
    case $cmd in "$prefix"/bin/*) ;; *) fail "$u runs $cmd, not a command in $prefix/bin" ;; esac
    [ -x "$cmd" ] || fail "$u runs $cmd, which is not installed"
  done
  grep -q '^Exec' "$f" || case $u in *.timer) ;; *) fail "$u has no Exec line" ;; esac
  # The in-tree unit with only the commands' directory changed.
  sed "s|$prefix/bin/|/usr/local/bin/|g" "$f" | cmp -s - "$src/systemd/$u" || fail "$f differs from systemd/$u beyond the command paths"
done
echo "package_test: ok ($deb)"
