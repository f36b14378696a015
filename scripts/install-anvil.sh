#!/usr/bin/env bash
# Unpacks anvil, foundry's development node, from its npm package into a folder: the suites
# run it as a second node implementation beside go-ethereum. The package holds one
# prebuilt binary; npm only fetches it (nothing is run from the package). Quiet when the
# folder already holds that version.
set -euo pipefail
package=${1:?usage: install-anvil.sh <npm package> <version> <folder>}
version=${2:?usage: install-anvil.sh <npm package> <version> <folder>}
dir=${3:?usage: install-anvil.sh <npm package> <version> <folder>}

if [ "$(cat "$dir/.anvil.version" 2>/dev/null)" = "$version" ] && [ -x "$dir/anvil" ]; then
	exit 0
fi
if ! command -v npm >/dev/null; then
	echo "npm is needed to fetch anvil $version ($package): apt-get install --no-install-recommends npm" >&2
	exit 1
fi
echo "installing anvil $version from the npm package $package into $dir: the chain suites run a second node implementation"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "$package@$version" >/dev/null)
tar -xzf "$work"/*.tgz -C "$work"
install -m 0755 "$work/package/bin/anvil" "$dir/anvil"
if ! "$dir/anvil" --version | grep -q "Version: $version"; then
	echo "the unpacked anvil does not say it is $version:" >&2
	"$dir/anvil" --version >&2
	exit 1
fi
echo "$version" >"$dir/.anvil.version"
