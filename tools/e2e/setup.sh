#!/bin/sh
# Installs what the end-to-end tests need: Debian's chromium (for the page
# test) and the node packages pinned in package-lock.json.
set -eu
cd "$(dirname "$0")"
if [ ! -x /usr/bin/chromium ]; then
	SUDO=""
	[ "$(id -u)" -ne 0 ] && SUDO="sudo"
	$SUDO apt-get update
	$SUDO apt-get install -y --no-install-recommends chromium
fi
npm ci --no-audit --no-fund
