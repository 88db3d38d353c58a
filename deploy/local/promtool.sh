#!/usr/bin/env bash
# Makes sure promtool (Prometheus's rule checker) is on PATH, for the tests of
# deploy/monitoring: installs Debian's prometheus package with apt-get when it is
# missing (as root; otherwise says how).
set -euo pipefail
command -v promtool >/dev/null && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "promtool.sh: promtool not found; install Prometheus's promtool (apt-get install prometheus)" >&2
  exit 1
fi
echo "promtool.sh: installing promtool with apt-get (package prometheus)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends prometheus >&2
command -v promtool >/dev/null
