#!/bin/sh
# The installed-consumer test (run by exlr8client_consumer_test, which holds
# a lease at SOCKET): installs the `client` component of BUILD into a fresh
# prefix, builds tests/client/consumer/ outside the tree with
# find_package(exlr8client) (shared and static library) and the C check with
# pkg-config, and runs each against the lease. Also checks that the
# installed shared library needs nothing but libc, libm and the loader.
# usage: consumer_test.sh BUILD SOURCE SOCKET WORK
set -eu
build=$1 src=$2 sock=$3 work=$4
prefix=$work/prefix

cmake --install "$build" --prefix "$prefix" --component client >"$work/install.log"

lib=$(ls "$prefix"/lib*/libexlr8client.so.0 "$prefix"/lib/*/libexlr8client.so.0 2>/dev/null | head -n 1)
needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort | tr '\n' ' ')
case $needed in
  "ld-linux-x86-64.so.2 libc.so.6 libm.so.6 " | "libc.so.6 libm.so.6 " | "libc.so.6 " ) ;;
  *) echo "installed $lib needs: $needed (only libc, libm and the loader expected)" >&2; exit 1 ;;
esac
readelf -d "$lib" | grep -q 'SONAME.*\[libexlr8client.so.0\]' || { echo "no SONAME libexlr8client.so.0" >&2; exit 1; }

# find_package
cmake -S "$src/tests/client/consumer" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release >"$work/configure.log"
cmake --build "$work/cmake" >"$work/build.log"
"$work/cmake/consumer" "$sock"
"$work/cmake/consumer_static" "$sock"

# pkg-config
export PKG_CONFIG_PATH="$(dirname "$lib")/pkgconfig"
libdir=$(pkg-config --variable=libdir exlr8client)
cc -std=c11 -Wall -Wextra -Werror $(pkg-config --cflags exlr8client) \
  "$src/tests/client/exlr8client/c_api_check.c" -o "$work/c_pkgconfig" \
  $(pkg-config --libs exlr8client) -Wl,-rpath,"$libdir"
"$work/c_pkgconfig" "$sock"
echo "consumer_test: ok"
